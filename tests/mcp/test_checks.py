"""MCP names in the rules checked against the servers' tool lists: MCP steps and the
``mcp:SERVER/TOOL`` entries of LLM steps' ``tools:`` (denials too; globs are not names),
each a file:line warning with a did-you-mean — from given lists, and from the real toolbox
server as ``check`` would connect to it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import StdioToolbox
from tmy.app import build_registry
from tmy.config import Settings
from tmy.mcp.checks import check_warnings, listed_warnings, tool_warnings
from tmy.mcp.config import McpConfig, parse_mcp
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook
from tmy.testing.bot import default_extensions

RULES = """
rules:
  - id: good
    triggers: [good]
    steps: [{plugin: MCP, server: box, tool: echo}]
  - id: typo
    triggers: [typo]
    steps: [{plugin: MCP, server: box, tool: ecko}]
  - id: computed
    triggers: ["c *"]
    steps: [{plugin: MCP, server: box, tool: "{QUESTION}"}]
  - id: other
    triggers: [other]
    steps: [{plugin: MCP, server: web, tool: anything}]
  - id: assistant
    triggers: ["ask *"]
    steps:
      - plugin: LLM
        tools: ["mcp:box/echo", "mcp:box/ad", "!mcp:box/delete_thnig", "mcp:box/del*", "mcp:web/x"]
"""


def load(config: McpConfig) -> Rulebook:
    settings = Settings(sections={"mcp": config}, plugins=Path("no-plugins"))
    registry = build_registry(settings, default_extensions())
    return load_sources([(Path("r.yaml"), RULES)], registry)


CONFIG = parse_mcp(
    {"servers": {"box": {"url": "http://127.0.0.1:9/mcp"}, "web": {"url": "http://127.0.0.1:9/w"}}}
)
BOX = ["add", "delete_thing", "echo"]


def test_unknown_tool_names_are_warned_with_file_line_and_a_hint() -> None:
    lists: dict[str, Any] = {"box": BOX, "web": None}  # web's list is not known: not checked
    warnings = tool_warnings(load(CONFIG), lists.get)
    assert warnings == [
        "r.yaml:8: rule 'typo' step typo/0: MCP server 'box' has no tool 'ecko' "
        "(did you mean 'echo'?); its tools: add, delete_thing, echo",
        "r.yaml:18: rule 'assistant' step assistant/0: tools: 'mcp:box/ad': MCP server 'box' "
        "has no tool 'ad' (did you mean 'add'?); its tools: add, delete_thing, echo",
        "r.yaml:18: rule 'assistant' step assistant/0: tools: '!mcp:box/delete_thnig': MCP "
        "server 'box' has no tool 'delete_thnig' (did you mean 'delete_thing'?); its tools: "
        "add, delete_thing, echo",
    ]


def test_nothing_is_warned_while_no_list_is_known() -> None:
    assert tool_warnings(load(CONFIG), lambda server: None) == []


async def test_without_servers_check_has_nothing_to_connect_to() -> None:
    rules = load_sources(
        [(Path("r.yaml"), "rules:\n  - {id: p, triggers: [p], steps: [{plugin: ADJUST}]}\n")],
        build_registry(Settings(plugins=Path("no-plugins")), default_extensions()),
    )
    assert await listed_warnings(McpConfig(), rules) == []
    assert await listed_warnings(None, rules) == []


@pytest.mark.slow
async def test_check_connects_lists_and_warns(toolbox_stdio: StdioToolbox, tmp_path: Path) -> None:
    marker = tmp_path / "started"  # written by the unused server's process, if it is started
    spy = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w').close()"]}
    web = {"url": "http://127.0.0.1:9/mcp"}
    config = parse_mcp({"servers": {"box": toolbox_stdio.config, "web": web, "spy": spy}})
    settings = Settings(sections={"mcp": config})
    warnings = await check_warnings(settings, load(config), wait=20)
    assert not marker.exists()  # no rule names it: check starts only what the rules use
    assert len(warnings) == 4, warnings
    assert [w.split(": MCP server")[0] for w in warnings[:3]] == [
        "r.yaml:8: rule 'typo' step typo/0",
        "r.yaml:18: rule 'assistant' step assistant/0: tools: 'mcp:box/ad'",
        "r.yaml:18: rule 'assistant' step assistant/0: tools: '!mcp:box/delete_thnig'",
    ]
    assert warnings[3].startswith("MCP server 'web' did not list its tools within 20 s (failed")
    assert toolbox_stdio.calls() == []  # listing calls no tool


@pytest.mark.slow
def test_run_py_check_warns_of_an_unknown_tool_with_file_line_and_exits_0(
    tmp_path: Path, toolbox_stdio: StdioToolbox, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from tmy import cli

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        "rules:\n  - id: typo\n    triggers: [typo]\n"
        "    steps: [{plugin: MCP, server: box, tool: ecko}]\n"
    )
    config = tmp_path / "tmy.yaml"
    config.write_text(json.dumps({"mcp": {"servers": {"box": toolbox_stdio.config}}}))
    code = cli.main(["check", "--config", str(config), "--rules", str(rules)])
    err = capsys.readouterr().err
    assert code == 0
    assert "warning: " in err and "r.yaml:4" in err and "'ecko'" in err and "'echo'" in err
