"""The MCP servers on the console's Overview: one health row per server.

The rows come from the ``mcp`` part of ``GET /healthz`` (:mod:`tmy.mcp.extension`:
``{"servers": {NAME: {state, transport, tools, error, since, reconnects}}}``), so
the page shows what /healthz reports and the console imports nothing of tmy.mcp.
Nothing of a server's ``env`` or ``headers`` is in that report.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def mcp_rows(health: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per MCP server, by name: name, transport, state, tools (count or None), last
    error, reconnects and since when it is in that state (ISO-8601 UTC); [] without any."""
    part = health.get("mcp")
    servers = part.get("servers") if isinstance(part, dict) else None
    if not isinstance(servers, dict):
        return []
    rows = []
    for name, state in sorted(servers.items()):
        since = state.get("since")
        rows.append(
            {
                "name": name,
                "transport": state.get("transport"),
                "state": state.get("state"),
                "tools": state.get("tools"),
                "error": state.get("error"),
                "reconnects": state.get("reconnects") or 0,
                "since": _clock(since) if isinstance(since, (int, float)) else None,
            }
        )
    return rows


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
