"""The blocking API: :func:`connect`, :class:`Executor`, :class:`Process`.

Every call waits with the GIL released, so other Python threads run meanwhile; Ctrl-C
interrupts a wait at once (and a ``run``'s remote command with it).
"""

from __future__ import annotations

import os
import signal as _signal
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, cast

from . import _mcp, _native
from ._errors import ProcessLost, TimeoutExpired, UnsupportedError
from ._types import Args, CompletedProcess, CopyReport, HttpResponse, Output, argv, decoded, header_pairs

PathLike = Union[str, "os.PathLike[str]"]
Token = Union[str, Callable[[], Optional[str]], None]


def _path(path: Optional[PathLike]) -> Optional[str]:
    return None if path is None else os.fspath(path)


def _env(env: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    return None if env is None else {str(k): str(v) for k, v in env.items()}


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
) -> "Executor":
    """Opens a session on the exec-server at ``url`` (``ws://`` or ``wss://``).

    ``token`` is sent as a bearer token; a callable is asked again before every reconnection,
    for a token that is renewed while the program runs. ``tls_fingerprint`` pins a
    ``wss://`` server's certificate (``SHA256:…``, as ``tether serve --tls-self-signed``
    prints it); ``tls_ca_file`` trusts a private CA instead of the system's roots.
    ``session_id`` takes up a session this or another program left (its processes kept
    running). ``recovery_timeout`` (seconds, 25 by default) is how long a dropped connection
    is retried before the session is given up; ``detached_ttl`` asks a Tether server to keep
    the session that long once no client holds it.
    """
    pending = _native.connect(
        url,
        token=token,
        tls_fingerprint=tls_fingerprint,
        tls_ca_file=_path(tls_ca_file),
        session_id=session_id,
        client_name=client_name,
        recovery_timeout=recovery_timeout,
        detached_ttl=detached_ttl,
    )
    return Executor(pending.wait())


