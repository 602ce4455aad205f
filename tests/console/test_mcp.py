"""The MCP servers on the console's Overview: one health row per server (transport, state,
tools, reconnects, last error), in the page and in its JSON, with no secret of a server's
env or headers — on a served daemon connected to the real toolbox server over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcp.conftest import StdioToolbox
from tests.support.console import console_daemon, logged_in
from tmy.console.mcp import mcp_rows
from tmy.mcp.config import parse_mcp

RULES = {"r.yaml": "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"}
TOKEN = "tok-abcdef1234567890"


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_the_overview_shows_each_mcp_server(tmp_path: Path) -> None:
    box = StdioToolbox(tmp_path / "calls.jsonl")
    remote = {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": f"Bearer {TOKEN}"}}
    servers = {"box": box.config, "remote": remote}
    sections = {"mcp": parse_mcp({"servers": servers})}
    async with (
        console_daemon(RULES, sections=sections) as daemon,
        logged_in(daemon, viewer=True) as viewer,
    ):
        data = await viewer.json("")
        html = (await viewer.get("")).text
    assert data["status"] == "degraded"
    rows = {row["name"]: row for row in data["mcp_servers"]}
    assert list(rows) == ["box", "remote"]
    assert rows["box"]["state"] == "connected" and rows["box"]["transport"] == "stdio"
    assert rows["box"]["tools"] == 9 and rows["box"]["reconnects"] == 0
    assert rows["remote"]["state"] == "failed" and rows["remote"]["error"]
    assert 'MCP server box</td><td class="state-connected">connected' in html
    assert "stdio; tools: 9; reconnects: 0" in html
    assert 'MCP server remote</td><td class="state-failed">failed' in html
    assert "last error: " in html
    assert TOKEN not in html and TOKEN not in str(data)


def test_rows_come_from_the_healthz_report() -> None:
    assert mcp_rows({"status": "ok"}) == []
    health = {
        "mcp": {
            "servers": {
                "b": {"state": "reconnecting", "transport": "http", "tools": 2,
                      "error": "gone", "since": 0.0, "reconnects": 3},
                "a": {"state": "connected", "transport": "stdio", "tools": None,
                      "error": None, "since": None, "reconnects": 0},
            }
        }
    }  # fmt: skip
    assert mcp_rows(health) == [
        {"name": "a", "transport": "stdio", "state": "connected", "tools": None,
         "error": None, "reconnects": 0, "since": None},
        {"name": "b", "transport": "http", "state": "reconnecting", "tools": 2,
         "error": "gone", "reconnects": 3, "since": "1970-01-01T00:00:00Z"},
    ]  # fmt: skip
