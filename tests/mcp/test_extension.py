"""The MCP extension in a real app: its part of /healthz (degraded while a server is not
connected, never failing the daemon, no secret shown), ``mcp list`` on the CLI and in chat,
the daemon's warnings about tool names the servers do not have, and rule tests that spawn
no server unless a case runs an MCP step."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import tmy.cli
from tests.mcp.conftest import TOOLBOX_TOOLS, StdioToolbox
from tests.support.log_helpers import read_log
from tmy.config import Settings
from tmy.mcp import EXTENSION, mcp_of
from tmy.mcp.config import parse_mcp
from tmy.ruletests import run_tests
from tmy.testing import Bot, serving
from tmy.testing.bot import default_extensions

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

TOKEN = "tok-abcdef1234567890"  # a header secret that must never be shown
ENV_SECRET = "env-secret-0987654321"
RULES = {
    "r.yaml": """
rules:
  - id: echo
    triggers: ["echo *"]
    steps: [{plugin: MCP, server: box, tool: echo, arguments: {text: "{QUESTION}"}}]
  - id: ping
    triggers: [ping]
    steps: [{plugin: ADJUST, input: pong}]
"""
}


def sections(**servers: dict[str, Any]) -> dict[str, Any]:
    return {"mcp": parse_mcp({"servers": servers})}


async def healthz(url: str) -> tuple[str, dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{url}/healthz")
    return response.text, response.json()


def test_the_extension_states_its_parts() -> None:
    assert EXTENSION in default_extensions()
    assert EXTENSION.config is not None and EXTENSION.config.key == "mcp"
    assert [c.name for c in EXTENSION.commands] == ["mcp"]
    assert [s.name for s in EXTENSION.executors(Settings())] == ["MCP"]


async def test_healthz_shows_each_server_and_a_down_one_degrades_it(
    toolbox_stdio: StdioToolbox, tmp_path: Path
) -> None:
    broken = {"command": str(tmp_path / "no-such-program"), "env": {"API_TOKEN": ENV_SECRET}}
    remote = {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": f"Bearer {TOKEN}"}}
    servers = sections(box=toolbox_stdio.config, broken=broken, remote=remote)
    async with serving(RULES, sections=servers) as daemon:
        text, report = await healthz(daemon.url)
        assert report["status"] == "degraded"  # never down: the daemon serves
        states = report["mcp"]["servers"]
        assert states["box"]["state"] == "connected"
        assert (states["box"]["transport"], states["box"]["tools"]) == ("stdio", 9)
        assert states["box"]["reconnects"] == 0 and states["box"]["error"] is None
        assert states["broken"]["state"] == "failed" and states["broken"]["error"]
        assert states["remote"]["state"] == "failed" and states["remote"]["transport"] == "http"
        assert TOKEN not in text and ENV_SECRET not in text
        assert (await daemon.push("echo still works")).text == "still works"
        assert (await daemon.push("ping")).text == "pong"


async def test_healthz_is_ok_when_every_server_is_connected(toolbox_stdio: StdioToolbox) -> None:
    async with serving(RULES, sections=sections(box=toolbox_stdio.config)) as daemon:
        _, report = await healthz(daemon.url)
        assert report["status"] == "ok" and report["mcp"]["servers"]["box"]["state"] == "connected"
    rules = {"r.yaml": "rules:\n  - {id: p, triggers: [p], steps: [{plugin: ADJUST}]}\n"}
    async with serving(rules) as daemon:  # no servers: nothing to report
        _, report = await healthz(daemon.url)
        assert "mcp" not in report and report["status"] == "ok"


async def test_mcp_in_chat_lists_servers_and_warns_of_unknown_tools(
    toolbox_stdio: StdioToolbox,
) -> None:
    rules = {
        "r.yaml": RULES["r.yaml"]
        + """
  - id: typo
    triggers: [typo]
    steps: [{plugin: MCP, server: box, tool: ecko}]
  - id: assistant
    triggers: ["ask *"]
    steps: [{plugin: LLM, tools: ["mcp:box/echo", "!mcp:box/delete_thnig", "mcp:box/a*"]}]
