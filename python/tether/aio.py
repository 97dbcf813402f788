"""The asyncio API: the same calls as :mod:`tether`, as coroutines.

``ex = await tether.aio.connect(url)`` (or ``async with tether.aio.connect(url) as ex``).
Calls run on the client's own threads; a finished call reaches the event loop through one
descriptor the loop watches, so a thousand calls in flight cost the loop nothing while they
wait. Cancelling a ``run`` interrupts its remote command.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal as _signal
import weakref
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Generator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

from . import _mcp, _native
from ._errors import ProcessLost, TimeoutExpired, UnsupportedError
from ._sync import PathLike, Token, _env, _path
from ._types import Args, CompletedProcess, CopyReport, HttpResponse, Output, argv, decoded, header_pairs

__all__ = ["connect", "Executor", "Process", "McpSession"]


class _Bridge:
    """Finished calls of one event loop: futures by id, resolved when the loop drains the
    completion queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._completions = _native.Completions()
        self._futures: Dict[int, "asyncio.Future[Any]"] = {}
        self._ids = itertools.count(1)
        loop.add_reader(self._completions.fileno(), self._drain)

    def _drain(self) -> None:
        for call, ok, value in self._completions.drain():
            future = self._futures.pop(call, None)
            if future is None or future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def future(self, pending: "_native.Pending") -> "asyncio.Future[Any]":
        future = self._loop.create_future()
        call = next(self._ids)
        self._futures[call] = future
        pending.notify(self._completions, call)
        return future


_bridges: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Bridge]" = (
    weakref.WeakKeyDictionary()
)


def _future(pending: "_native.Pending") -> "asyncio.Future[Any]":
    loop = asyncio.get_running_loop()
    bridge = _bridges.get(loop)
    if bridge is None:
        bridge = _bridges[loop] = _Bridge(loop)
    return bridge.future(pending)


async def _call(pending: "_native.Pending") -> Any:
    """Awaits a native call; cancelling the awaiting task cancels the call."""
    future = _future(pending)
    try:
        return await future
    except asyncio.CancelledError:
        pending.cancel()
        raise


class _Connecting:
    """``connect``'s result: await it for the :class:`Executor`, or use it in ``async
    with``."""

    def __init__(self, pending: "_native.Pending") -> None:
        self._pending = pending
        self._executor: Optional[Executor] = None

    def __await__(self) -> Generator[Any, None, "Executor"]:
        return self._open().__await__()

    async def _open(self) -> "Executor":
        if self._executor is None:
            self._executor = Executor(await _call(self._pending))
        return self._executor

    async def __aenter__(self) -> "Executor":
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        if self._executor is not None:
            await self._executor.close()


def connect(
    url: str,
    token: Token = None,
    tls_fingerprint: Optional[str] = None,
    *,
    tls_ca_file: Optional[PathLike] = None,
    session_id: Optional[str] = None,
    client_name: Optional[str] = None,
    recovery_timeout: Optional[float] = None,
    detached_ttl: Optional[float] = None,
) -> _Connecting:
    """Opens a session, as :func:`tether.connect` does (the same arguments)."""
    return _Connecting(
        _native.connect(
            url,
            token=token,
            tls_fingerprint=tls_fingerprint,
            tls_ca_file=_path(tls_ca_file),
            session_id=session_id,
            client_name=client_name,
            recovery_timeout=recovery_timeout,
            detached_ttl=detached_ttl,
        )
    )


