"""A server's tool list as tmy keeps it: a tool too big to send with every request, a name
listed twice and tools past the cap are left out (and named)."""

from __future__ import annotations

import mcp_types as types
import pytest

from tmy.mcp import listing
from tmy.mcp.listing import ToolInfo, kept


def tool(name: str, schema: dict | None = None, description: str = "") -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or {"type": "object"})


def test_a_huge_schema_a_twin_and_tools_past_the_cap_are_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listing, "MAX_TOOLS", 3)
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(9000)}}
    recursive = {"type": "object", "properties": {"node": {"$ref": "#"}}}
    listed = [
        tool("a", description="first"),
        tool("huge", huge),
        tool("a", description="second"),
        tool("tree", recursive),
        tool("wordy", description="x" * (listing.MAX_TOOL_CHARS + 1)),
        tool("b"),
        tool("c"),
    ]
    infos, skipped = kept("s", listed)
    assert infos == [
        ToolInfo("s", "a", "first", {"type": "object"}),
        ToolInfo("s", "tree", "", recursive),  # a recursive schema is a schema: kept as is
        ToolInfo("s", "b", "", {"type": "object"}),
    ]
    assert [s.split(":")[0] for s in skipped] == ["huge", "a", "wordy", "c"]
    assert "listed twice" in skipped[1] and "more than 3 tools" in skipped[3]