class Executor:
    """A session on an exec-server: processes started, followed and controlled there, and its
    files. A dropped connection is recovered underneath: no call sees it unless the session
    is lost. Use it as a context manager, or :meth:`close` it."""

    def __init__(self, native: "_native.NativeExecutor") -> None:
        self._native = native

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tether.Executor status={self.status!r}>"

    @property
    def session_id(self) -> str:
        """The session's id: pass it to ``connect(…, session_id=…)`` to take the session up
        again, from this program after a restart or from another. It grants control of the
        session's processes: keep it as secret as a token."""
        return self._native.session_id

    @property
    def status(self) -> str:
        """``"connected"``, ``"recovering"`` (the connection dropped; it is being made
        again), ``"failed"`` or ``"closed"``."""
        return self._native.status

    def extensions(self) -> Dict[str, Any]:
        """What the server offers beyond the reference exec-server's protocol (empty on the
        reference): ``closeStdin``, ``ptySize``, ``signals``, ``processList``, …"""
        return self._native.extensions()

    def close(self) -> None:
        """Closes the connection. The server keeps the session, and its processes running,
        for its detached time; :attr:`session_id` takes it up again."""
        self._native.close()

    def run(
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
        """Runs a command to its end and returns its exit code and output, as
        ``subprocess.run(…, capture_output=True)`` does.

        ``cwd`` defaults to the server's working directory; ``env``, when given, is the
        command's whole environment (otherwise it inherits the server's). ``input`` is written
        to its stdin, which is then closed (a Tether server's ``closeStdin`` extension).
        ``timeout`` kills it and raises :class:`tether.TimeoutExpired`; ``check`` raises
        :class:`tether.CalledProcessError` for a non-zero exit. A program that is not there
        raises ``FileNotFoundError``. ``tty`` runs it on a terminal (one ``stdout``).

        Ctrl-C while it runs sends the remote command SIGINT, and kills it ``interrupt_grace``
        seconds later if it has not ended (0.25, the grace ``subprocess.run`` gives its own
        child; a command that cleans up on SIGINT may need longer).
        """
        if isinstance(input, str):
            input = input.encode(encoding or "utf-8")
        command = argv(args, shell)
        try:
            code, out, err = self._native.run(
                command, _path(cwd), _env(env), input, timeout, tty, interrupt_grace
            ).wait()
        except TimeoutExpired as expired:
            expired.cmd = args
            raise
        result = CompletedProcess(
            args, code, decoded(out, text, encoding, errors), decoded(err, text, encoding, errors)
        )
        if check:
            result.check_returncode()
        return result

    def spawn(
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
        """Starts a command and returns its :class:`Process` at once. ``stdin=True`` keeps
        its input open for :meth:`Process.write`; ``tty=True`` runs it on a terminal
        (``pty_size``: ``(cols, rows)``, a Tether extension)."""
        native = self._native.spawn(argv(args, shell), _path(cwd), _env(env), tty, stdin, pty_size)
        return Process(native.wait())

    def attach(self, process_id: str) -> "Process":
        """Follows a process this session started before (from the oldest output the server
        still holds): after ``connect(…, session_id=…)``, say, in a program that restarted."""
        native, _lost = self._native.attach(process_id).wait()
        return Process(native)

    def processes(self) -> List[Dict[str, Any]]:
        """The session's processes (a Tether extension): each a dict with ``processId``,
        ``argv``, ``running``, ``exitCode``, …"""
        return cast(List[Dict[str, Any]], self._native.processes().wait())

    def read_file(self, path: PathLike) -> bytes:
        """The whole file at ``path`` on the executor. ``FileNotFoundError`` when missing."""
        return cast(bytes, self._native.read_file(os.fspath(path)).wait())

    def http_request(
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
        status, pairs, received = pending.wait()
        return HttpResponse(status, pairs, received)

    def write_file(self, path: PathLike, data: bytes) -> None:
        """Creates or replaces the file at ``path`` on the executor with ``data``."""
        self._native.write_file(os.fspath(path), bytes(data)).wait()

    def upload(self, local: PathLike, remote: PathLike, *, recursive: bool = False) -> CopyReport:
        """Copies ``local`` (here) to ``remote`` (an absolute path on the executor) as
        ``scp`` does: into ``remote`` under its own name when that is a directory, else as
        ``remote`` (a trailing ``/`` names a directory); a directory only with
        ``recursive=True``, links in it copied as links. Each file is written under a
        temporary name and renamed into place whole; modes, times and links are kept on a
        Tether server. Entries of a tree that cannot be read are skipped and named in the
        report's ``skipped``; anything else that goes wrong raises (``FileNotFoundError``,
        ``PermissionError``, ``IsADirectoryError``, ``NotADirectoryError``,
        :class:`CopyError`, …). Ctrl-C stops the copy and removes its temporary files."""
        pending = self._native.upload(os.fspath(local), os.fspath(remote), recursive)
        return cast(CopyReport, pending.wait())

    def download(self, remote: PathLike, local: PathLike, *, recursive: bool = False) -> CopyReport:
        """Copies ``remote`` (an absolute path on the executor) to ``local`` (here), as
        :meth:`upload` copies the other way."""
        pending = self._native.download(os.fspath(remote), os.fspath(local), recursive)
        return cast(CopyReport, pending.wait())

    def mcp_stdio(
        self,
        args: Args,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[PathLike] = None,
        timeout: Optional[float] = None,
        call_timeout: Optional[float] = None,
    ) -> "McpSession":
        """Starts the MCP server ``args`` as a process on the executor and opens an MCP
        session with it over its stdin and stdout; closing the session ends the process.

        The server runs in ``cwd`` (the executor's working directory by default) with the
        executor's core variables (``PATH``, ``HOME``, …) and ``env``, nothing else of its
        environment. ``timeout`` (seconds, 30 by default) bounds the handshake and each
        listing, ``call_timeout`` each tool call (none by default). A server program that is
        not there raises ``FileNotFoundError`` (one that may not be run, ``PermissionError``),
        as for :meth:`spawn`; one that cannot be started otherwise raises
        :class:`tether.ConnectError` (``kind == "launch"``)."""
        pending = self._native.mcp_stdio(
            argv(args, False), _env(env) or {}, _path(cwd), timeout, call_timeout
        )
        return McpSession(pending.wait())

    def mcp_http(
        self,
        url: str,
        *,
        headers: Union[Mapping[str, str], Sequence[Tuple[str, str]], None] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
        call_timeout: Optional[float] = None,
    ) -> "McpSession":
        """Opens an MCP session with the Streamable HTTP server at ``url``, reached from the
        executor (its network, its DNS: ``http://127.0.0.1:…`` is the executor's own
        loopback). ``headers`` go with every request, ``token`` as ``Authorization: Bearer``;
        a server that wants other credentials raises :class:`tether.ConnectError`
        (``kind == "unauthorized"``). ``timeout`` and ``call_timeout`` as for
        :meth:`mcp_stdio`."""
        pending = self._native.mcp_http(url, header_pairs(headers), token, timeout, call_timeout)
        return McpSession(pending.wait())


class McpSession:
    """An MCP session whose server the executor places, with the calls of the ``mcp`` SDK's
    ``ClientSession``. A request that changes nothing (the handshake, a listing) is sent again
    if no answer came; a tool call never is: one whose answer was lost raises
    :class:`tether.Disconnected` (it may have run). A server's JSON-RPC refusal raises
    :class:`tether.ServerError`. Use it as a context manager, or :meth:`close` it."""

    def __init__(self, native: "_native.NativeMcpSession") -> None:
        self._native = native

    def __enter__(self) -> "McpSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def server_info(self) -> Dict[str, Any]:
        """What the server said of itself in the handshake: ``serverInfo`` (its ``name`` and
        ``version``), ``capabilities``, ``protocolVersion``, ``instructions``."""
        return self._native.server_info()

    def list_tools(self) -> List[_mcp.Tool]:
        """Every tool the server offers (all pages)."""
        return [_mcp.tool(wire) for wire in self._native.list_tools().wait()]

    def call_tool(
        self, name: str, arguments: Optional[Mapping[str, Any]] = None
    ) -> _mcp.CallToolResult:
        """Calls tool ``name`` with ``arguments`` (JSON values), once. A tool that failed
        is a result with ``is_error`` true, not an exception."""
        wire = self._native.call_tool(name, _mcp.arguments_json(arguments)).wait()
        return _mcp.call_tool_result(wire)

    def notifications(self) -> "McpNotifications":
        """What the server says on its own from now on — a tool call's progress, log
        messages, changed lists — in the order it said it; a call's progress is there before
        the call returns."""
        return McpNotifications(self._native.notifications())

    def close(self) -> None:
        """Ends the session: a stdio server's process is terminated (this returns once it
        is), an HTTP session deleted. With calls still in flight on other threads it returns
        at once, and the session ends when the last of them does."""
        self._native.close().wait()


class McpNotifications:
    """A session's notifications from the moment :meth:`McpSession.notifications` was
    called: iterate over it (until the session ends), or take them one at a time with
    :meth:`next`. It keeps a backlog of 1,024; a reader further behind skips the oldest and
    counts them in :attr:`missed`."""

    def __init__(self, native: "_native.NativeMcpNotifications") -> None:
        self._native = native
        # The wait in flight survives a timeout, so no notification is taken and lost.
        self._pending: Optional["_native.Pending"] = None

    def next(self, timeout: Optional[float] = None) -> Optional[_mcp.Notification]:
        """The next notification, waiting for it (``timeout`` seconds at most, then
        ``TimeoutError``); ``None`` once the session has ended and all before its end have
        been taken."""
        if self._pending is None:
            self._pending = self._native.next()
        wire = self._pending.wait(timeout)
        self._pending = None
        return _mcp.notification(wire)

    def __iter__(self) -> Iterator[_mcp.Notification]:
        while True:
            item = self.next()
            if item is None:
                return
            yield item

    @property
    def missed(self) -> int:
        """Notifications skipped because this reader fell more than the backlog behind."""
        return self._native.missed


class Process:
    """A process on the executor. Iterate over it for its :class:`Output`, in order; the
    handle holds a bounded amount its reader has not taken (the server keeps the rest), so a
    slow reader never makes it grow. It survives dropped connections; dropping the object
    stops following the process without killing it."""

    def __init__(self, native: "_native.NativeProcess") -> None:
        self._native = native
        self._batch: List[Tuple[str, Any]] = []
        self._pending: Optional["_native.Pending"] = None
        self._closed = False
        self.returncode: Optional[int] = None
        """The exit code, once the process's exit has been read (by iterating or waiting)."""

    def __repr__(self) -> str:
        return f"<tether.Process {self.process_id} returncode={self.returncode!r}>"

    @property
    def process_id(self) -> str:
        return self._native.process_id

    def _fill(self, timeout: Optional[float]) -> bool:
        """Makes sure there is something in the batch: false once the process has closed."""
        while not self._batch:
            if self._closed:
                return False
            if self._pending is None:
                self._pending = self._native.next_batch()
            batch = self._pending.wait(timeout, cancel_on_interrupt=False)
            self._pending = None
            if not batch:
                self._closed = True
                return False
            batch.reverse()
            self._batch = batch
        return True

    def _next_item(self, timeout: Optional[float] = None) -> Optional[Tuple[str, Any]]:
        if not self._fill(timeout):
            return None
        item = self._batch.pop()
        if item[0] == "exit":
            self.returncode = item[1]
        return item

    def __iter__(self) -> Iterator[Output]:
        return self

    def __next__(self) -> Output:
        while True:
            item = self._next_item()
            if item is None:
                raise StopIteration
            if item[0] != "exit":
                return Output(item[0], item[1])

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the process to end and returns its exit code. Output not yet read is
        read and dropped. ``timeout`` raises :class:`tether.TimeoutExpired` (the process goes
        on; wait again)."""
        while True:
            try:
                item = self._next_item(timeout)
            except TimeoutError as expired:
                if isinstance(expired, TimeoutExpired):
                    raise
                raise TimeoutExpired(self.process_id, cast(float, timeout)) from None
            if item is None:
                break
        if self.returncode is None:
            raise ProcessLost(
                f"process {self.process_id} closed without an exit code", kind="protocol"
            )
        return self.returncode

    def communicate(
        self, input: Optional[bytes] = None, timeout: Optional[float] = None
    ) -> Tuple[bytes, bytes]:
        """Writes ``input`` (then closes stdin), reads everything until the process ends and
        returns ``(stdout, stderr)``; a terminal's output is in ``stdout``."""
        if input is not None:
            self.write(input)
            self.close_stdin()
        out: List[bytes] = []
        err: List[bytes] = []
        while True:
            try:
                item = self._next_item(timeout)
            except TimeoutError:
                raise TimeoutExpired(
                    self.process_id, cast(float, timeout), b"".join(out), b"".join(err)
                ) from None
            if item is None:
                break
            if item[0] == "stderr":
                err.append(item[1])
            elif item[0] != "exit":
                out.append(item[1])
        return b"".join(out), b"".join(err)

    def write(self, data: bytes) -> None:
        """Writes to the process's stdin (started with ``stdin=True``). Applied exactly once,
        however often a dropped connection makes the client send it."""
        status = self._native.write(bytes(data)).wait()
        if status != "accepted":
            raise BrokenPipeError(32, f"stdin of process {self.process_id} is not open ({status})")

    def close_stdin(self) -> None:
        """Ends the process's input (a Tether extension)."""
        self._native.close_stdin().wait()

    def send_signal(self, sig: Union[int, str]) -> None:
        """Sends a signal to the process group: ``signal.SIGINT`` on any server; ``SIGTERM``,
        ``SIGKILL``, ``SIGHUP``, ``SIGQUIT``, ``SIGUSR1`` and ``SIGUSR2`` on a Tether server."""
        self._native.signal(int(sig) if not isinstance(sig, str) else sig).wait()

    signal = send_signal

    def interrupt(self) -> None:
        """SIGINT, as Ctrl-C at a terminal."""
        self.send_signal(_signal.SIGINT)

    def terminate(self) -> None:
        """SIGTERM where the server delivers it (Tether), else a kill, as ``Popen.terminate``
        asks the process to end."""
        try:
            self.send_signal(_signal.SIGTERM)
        except UnsupportedError:
            self.kill()

    def kill(self) -> bool:
        """Kills the process group at once: whether it was still running."""
        return cast(bool, self._native.terminate().wait())

    def resize(self, cols: int, rows: int) -> None:
        """Sets a terminal process's size (a Tether extension)."""
        self._native.resize(cols, rows).wait()