class Executor:
    """A session on an exec-server, for asyncio: the methods of :class:`tether.Executor`, as
    coroutines."""

    def __init__(self, native: "_native.NativeExecutor") -> None:
        self._native = native

    async def __aenter__(self) -> "Executor":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<tether.aio.Executor status={self.status!r}>"

    @property
    def session_id(self) -> str:
        return self._native.session_id

    @property
    def status(self) -> str:
        return self._native.status

    def extensions(self) -> Dict[str, Any]:
        return self._native.extensions()

    async def close(self) -> None:
        self._native.close()

    async def run(
        self,
        args: Args,
        *,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        input: Optional[bytes] = None,
        timeout: Optional[float] = None,
        check: bool = False,
        shell: bool = False,
        text: bool = False,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        tty: bool = False,
        interrupt_grace: float = 0.25,
    ) -> CompletedProcess:
        """As :meth:`tether.Executor.run`. Cancelling it interrupts the remote command."""
        if isinstance(input, str):
            input = input.encode(encoding or "utf-8")
        pending = self._native.run(
            argv(args, shell), _path(cwd), _env(env), input, timeout, tty, interrupt_grace
        )
        try:
            code, out, err = await _call(pending)
        except TimeoutExpired as expired:
            expired.cmd = args
            raise
        result = CompletedProcess(
            args, code, decoded(out, text, encoding, errors), decoded(err, text, encoding, errors)
        )
        if check:
            result.check_returncode()
        return result

    async def spawn(
        self,
        args: Args,
        *,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
        tty: bool = False,
        stdin: bool = False,
        shell: bool = False,
        pty_size: Optional[Tuple[int, int]] = None,
    ) -> "Process":
        native = await _call(
            self._native.spawn(argv(args, shell), _path(cwd), _env(env), tty, stdin, pty_size)
        )
        return Process(native)

    async def attach(self, process_id: str) -> "Process":
        native, _lost = await _call(self._native.attach(process_id))
        return Process(native)

    async def processes(self) -> List[Dict[str, Any]]:
        return cast(List[Dict[str, Any]], await _call(self._native.processes()))

    async def read_file(self, path: PathLike) -> bytes:
        return cast(bytes, await _call(self._native.read_file(os.fspath(path))))

    async def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Union[Mapping[str, str], Sequence[Tuple[str, str]], None] = None,
        body: Optional[bytes] = None,
        timeout: Optional[float] = None,
        follow_redirects: bool = True,
    ) -> HttpResponse:
        """Makes an HTTP request from the executor (its network, its DNS) and returns the
        whole response. ``timeout`` covers the whole exchange; without it there is none.
        Raises :class:`tether.HttpRequestError` when no response arrives."""
        data = None if body is None else bytes(body)
        pending = self._native.http_request(
            method, url, header_pairs(headers), data, timeout, follow_redirects
        )
        status, pairs, received = await _call(pending)
        return HttpResponse(status, pairs, received)

    async def write_file(self, path: PathLike, data: bytes) -> None:
        await _call(self._native.write_file(os.fspath(path), bytes(data)))

    async def upload(self, local: PathLike, remote: PathLike, *, recursive: bool = False) -> CopyReport:
        """As :meth:`tether.Executor.upload`; cancelling the task stops the copy and removes
        its temporary files."""
        pending = self._native.upload(os.fspath(local), os.fspath(remote), recursive)
        return cast(CopyReport, await _call(pending))

    async def download(self, remote: PathLike, local: PathLike, *, recursive: bool = False) -> CopyReport:
        """As :meth:`tether.Executor.download`."""
        pending = self._native.download(os.fspath(remote), os.fspath(local), recursive)
        return cast(CopyReport, await _call(pending))

    def mcp_stdio(
        self,
        args: Args,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[PathLike] = None,
        timeout: Optional[float] = None,
        call_timeout: Optional[float] = None,
    ) -> "_McpOpening":
        """As :meth:`tether.Executor.mcp_stdio`: ``session = await ex.mcp_stdio(…)``, or
        ``async with ex.mcp_stdio(…) as session``."""
        return _McpOpening(
            self._native.mcp_stdio(
                argv(args, False), _env(env) or {}, _path(cwd), timeout, call_timeout
            )
        )

    def mcp_http(
        self,
        url: str,
        *,
        headers: Union[Mapping[str, str], Sequence[Tuple[str, str]], None] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
        call_timeout: Optional[float] = None,
    ) -> "_McpOpening":
        """As :meth:`tether.Executor.mcp_http`: awaited, or in ``async with``."""
        return _McpOpening(
            self._native.mcp_http(url, header_pairs(headers), token, timeout, call_timeout)
        )


class _McpOpening:
    """``mcp_stdio``'s and ``mcp_http``'s result: await it for the :class:`McpSession`, or
    use it in ``async with``, which closes the session at the end."""

    def __init__(self, pending: "_native.Pending") -> None:
        self._pending = pending
        self._session: Optional[McpSession] = None

    def __await__(self) -> Generator[Any, None, "McpSession"]:
        return self._open().__await__()

    async def _open(self) -> "McpSession":
        if self._session is None:
            self._session = McpSession(await _call(self._pending))
        return self._session

    async def __aenter__(self) -> "McpSession":
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


class McpSession:
    """An MCP session, for asyncio: the methods of :class:`tether.McpSession`, as
    coroutines. Calls may run concurrently on one session."""

    def __init__(self, native: "_native.NativeMcpSession") -> None:
        self._native = native

    async def __aenter__(self) -> "McpSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def server_info(self) -> Dict[str, Any]:
        return self._native.server_info()

    async def list_tools(self) -> List[_mcp.Tool]:
        return [_mcp.tool(wire) for wire in await _call(self._native.list_tools())]

    async def call_tool(
        self, name: str, arguments: Optional[Mapping[str, Any]] = None
    ) -> _mcp.CallToolResult:
        pending = self._native.call_tool(name, _mcp.arguments_json(arguments))
        return _mcp.call_tool_result(await _call(pending))

    def notifications(self) -> "McpNotifications":
        """As :meth:`tether.McpSession.notifications`: ``async for`` over it."""
        return McpNotifications(self._native.notifications())

    async def close(self) -> None:
        await _call(self._native.close())


