"""MCP over the executor (``Executor.mcp_stdio``, ``Executor.mcp_http``), against both servers,
with ``tether-mcp-test-server``: an MCP server on the official rmcp SDK's server side, built
with the workspace next to ``tether``, whose tools answer predictably."""

from __future__ import annotations

import asyncio
import errno
import os
import select
import subprocess
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

import tether

from conftest import tether_binary

#: How long the test waits for the HTTP server to say where it listens: a server that never
#: does fails the test instead of hanging it.
LISTEN_DEADLINE_SECONDS = 20.0

#: How long the test waits for a closed session's server process to be reported ended: one
#: that never is fails the test instead of hanging it.
EXIT_DEADLINE_SECONDS = 20.0

#: Concurrent tool calls on one async session: enough for their answers to interleave.
CONCURRENT_CALLS = 20


def mcp_test_server() -> Path:
    binary = tether_binary().with_name("tether-mcp-test-server")
    if not binary.is_file():
        pytest.fail(f"{binary} not found: build the workspace first (cargo build --workspace)")
    return binary


def stdio_argv() -> List[str]:
    return [str(mcp_test_server()), "stdio"]


class HttpMcpServer:
    """``tether-mcp-test-server http`` on a loopback port; with ``token``, it demands it."""

    def __init__(self, token: Optional[str] = None) -> None:
        environment = dict(os.environ)
        environment.pop("TETHER_MCP_TEST_TOKEN", None)
        if token is not None:
            environment["TETHER_MCP_TEST_TOKEN"] = token
        self.process = subprocess.Popen(
            [str(mcp_test_server()), "http"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=environment,
        )
        assert self.process.stdout is not None
        line = _readline(self.process.stdout.fileno(), LISTEN_DEADLINE_SECONDS)
        if not line.startswith("listening "):
            self.stop()
            pytest.fail(f"the MCP test server did not say where it listens: {line!r}")
        self.url = line.split(" ", 1)[1].strip()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def _readline(fd: int, deadline: float) -> str:
    """One line from ``fd``, or what came before ``deadline`` seconds passed with nothing."""
    seen = b""
    while not seen.endswith(b"\n"):
        if not select.select([fd], [], [], deadline)[0]:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        seen += chunk
    return seen.decode()


@pytest.fixture
def http_mcp() -> Iterator[HttpMcpServer]:
    server = HttpMcpServer()
    yield server
    server.stop()


@pytest.fixture
def http_mcp_with_token() -> Iterator[HttpMcpServer]:
    server = HttpMcpServer(token="s3cret")
    yield server
    server.stop()


def check_session(session: tether.McpSession) -> None:
    """The handshake's account, the tool list, a call with structured content, and one with
    plain text: what every placement must give alike."""
    assert session.server_info()["serverInfo"]["name"] == "tether-mcp-test-server"
    tools = {tool.name: tool for tool in session.list_tools()}
    assert {"echo", "add", "slow"} <= set(tools)
    assert tools["echo"].input_schema["properties"]["message"]["type"] == "string"

    echoed = session.call_tool("echo", {"message": "hé, there"})
    assert [(item.type, item.text) for item in echoed.content] == [("text", "hé, there")]
    assert isinstance(echoed.content[0], tether.TextContent)
    assert echoed.structured_content == {"echo": "hé, there"}
    assert echoed.is_error is False

    summed = session.call_tool("add", {"a": 2, "b": 40})
    assert summed.text == "42"
    assert summed.structured_content is None


def test_a_stdio_server_on_the_executor(server):
    with tether.connect(server.url) as ex:
        with ex.mcp_stdio(stdio_argv(), env={"TETHER_LOG": "warn"}, cwd="/") as session:
            check_session(session)


def test_an_http_server_reached_from_the_executor(server, http_mcp):
    with tether.connect(server.url) as ex:
        with ex.mcp_http(http_mcp.url, headers={"X-Client": "pytest"}) as session:
            check_session(session)


def test_a_server_that_wants_a_token(server, http_mcp_with_token):
    # Setup: a server that refuses every request without its bearer token.
    with tether.connect(server.url) as ex:
        # Exercise / assert: without it the session cannot be opened, and the kind says why;
        # with it the session works.
        with pytest.raises(tether.ConnectError) as refused:
            ex.mcp_http(http_mcp_with_token.url)
        assert refused.value.kind == "unauthorized"
        assert isinstance(refused.value, ConnectionError)
        with ex.mcp_http(http_mcp_with_token.url, token="s3cret") as session:
            assert session.call_tool("echo", {"message": "in"}).text == "in"


def test_refusals_and_failures_are_the_package_exceptions(server):
    with tether.connect(server.url) as ex:
        # A program that is not there cannot be started: Python's own error, as for spawn,
        # naming the program.
        with pytest.raises(FileNotFoundError) as missing:
            ex.mcp_stdio(["/nonexistent/mcp-server"])
        assert missing.value.errno == errno.ENOENT
        assert missing.value.filename == "/nonexistent/mcp-server"
        # One that may not be run (a directory) is PermissionError.
        with pytest.raises(PermissionError) as refused:
            ex.mcp_stdio(["/"])
        assert refused.value.filename == "/"

        with ex.mcp_stdio(stdio_argv()) as session:
            # A tool the server does not have is the server's JSON-RPC refusal, with its code.
            with pytest.raises(tether.ServerError) as unknown:
                session.call_tool("no-such-tool", {})
            assert isinstance(unknown.value.code, int) and unknown.value.code < 0
            # Arguments that are not a JSON object are refused before anything is sent.
            with pytest.raises(TypeError):
                session.call_tool("echo", ["not", "a", "mapping"])  # type: ignore[arg-type]
        # A call that outlives its bound raises Python's TimeoutError.
        with ex.mcp_stdio(stdio_argv(), call_timeout=0.2) as session:
            with pytest.raises(TimeoutError):
                session.call_tool("slow", {"ms": 60_000})
        with pytest.raises(ValueError):
            ex.mcp_stdio([])
        with pytest.raises(ValueError):
            ex.mcp_stdio(stdio_argv(), cwd="relative/dir")

    # A closed session refuses further calls plainly.
    with tether.connect(server.url) as ex:
        session = ex.mcp_stdio(stdio_argv())
        session.close()
        with pytest.raises(ValueError):
            session.list_tools()


def test_a_server_that_exits_before_the_handshake(server):
    with tether.connect(server.url) as ex:
        with pytest.raises(tether.Disconnected) as ended:
            ex.mcp_stdio(["sh", "-c", "echo 'no MCP here' >&2; exit 3"])
    assert "3" in str(ended.value)


def test_closing_the_session_ends_the_stdio_server(tether_server):
    # Tether lists a session's processes (its processList extension): the server's is there
    # while the session is open and has ended once close() has returned.
    with tether.connect(tether_server.url) as ex:
        session = ex.mcp_stdio(stdio_argv())
        running = [p for p in ex.processes() if p["argv"][:1] == stdio_argv()[:1]]
        assert [p["state"] for p in running] == ["running"]
        session.close()
        # close() returns once the server has been terminated and its handle let go, so it
        # can be followed again here, to its exit.
        process = ex.attach(running[0]["processId"])
        process.wait(timeout=EXIT_DEADLINE_SECONDS)


def test_async_sessions(server, http_mcp):
    async def main() -> None:
        async with tether.aio.connect(server.url) as ex:
            async with ex.mcp_stdio(stdio_argv()) as session:
                tools = await session.list_tools()
                assert "echo" in {tool.name for tool in tools}
                results = await asyncio.gather(
                    *(
                        session.call_tool("echo", {"message": f"m{n}"})
                        for n in range(CONCURRENT_CALLS)
                    )
                )
                assert [r.text for r in results] == [f"m{n}" for n in range(CONCURRENT_CALLS)]
                with pytest.raises(tether.ServerError):
                    await session.call_tool("no-such-tool")
            session = await ex.mcp_http(http_mcp.url)
            try:
                summed = await session.call_tool("add", {"a": 1, "b": 2})
                assert summed.text == "3"
            finally:
                await session.close()

    asyncio.run(main())


# Generous bound for what has already arrived: the notifications below are published before
# the call that caused them returns, so no wait is expected.
NOTIFIED_DEADLINE_SECONDS = 30


def test_notifications_come_in_order_before_the_call_returns(server):
    with tether.connect(server.url) as ex:
        with ex.mcp_stdio(stdio_argv()) as session:
            # Setup: a listener from now on.
            notifications = session.notifications()
            # Exercise: a tool that sends a progress and a log notification per step.
            assert session.call_tool("progress", {"steps": 3}).text == "done 3"
            # Assert: on stdio all six are there, in the order the server sent them.
            said = [notifications.next(timeout=NOTIFIED_DEADLINE_SECONDS) for _ in range(6)]
            assert [n.method for n in said if n is not None] == [
                "notifications/progress",
                "notifications/message",
            ] * 3
            progress = [n.params for n in said if n is not None and n.method == "notifications/progress"]
            assert [(p["progress"], p["total"], p["message"]) for p in progress] == [
                (1, 3, "step 1"),
                (2, 3, "step 2"),
                (3, 3, "step 3"),
            ]
            logs = [n.params for n in said if n is not None and n.method == "notifications/message"]
            assert [(l["level"], l["logger"], l["data"]) for l in logs] == [
                ("info", "progress", f"step {n}") for n in (1, 2, 3)
            ]
            assert notifications.missed == 0
        # Once the session has ended the listener ends too.
        assert list(notifications) == []


def test_async_notifications_over_http(server, http_mcp):
    async def main() -> None:
        async with tether.aio.connect(server.url) as ex:
            async with ex.mcp_http(http_mcp.url) as session:
                notifications = session.notifications()
                assert (await session.call_tool("progress", {"steps": 2})).text == "done 2"
                # Over HTTP the progress rides the call's own stream, ahead of its answer;
                # the log messages travel on the session's stream, in their own time.
                progress = []
                while len(progress) < 2:
                    said = await asyncio.wait_for(notifications.next(), NOTIFIED_DEADLINE_SECONDS)
                    assert said is not None
                    if said.method == "notifications/progress":
                        progress.append(said.params["progress"])
                assert progress == [1, 2]

    asyncio.run(main())
