"""Servers the tests run against: a real ``tether serve`` and the reference ``codex
exec-server`` (Codex CLI 0.171.0, installed by the repository's test command), each on a
loopback port of its own, stopped when the test ends.

``TETHER_BIN`` names the ``tether`` binary (default: the workspace's debug build).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (
    ROOT
    / "tests/reference/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
)


def tether_binary() -> Path:
    binary = Path(os.environ.get("TETHER_BIN", ROOT / "target/debug/tether"))
    if not binary.is_file():
        pytest.fail(f"{binary} not found: build it first (cargo build --bin tether)")
    return binary


class Server:
    """A running exec-server; ``url`` is where it listens."""

    def __init__(self, kind: str, argv: List[str], env: Optional[dict] = None) -> None:
        self.kind = kind
        self.scratch = tempfile.mkdtemp(prefix=f"tether-py-{kind}-", dir="/var/tmp")
        environment = dict(os.environ)
        # The reference keeps its state under CODEX_HOME; not under /tmp, where it refuses
        # to make the alias its sandbox runs.
        environment["CODEX_HOME"] = self.scratch
        environment.update(env or {})
        self.process = subprocess.Popen(
            argv + ["--listen", "ws://127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline().decode().strip()
        if not first.startswith("ws://"):
            self.stop()
            pytest.fail(f"{kind} did not print its URL (first line: {first!r})")
        self.url = first
        # Keep reading so the server never blocks on a full pipe.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


def start(kind: str, *extra: str) -> Server:
    if kind == "tether":
        return Server(kind, [str(tether_binary()), "serve", *extra])
    if not REFERENCE.is_file():
        pytest.fail(
            f"the reference exec-server is not installed at {REFERENCE}: run scripts/test, "
            "or npm install --prefix tests/reference"
        )
    return Server(kind, [str(REFERENCE), "exec-server", *extra])


@pytest.fixture(params=["tether", "reference"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """Each test using it runs against both servers."""
    running = start(request.param)
    yield running
    running.stop()


@pytest.fixture
def tether_server() -> Iterator[Server]:
    """For what only Tether serves (its extensions)."""
    running = start("tether")
    yield running
    running.stop()


@pytest.fixture
def reference_server() -> Iterator[Server]:
    running = start("reference")
    yield running
    running.stop()


class CuttingProxy:
    """A TCP proxy on loopback in front of ``port`` that cuts every connection it carries once
    it has lived ``period`` seconds: a network that keeps dropping, where each new connection
    still gets ``period`` to make progress (cuts on a clock of their own would, on a loaded
    machine, land inside one reconnection after another)."""

    def __init__(self, port: int, period: float, cutting: bool = True) -> None:
        self.upstream = port
        self.period = period
        #: Set once the cuts are to begin (``start_cutting``).
        self.cutting = threading.Event()
        if cutting:
            self.cutting.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        #: Each connection's two sockets, with when it was made.
        self.live: List[Tuple[float, socket.socket, socket.socket]] = []
        self.cuts = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._cut, daemon=True).start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.live.append((time.monotonic(), client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def start_cutting(self) -> None:
        self.cutting.set()

    def stop_cutting(self) -> None:
        """No cut after this returns (one under way has ended)."""
        with self.lock:
            self.cutting.clear()

    def _cut(self) -> None:
        # Looked at four times a period, so a connection is cut within a quarter period of
        # its time.
        while not self.stopped.wait(self.period / 4):
            with self.lock:
                if not self.cutting.is_set():
                    continue
                now = time.monotonic()
                due = [link for link in self.live if now - link[0] >= self.period]
                self.live = [link for link in self.live if now - link[0] < self.period]
                if due:
                    self.cuts += 1
                for _, client, upstream in due:
                    for end in (client, upstream):
                        try:
                            end.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        end.close()

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        with self.lock:
            for _, client, upstream in self.live:
                client.close()
                upstream.close()


@pytest.fixture
def fifo_dir() -> Iterator[Path]:
    """A directory for FIFOs through which a command tells the test where it is: the
    executor runs on this machine, so the test opens them directly."""
    directory = Path(tempfile.mkdtemp(prefix="tether-py-fifo-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def fifo(directory: Path, name: str) -> Path:
    path = directory / name
    os.mkfifo(path)
    return path


#: How long a test waits for a command to write a line to its FIFO before failing: a
#: command that never writes must fail its test, never hang the suite.
FIFO_DEADLINE_SECONDS = 60.0


def read_fifo(path: Path) -> str:
    """The first line a command writes to the FIFO ``path``, with its newline.

    Opened read-write, so the open never blocks waiting for a writer (Linux allows it on a
    FIFO), and read with a deadline, so a command that never writes fails the test."""
    deadline = time.monotonic() + FIFO_DEADLINE_SECONDS
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        seen = b""
        while not seen.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"nothing written to {path} in {FIFO_DEADLINE_SECONDS} s; seen {seen!r}")
            seen += os.read(fd, 4096)
        return seen.decode()
    finally:
        os.close(fd)
