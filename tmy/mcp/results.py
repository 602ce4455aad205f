"""A tool's ``CallToolResult`` as what tmy hands on: one bounded text, and the raw parts.

The model (and a rule's ``MCP`` step) gets text, so each content block becomes text:

- text blocks: their text, joined by newlines;
- an image or audio block: a short placeholder, ``[image image/png, 1.2 kB]`` — the
  bytes would only be noise (or cost) to a text model;
- an embedded resource: ``[resource URI]`` and its text, or a placeholder for a blob;
- a resource link: ``[resource link NAME: URI]``.

When no block carries text (none at all, or only images and links) and the tool
gave ``structuredContent``, that comes first, as compact JSON — so a tool that
answers only with structured data still says something. The text is cut at
``max_chars`` with the same marker tmy's own tool results use
(``…(cut: N characters in all)``). The daemon's bound is
``limits.max_reply_chars`` (50,000 by default: what one reply may hold; the LLM's
tool loop cuts what the model sees to its own, smaller, limit).

``content`` keeps the blocks as JSON-able dicts for the run's record, except that a
long base64 payload (an image's ``data``, a blob) is replaced by its size.

A secret tmy was configured with (:mod:`tmy.redact`: a ``${VAR}`` in a server's ``env`` or
``headers``, a credential-named value, an API key) that a tool says back is ``***`` in the
text, the structured content and the recorded blocks alike: the model, the user and the
run's record never see it (the log masks it anyway).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmy import redact
from tmy.config.settings import Limits

if TYPE_CHECKING:  # deferred: the SDK is ~0.5 s of every CLI start
    import mcp_types as types

DEFAULT_MAX_RESULT_CHARS = Limits().max_reply_chars
_KEPT_PAYLOAD_CHARS = 256  # base64 longer than this is dropped from the recorded blocks


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one tool call gave back."""

    text: str  # the content as text (see the module's doc); bounded
    structured: Any | None  # structuredContent, if any
    is_error: bool  # the tool said isError
    content: tuple[dict[str, Any], ...]  # the raw content blocks, as JSON-able dicts (for records)


def to_result(
    result: types.CallToolResult, max_chars: int = DEFAULT_MAX_RESULT_CHARS
) -> CallResult:
    """``result`` mapped and bounded (see the module's doc)."""
    parts: list[str] = []
    texty = False
    for block in result.content:
        text, is_text = block_text(block)
        texty = texty or is_text
        if text:
            parts.append(text)
    structured = masked(result.structured_content)
    if not texty and structured is not None:
        parts.insert(0, compact_json(structured))
    return CallResult(
        text=cut(redact.redact("\n".join(parts)), max_chars),  # masked before the cut
        structured=structured,
        is_error=bool(result.is_error),
        content=tuple(masked(_recorded(block)) for block in result.content),
    )


def masked(value: Any) -> Any:
    """``value`` with every registered secret in its strings (keys too) replaced by ``***``."""
    if not redact.active():
        return value
    if isinstance(value, str):
        return redact.redact(value)
    if isinstance(value, dict):
        return {masked(k): masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def block_text(block: Any) -> tuple[str, bool]:
    """One content block as text, and whether it carried text of its own."""
    import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start

    if isinstance(block, types.TextContent):
        return block.text, True
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return f"[{block.type} {block.mime_type}, {size_of(block.data)}]", False
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}", True
        mime = f"{resource.mime_type}, " if resource.mime_type else ""
        return f"[resource {resource.uri}, {mime}{size_of(resource.blob)}]", False
    if isinstance(block, types.ResourceLink):
        name = f"{block.name}: " if block.name and block.name != str(block.uri) else ""
        return f"[resource link {name}{block.uri}]", False
    kind = getattr(block, "type", type(block).__name__)  # a block type newer than this code
    return f"[{kind}]", False


def size_of(data: str) -> str:
    """The decoded size of base64 ``data``, readable: ``68 B``, ``1.2 kB``, ``3.4 MB``."""
    try:
        size = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        size = len(data) * 3 // 4
    if size < 1000:
        return f"{size} B"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def cut(text: str, max_chars: int) -> str:
    """``text`` bounded to ``max_chars`` with tmy's cut marker (as tmy.llm.tools does it)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n…(cut: {len(text)} characters in all)"


def _recorded(block: Any) -> dict[str, Any]:
    data: dict[str, Any] = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    for holder in (data, data.get("resource")):
        if not isinstance(holder, dict):
            continue
        for key in ("data", "blob"):
            payload = holder.get(key)
            if isinstance(payload, str) and len(payload) > _KEPT_PAYLOAD_CHARS:
                holder[key] = f"({size_of(payload)} of base64 left out)"
    return data
