"""Exceptions raised by tether.

Python's own exceptions are raised where one fits: ``FileNotFoundError`` for a program or file
that is not there, ``PermissionError`` for one that may not be run or read. Everything else
derives from :class:`TetherError`; the classes that mean a lost link also derive from
``ConnectionError``, and :class:`TimeoutExpired` from ``TimeoutError``.
"""

from __future__ import annotations

import subprocess
from typing import Any, Optional


class TetherError(Exception):
    """Base of the exceptions tether defines."""


class ConnectError(TetherError, ConnectionError):
    """No session could be made: nobody listening, the token refused, the certificate not
    trusted.

    ``kind`` says which, for a program to decide on: ``"network"``, ``"timeout"``,
    ``"refused"`` (``status`` holds the HTTP status; 401: the token), ``"invalid_url"``,
    ``"invalid_token"``, ``"untrusted_certificate"``, ``"wrong_fingerprint"``, ``"not_tls"``,
    ``"not_http"``, ``"tls"``, ``"tls_setup"``, ``"handshake"``.
    """

    def __init__(self, message: str, kind: str = "other", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class SessionLost(TetherError, ConnectionError):
    """The client gave up on its session (the server stayed unreachable past the recovery
    time, or the session is gone); every later call raises it too. ``server_went_away``: the
    server had said it was shutting down, rather than becoming unreachable."""

    def __init__(self, message: str, server_went_away: bool = False) -> None:
        super().__init__(message)
        self.server_went_away = server_went_away


class Disconnected(TetherError, ConnectionError):
    """The connection dropped while a call that cannot safely be repeated was in flight: it
    may or may not have taken effect. ``kind``: ``"closed"``, ``"going_away"``, ``"silent"``
    or ``"transport"``."""

    def __init__(self, message: str, kind: str = "closed") -> None:
        super().__init__(message)
        self.kind = kind


class ProcessLost(TetherError):
    """A process can no longer be followed. It may still be running, unless
    ``server_went_away``.

    ``kind`` says why, for a program to decide on:

    - ``"fell_behind"``: this program read the process's output slower than it came, and the
      server no longer holds what was missed (read sooner, or have the server retain more);
    - ``"output_lost"``: after a reconnect, output not yet delivered was no longer held;
    - ``"session_lost"``: the client gave up on its session (``tether.SessionLost`` for the
      calls); ``server_went_away`` is true when the server said it was shutting down, which
      stops its processes too — otherwise the process may still run, and the session can be
      taken up again with ``connect(url, session_id=…)`` and ``attach``;
    - ``"start_uncertain"``: the connection dropped before the start was answered; whatever
      started is being terminated;
    - ``"server"``: the server said the process can no longer be followed;
    - ``"protocol"``: the server's account of the process made no sense (events out of order,
      a close without an exit code);
    - ``"other"``: a kind this version of the package does not know.
    """

    def __init__(self, message: str, kind: str = "other", server_went_away: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.server_went_away = server_went_away


class ServerError(TetherError):
    """The server refused a request. ``code`` is the JSON-RPC error code, ``data`` its
    details (or ``None``)."""

    def __init__(self, message: str, code: int = 0, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class ProtocolError(TetherError):
    """The server sent something this client does not understand."""


class UnsupportedError(TetherError, NotImplementedError):
    """The server does not offer what was asked (a Tether extension the reference lacks);
    nothing was sent."""


class FileSystemError(TetherError, OSError):
    """A file operation failed otherwise than not found or permission denied (not a file,
    a directory not empty, …)."""


class CopyError(TetherError):
    """An ``upload`` or ``download`` stopped for a reason no built-in exception names:
    ``kind`` is ``"through_link"`` (the destination has a symbolic link where the copy has a
    directory: nothing is written through it), ``"file_where_directory"``,
    ``"too_many_entries"`` (more than 1,000,000), ``"too_deep"`` (more than 256 levels),
    ``"not_a_file_name"`` (a listing named ``..`` or ``a/b``), ``"dangling_link"``,
    ``"special"`` (a FIFO, socket or device named as the source), ``"no_name"`` or
    ``"other"``. A missing path, a permission refused, a directory where a file goes and the
    reverse are Python's own ``FileNotFoundError``, ``PermissionError``,
    ``IsADirectoryError`` and ``NotADirectoryError``."""

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind


class HttpRequestError(TetherError):
    """An HTTP request made from the executor failed: ``kind`` is ``"invalid"`` (nothing was
    sent), ``"failed"`` (no response: connection, TLS, timeout, redirects) or ``"body"`` (the
    body broke off)."""

    def __init__(self, message: str, kind: str = "failed") -> None:
        super().__init__(message)
        self.kind = kind


class CalledProcessError(TetherError, subprocess.CalledProcessError):
    """``run(…, check=True)`` and the command exited non-zero."""


class TimeoutExpired(TetherError, subprocess.TimeoutExpired, TimeoutError):
    """``run(…, timeout=…)`` expired (the command was killed), or ``wait(timeout=…)`` did
    (the process goes on). ``output`` and ``stderr`` hold what ``run`` had collected."""

    def __str__(self) -> str:
        return subprocess.TimeoutExpired.__str__(self)
