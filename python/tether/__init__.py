"""Tether for Python: processes and files on a remote executor, through Tether's own client,
so a dropped network connection loses nothing.

    import tether

    with tether.connect("ws://127.0.0.1:4500") as ex:
        r = ex.run(["sh", "-c", "echo hi; exit 3"])
        r.returncode, r.stdout          # 3, b"hi\\n"

Files and trees go up and down as scp copies them: ``ex.upload("./src", "/work/src",
recursive=True)``, ``ex.download("/var/log/app.log", ".")``, each giving a
:class:`CopyReport` (the copier ``tether cp`` uses: staged and renamed into place, modes,
times and links kept on a Tether server).

MCP servers run through the executor too: ``ex.mcp_stdio(["npx", "-y", "server"])`` starts
one there as a process, ``ex.mcp_http(url)`` reaches one from its network; either gives an
:class:`McpSession` (``list_tools``, ``call_tool``).

The blocking API is here; :mod:`tether.aio` has the same calls as coroutines. It speaks the
exec-server protocol, so it drives a ``tether serve`` or Codex's own ``codex exec-server``
(where a call needs a Tether extension, the reference raises :class:`UnsupportedError`).
"""

from . import aio
from ._errors import (
    CalledProcessError,
    ConnectError,
    CopyError,
    Disconnected,
    FileSystemError,
    HttpRequestError,
    ProcessLost,
    ProtocolError,
    ServerError,
    SessionLost,
    TetherError,
    TimeoutExpired,
    UnsupportedError,
)
from ._mcp import (
    AudioContent,
    CallToolResult,
    Content,
    EmbeddedResource,
    ImageContent,
    Notification,
    OtherContent,
    ResourceLink,
    TextContent,
    Tool,
)
from ._sync import Executor, McpNotifications, McpSession, Process, connect
from ._types import CompletedProcess, CopyReport, HttpResponse, Output

__all__ = [
    "aio",
    "connect",
    "Executor",
    "Process",
    "CompletedProcess",
    "Output",
    "HttpResponse",
    "CopyReport",
    "McpSession",
    "McpNotifications",
    "Notification",
    "Tool",
    "CallToolResult",
    "Content",
    "TextContent",
    "ImageContent",
    "AudioContent",
    "EmbeddedResource",
    "ResourceLink",
    "OtherContent",
    "TetherError",
    "ConnectError",
    "SessionLost",
    "Disconnected",
    "ProcessLost",
    "ServerError",
    "ProtocolError",
    "UnsupportedError",
    "FileSystemError",
    "HttpRequestError",
    "CopyError",
    "CalledProcessError",
    "TimeoutExpired",
]
