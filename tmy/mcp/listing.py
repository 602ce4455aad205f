"""A server's tool list as tmy keeps it: each tool's name, description and schema — bounded.

Every tool an LLM step offers goes into each of its requests (the stable prefix), so a
server that lists a tool with a schema of megabytes — by mistake, or to cost its user —
would send it with every message. A tool whose description and schema together exceed
:data:`MAX_TOOL_CHARS` (as compact JSON) is therefore left out, as is a second tool of the
same name (it could never be told apart) and anything past :data:`MAX_TOOLS`; the
supervisor logs each left-out name (``mcp.tools_skipped``) when the list changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tmy.mcp.results import compact_json

MAX_TOOL_CHARS = 100_000  # description + JSON Schema of one tool, as compact JSON
MAX_TOOLS = 1000  # tools kept per server


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """One tool a server offers, as it described it."""

    server: str
    name: str  # the server's tool name
    description: str
    input_schema: dict[str, Any]  # as the server gave it


def kept(server: str, tools: Iterable[Any]) -> tuple[list[ToolInfo], list[str]]:
    """(the tools kept, ``"NAME: why"`` for each left out) of a listing (SDK ``Tool``s)."""
    out: list[ToolInfo] = []
    skipped: list[str] = []
    names: set[str] = set()
    for tool in tools:
        info = ToolInfo(server, tool.name, tool.description or "", dict(tool.input_schema or {}))
        size = len(info.description) + len(compact_json(info.input_schema))
        if info.name in names:
            skipped.append(f"{info.name}: listed twice")
        elif size > MAX_TOOL_CHARS:
            skipped.append(f"{info.name}: its description and schema are {size} characters")
        elif len(out) >= MAX_TOOLS:
            skipped.append(f"{info.name}: more than {MAX_TOOLS} tools")
        else:
            out.append(info)
            names.add(info.name)
    return out, skipped