class McpNotifications:
    """As :class:`tether.McpNotifications`, for asyncio: ``async for n in
    session.notifications()``, or ``await`` :meth:`next` (a cancelled wait loses
    nothing)."""

    def __init__(self, native: "_native.NativeMcpNotifications") -> None:
        self._native = native
        self._fetching: Optional["asyncio.Future[Any]"] = None

    async def next(self) -> Optional[_mcp.Notification]:
        """The next notification; ``None`` once the session has ended. Bound it with
        ``asyncio.wait_for``."""
        if self._fetching is None:
            self._fetching = _future(self._native.next())
        wire = await asyncio.shield(self._fetching)
        self._fetching = None
        return _mcp.notification(wire)

    def __aiter__(self) -> AsyncIterator[_mcp.Notification]:
        return self

    async def __anext__(self) -> _mcp.Notification:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    @property
    def missed(self) -> int:
        return self._native.missed


class Process:
    """A process on the executor, for asyncio: ``async for out in p`` gives its
    :class:`tether.Output` in order."""

    def __init__(self, native: "_native.NativeProcess") -> None:
        self._native = native
        self._batch: List[Tuple[str, Any]] = []
        # The batch being fetched survives a cancelled wait (``wait_for``'s timeout), so no
        # output is lost when a waiter gives up: the next wait takes it up.
        self._fetching: Optional["asyncio.Future[Any]"] = None
        self._closed = False
        self.returncode: Optional[int] = None

    def __repr__(self) -> str:
        return f"<tether.aio.Process {self.process_id} returncode={self.returncode!r}>"

    @property
    def process_id(self) -> str:
        return self._native.process_id

    async def _next_item(self) -> Optional[Tuple[str, Any]]:
        while not self._batch:
            if self._closed:
                return None
            if self._fetching is None:
                self._fetching = _future(self._native.next_batch())
            batch = await asyncio.shield(self._fetching)
            self._fetching = None
            if not batch:
                self._closed = True
                return None
            batch.reverse()
            self._batch = batch
        item = self._batch.pop()
        if item[0] == "exit":
            self.returncode = item[1]
        return item

    def __aiter__(self) -> AsyncIterator[Output]:
        return self

    async def __anext__(self) -> Output:
        while True:
            item = await self._next_item()
            if item is None:
                raise StopAsyncIteration
            if item[0] != "exit":
                return Output(item[0], item[1])

    async def wait(self) -> int:
        """Waits for the process to end (output not yet read is read and dropped) and returns
        its exit code. Use ``asyncio.wait_for`` for a deadline: no output is lost to it."""
        while await self._next_item() is not None:
            pass
        if self.returncode is None:
            raise ProcessLost(
                f"process {self.process_id} closed without an exit code", kind="protocol"
            )
        return self.returncode

    async def communicate(self, input: Optional[bytes] = None) -> Tuple[bytes, bytes]:
        if input is not None:
            await self.write(input)
            await self.close_stdin()
        out: List[bytes] = []
        err: List[bytes] = []
        while True:
            item = await self._next_item()
            if item is None:
                break
            if item[0] == "stderr":
                err.append(item[1])
            elif item[0] != "exit":
                out.append(item[1])
        return b"".join(out), b"".join(err)

    async def write(self, data: bytes) -> None:
        status = await _call(self._native.write(bytes(data)))
        if status != "accepted":
            raise BrokenPipeError(32, f"stdin of process {self.process_id} is not open ({status})")

    async def close_stdin(self) -> None:
        await _call(self._native.close_stdin())

    async def send_signal(self, sig: Any) -> None:
        await _call(self._native.signal(int(sig) if not isinstance(sig, str) else sig))

    signal = send_signal

    async def interrupt(self) -> None:
        await self.send_signal(_signal.SIGINT)

    async def terminate(self) -> None:
        try:
            await self.send_signal(_signal.SIGTERM)
        except UnsupportedError:
            await self.kill()

    async def kill(self) -> bool:
        return cast(bool, await _call(self._native.terminate()))

    async def resize(self, cols: int, rows: int) -> None:
        await _call(self._native.resize(cols, rows))
