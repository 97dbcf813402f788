"""What an MCP session returns, under the names the official ``mcp`` SDK gives them (``Tool``,
``CallToolResult``, ``TextContent``, …), with snake_case attributes, made from the wire's JSON.
The package does not depend on that SDK: these are plain frozen dataclasses."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union


@dataclass(frozen=True)
class Tool:
    """A tool the server offers: ``input_schema`` is the JSON Schema of its arguments,
    ``output_schema`` that of its ``structured_content`` when it declares one."""

    name: str
    description: Optional[str] = None
    input_schema: Dict[str, Any] = field(default_factory=dict)
    output_schema: Optional[Dict[str, Any]] = None
    title: Optional[str] = None
    annotations: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class TextContent:
    text: str
    annotations: Optional[Dict[str, Any]] = None
    type: str = "text"


@dataclass(frozen=True)
class ImageContent:
    """``data`` is the image, base64-encoded as the server sent it."""

    data: str
    mime_type: str
    annotations: Optional[Dict[str, Any]] = None
    type: str = "image"


@dataclass(frozen=True)
class AudioContent:
    """``data`` is the audio, base64-encoded as the server sent it."""

    data: str
    mime_type: str
    annotations: Optional[Dict[str, Any]] = None
    type: str = "audio"


@dataclass(frozen=True)
class EmbeddedResource:
    """A resource sent inline: ``resource`` has its ``uri`` and ``text`` or ``blob``."""

    resource: Dict[str, Any]
    annotations: Optional[Dict[str, Any]] = None
    type: str = "resource"


@dataclass(frozen=True)
class ResourceLink:
    """A resource named by its URI, for the client to read if it wants it."""

    uri: str
    name: str
    description: Optional[str] = None
    mime_type: Optional[str] = None
    annotations: Optional[Dict[str, Any]] = None
    type: str = "resource_link"


@dataclass(frozen=True)
class OtherContent:
    """A content item of a type this version of the package does not know: ``data`` is the
    whole item as the server sent it."""

    type: str
    data: Dict[str, Any]


Content = Union[TextContent, ImageContent, AudioContent, EmbeddedResource, ResourceLink, OtherContent]


@dataclass(frozen=True)
class CallToolResult:
    """A tool's answer. ``is_error`` is true when the tool itself failed (its ``content``
    says how): a result, not an exception, as MCP has it, so the caller (a model) can read
    it. ``structured_content`` is the JSON value a tool with an ``output_schema`` returns."""

    content: List[Content]
    structured_content: Any = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text items' text, joined by newlines."""
        return "\n".join(item.text for item in self.content if isinstance(item, TextContent))


@dataclass(frozen=True)
class Notification:
    """What the server said on its own: ``method`` as MCP names it
    (``notifications/progress``, ``notifications/message``,
    ``notifications/tools/list_changed``, …) and its ``params`` in the wire's names
    (``progressToken``, ``progress``, ``total``; ``level``, ``logger``, ``data``)."""

    method: str
    params: Optional[Dict[str, Any]] = None


def notification(wire: Optional[Mapping[str, Any]]) -> Optional[Notification]:
    if wire is None:
        return None
    return Notification(str(wire["method"]), wire.get("params"))


def tool(wire: Mapping[str, Any]) -> Tool:
    return Tool(
        name=wire["name"],
        description=wire.get("description"),
        input_schema=dict(wire.get("inputSchema") or {}),
        output_schema=wire.get("outputSchema"),
        title=wire.get("title"),
        annotations=wire.get("annotations"),
    )


def content(wire: Mapping[str, Any]) -> Content:
    kind = wire.get("type")
    annotations = wire.get("annotations")
    if kind == "text":
        return TextContent(wire["text"], annotations)
    if kind == "image":
        return ImageContent(wire["data"], wire["mimeType"], annotations)
    if kind == "audio":
        return AudioContent(wire["data"], wire["mimeType"], annotations)
    if kind == "resource":
        return EmbeddedResource(dict(wire["resource"]), annotations)
    if kind == "resource_link":
        return ResourceLink(
            wire["uri"], wire["name"], wire.get("description"), wire.get("mimeType"), annotations
        )
    return OtherContent(str(kind), dict(wire))


def call_tool_result(wire: Mapping[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[content(item) for item in wire.get("content") or []],
        structured_content=wire.get("structuredContent"),
        is_error=bool(wire.get("isError")),
    )


def arguments_json(arguments: Optional[Mapping[str, Any]]) -> Optional[str]:
    """A tool's arguments as the JSON object the native call takes."""
    if arguments is None:
        return None
    if not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a mapping, not {type(arguments).__name__}")
    return json.dumps(dict(arguments))
