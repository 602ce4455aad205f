"""The MCP servers as the LLM answerer's ``mcp`` tool source, against the real toolbox server:
what it offers (SERVER/TOOL, sorted, schemas as listed), a model's call through a real LLM
step (the TESTONLY mock names the tool), a tool's isError, explain's dry run (nothing
called), and a rule test's app (no live tools offered)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.mcp.conftest import TOOLBOX_TOOLS, StdioToolbox
from tmy.errors import ExecutorError
from tmy.explain import explain
from tmy.llm import runtime_of
from tmy.mcp import mcp_of
from tmy.mcp.config import parse_mcp
from tmy.mcp.runtime import McpRuntime
from tmy.mcp.source import McpTools
from tmy.message import Message
from tmy.testing import Bot

pytestmark = pytest.mark.timeout(90)

RULES = """
rules:
  - id: assistant
    triggers: ["ask *"]
    on_error: "sorry: {STEP_ERROR}"
    steps:
      - {plugin: LLM, tools: ["mcp:box/*", "!mcp:box/delete_*"]}
"""


def sections(**servers: dict[str, Any]) -> dict[str, Any]:
    return {"mcp": parse_mcp({"servers": servers})}


def mock_call(tool: str, arguments: dict[str, Any]) -> str:
    """What makes the TESTONLY mock call ``tool`` (its model name) with ``arguments``."""
    return f"ask MOCK:TOOL:{tool}:{json.dumps(arguments)}"


async def test_the_source_offers_every_tool_as_server_slash_tool(
    toolbox_stdio: StdioToolbox,
) -> None:
    async with Bot({"r.yaml": RULES}, sections=sections(box=toolbox_stdio.config)) as bot:
        source = runtime_of(bot.engine.services).tool_sources["mcp"]
        assert isinstance(source, McpTools)
        offered = source.offered()
        assert [t.name for t in offered] == [f"box/{name}" for name in TOOLBOX_TOOLS]
        listed = {t.name: t for t in mcp_of(bot.engine.services).tools("box") or []}
        for tool in offered:
            info = listed[tool.name.removeprefix("box/")]
            assert (tool.description, tool.parameters) == (info.description, info.input_schema)
        assert offered[0].parameters["properties"].keys() == {"a", "b"}  # add(a, b)


async def test_a_model_calls_a_tool_and_reads_its_text(toolbox_stdio: StdioToolbox) -> None:
    async with Bot({"r.yaml": RULES}, sections=sections(box=toolbox_stdio.config)) as bot:
        reply = await bot.ask(mock_call("box__echo", {"text": "from the model"}))
        assert reply.error is None and "from the model" in reply.text
        call = next(s for s in reply.steps if "/tool/" in s.uri)
        assert (call.input, call.result, call.error) == (
            {"text": "from the model"},
            "from the model",
            "",
        )
        # a tool's isError reaches the model as the call's error (the run goes on)
        failed = await bot.ask(mock_call("box__fail", {"message": "disk on fire"}))
        assert failed.error is None, failed.error
        call = next(s for s in failed.steps if "/tool/" in s.uri)
        assert "disk on fire" in call.error
        # denied by the step's tools: never reaches the server
        denied = await bot.ask(mock_call("box__delete_thing", {"id": "x"}))
        assert denied.error is None
    assert [(c["tool"], c["arguments"]) for c in toolbox_stdio.calls()] == [
        ("echo", {"text": "from the model"}),
        ("fail", {"message": "disk on fire"}),
    ]


async def test_explain_tells_the_model_the_tool_was_not_called(
    toolbox_stdio: StdioToolbox,
) -> None:
    async with Bot({"r.yaml": RULES}, sections=sections(box=toolbox_stdio.config)) as bot:
        ex = await explain(bot.engine, Message(mock_call("box__echo", {"text": "x"}), user="a"))
        call = next(s for s in ex.steps if "/tool/" in s["uri"])
        assert call["result"].startswith("(dry run: the MCP tool box/echo was not called")
    assert toolbox_stdio.calls() == []


async def test_a_rule_tests_app_offers_no_live_tools(toolbox_stdio: StdioToolbox) -> None:
    config = parse_mcp({"servers": {"box": toolbox_stdio.config}})
    runtime = McpRuntime(config, eager=False)  # what a rule test's app (canned HTTP) makes
    source = McpTools(runtime)
    try:
        assert source.offered() == []
        assert runtime.state("box")["state"] == "idle" and runtime.servers is None
        await runtime.start(wait=30)  # an MCP step started them
        assert runtime.tools("box") is not None
        assert source.offered() == []  # still none for its LLM steps: deterministic tests
    finally:
        await runtime.aclose()


async def test_a_name_that_is_not_server_slash_tool_is_refused() -> None:
    source = McpTools(McpRuntime(None, eager=True))
    assert source.offered() == []
    with pytest.raises(ExecutorError, match="must be SERVER/TOOL"):
        await source.call(None, "nobody", {})  # type: ignore[arg-type]