"""
    }
    servers = sections(box=toolbox_stdio.config)
    async with Bot(rules, sections=servers, admins=frozenset({"test:root"})) as bot:
        answer = await bot.say(".tmy mcp", user="root")
        runtime = mcp_of(bot.engine.services)
        assert runtime.state("box")["state"] == "connected"
    first, *warnings = answer.splitlines()
    assert first == "box: connected (stdio), 9 tools"
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("warning: r.yaml:")
    assert "rule 'typo'" in warnings[0] and "no tool 'ecko' (did you mean 'echo'?)" in warnings[0]
    assert "'!mcp:box/delete_thnig'" in warnings[1] and "did you mean 'delete_thing'" in warnings[1]


def test_mcp_list_on_the_cli(
    toolbox_stdio: StdioToolbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES["r.yaml"], encoding="utf-8")
    config = {
        "rules": str(tmp_path / "rules"),
        "plugins": str(tmp_path / "no-plugins"),
        "store": f"sqlite:///{tmp_path / 'tmy.db'}",
        "mcp": {"servers": {"box": {**toolbox_stdio.config, "env": {"API_TOKEN": ENV_SECRET}}}},
    }
    path = tmp_path / "tmy.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    assert tmy.cli.main(["--config", str(path), "mcp", "list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "box: connected (stdio), 9 tools"
    assert [line.strip() for line in out.splitlines()[1:]] == TOOLBOX_TOOLS
    assert tmy.cli.main(["--config", str(path), "mcp", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["servers"]["box"]["tool_names"] == TOOLBOX_TOOLS and data["warnings"] == []
    assert ENV_SECRET not in json.dumps(data)


async def test_the_daemon_logs_unknown_tool_names_once_listed(
    toolbox_stdio: StdioToolbox, log_file: Path
) -> None:
    rules = {
        "r.yaml": "rules:\n  - id: typo\n    triggers: [typo]\n"
        "    steps: [{plugin: MCP, server: box, tool: ecko}]\n"
    }
    async with serving(rules, sections=sections(box=toolbox_stdio.config)) as daemon:
        await daemon.push("ping")  # (a turn of the loop: the check runs in the background)
    details = [e["detail"] for e in read_log(log_file) if e.get("event") == "rules.warning"]
    assert len(details) == 1 and details[0].startswith("r.yaml:4: rule 'typo' step typo/0: ")
    assert "no tool 'ecko' (did you mean 'echo'?)" in details[0]


async def test_rule_tests_start_no_server_unless_a_case_runs_an_mcp_step(
    toolbox_stdio: StdioToolbox, tmp_path: Path
) -> None:
    marker = tmp_path / "started"  # written by the server process if it is ever started
    spy = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w').close()"]}
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(
        "rules:\n  - {id: p, triggers: [ping], steps: [{plugin: ADJUST, input: pong}]}\n"
        "tests:\n  - {send: ping, expect: pong}\n",
        encoding="utf-8",
    )
    calling = tmp_path / "calling.yaml"
    calling.write_text(
        "rules:\n  - id: e\n    triggers: ['echo *']\n"
        "    steps: [{plugin: MCP, server: box, tool: echo, arguments: {text: '{QUESTION}'}}]\n"
        "tests:\n  - {send: echo hi, expect: hi}\n",
        encoding="utf-8",
    )
    settings = Settings(
        rules=tmp_path,
        plugins=tmp_path / "no-plugins",
        sections=sections(box=toolbox_stdio.config, spy=spy),
    )
    report = await run_tests(settings, [quiet], None, extensions=default_extensions())
    assert not report.errors and not report.failed and len(report.outcomes) == 1
    assert not marker.exists() and toolbox_stdio.calls() == []
    report = await run_tests(settings, [calling], None, extensions=default_extensions())
    assert not report.errors and not report.failed, report.outcomes
    assert [c["tool"] for c in toolbox_stdio.calls()] == ["echo"]
