"""The ``MCP`` step against the real toolbox server (tests/mcp/servers/toolbox.py) over stdio
and streamable HTTP: templated and computed arguments, text and structured results, a tool's
isError, a timeout, a server that is down, unknown names (at load with file:line, at run with
did-you-mean) and explain's dry run, which calls nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mcp.conftest import HttpToolbox, StdioToolbox
from tmy.errors import RuleError
from tmy.explain import explain
from tmy.mcp.config import parse_mcp
from tmy.mcp.executor import PLACEHOLDER, make_check, shown, step_result
from tmy.mcp.results import CallResult
from tmy.message import Message
from tmy.testing import Bot

pytestmark = pytest.mark.timeout(90)

RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: MCP, server: box, tool: echo, arguments: {text: "said {QUESTION}"}}
  - id: add
    triggers: ["add *"]
    steps:
      - {plugin: MCP, server: box, tool: add, arguments: {a: "?= int(QUESTION)", b: 10}}
  - id: structured
    triggers: ["structured"]
    steps:
      - {plugin: MCP, server: box, tool: structured}
      - {plugin: ADJUST, input: "{STEP_RESULT[answer]} {STEP_RESULT[unit]}"}
  - id: fail
    triggers: ["fail *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: MCP, server: box, tool: fail, arguments: {message: "{QUESTION}"}}
  - id: nap
    triggers: ["nap"]
    steps:
      - {plugin: MCP, server: box, tool: slow, arguments: {seconds: 30}, timeout: 0.5}
  - id: typo
    triggers: ["typo"]
    steps:
      - {plugin: MCP, server: box, tool: ecko}
"""


def sections(**servers: dict[str, Any]) -> dict[str, Any]:
    return {"mcp": parse_mcp({"servers": servers})}


async def test_the_step_calls_tools_over_stdio(toolbox_stdio: StdioToolbox) -> None:
    async with Bot({"r.yaml": RULES}, sections=sections(box=toolbox_stdio.config)) as bot:
        reply = await bot.ask("echo hello there")
        assert (reply.error, reply.text) == (None, "said hello there")  # a templated argument
        (step,) = reply.steps
        assert (step.plugin, step.result) == ("MCP", "said hello there")
        assert step.extra["mcp"] == {
            "server": "box",
            "tool": "echo",
            "arguments": {"text": "said hello there"},
            "is_error": False,
        }
        assert await bot.say("add 3") == "13"  # an expression argument (an int)
        # no text block: the structured content itself, which a later step reads
        assert await bot.say("structured") == "42 widgets"
        # a tool's isError fails the step with the tool's own text as STEP_ERROR
        failed = await bot.ask("fail it broke")
        assert failed.error is not None and "it broke" in failed.error
        assert failed.text == f"failed: {failed.error}"
        assert failed.steps[0].extra["mcp"]["is_error"] is True
        typo = await bot.ask("typo")
        assert typo.error is not None
        assert "no tool 'ecko'" in typo.error and "did you mean 'echo'" in typo.error
    assert [(c["tool"], c["arguments"]) for c in toolbox_stdio.calls()] == [
        ("echo", {"text": "said hello there"}),
        ("add", {"a": 3, "b": 10}),
        ("structured", {}),
        ("fail", {"message": "it broke"}),
    ]  # the misspelt tool never reached the server


async def test_the_step_over_http_and_a_timeout(toolbox_http: HttpToolbox) -> None:
    async with Bot({"r.yaml": RULES}, sections=sections(box=toolbox_http.config)) as bot:
        assert await bot.say("echo over http") == "said over http"
        late = await bot.ask("nap")  # the step's own timeout: 0.5 s
        assert late.error is not None
        assert "box" in late.error and "'slow'" in late.error and "within" in late.error
        assert await bot.say("echo still here") == "said still here"  # the server goes on
    assert [c["tool"] for c in toolbox_http.calls()] == ["echo", "slow", "echo"]


@pytest.mark.slow
async def test_a_server_that_cannot_start_fails_only_its_steps(tmp_path: Any) -> None:
    rules = (
        RULES
        + """
  - id: ping
    triggers: [ping]
    steps: [{plugin: ADJUST, input: pong}]
"""
    )
    broken = {"command": str(tmp_path / "no-such-program"), "timeout": 2}
    async with Bot({"r.yaml": rules}, sections=sections(box=broken)) as bot:
        reply = await bot.ask("echo anyone")
        assert reply.error is not None
        assert "MCP server 'box' is not connected" in reply.error, reply.error
        assert await bot.say("ping") == "pong"


async def test_an_unknown_server_is_a_load_error_with_file_line_and_a_hint() -> None:
    rules = """
rules:
  - id: r
    triggers: [x]
    steps:
      - plugin: MCP
        server: github
        tool: search
"""
    with pytest.raises(RuleError) as raised:
        async with Bot({"r.yaml": rules}, sections=sections(gitlab={"url": "http://127.0.0.1:9/"})):
            pass
    text = str(raised.value)
    assert "r.yaml:6" in text and "MCP server 'github' is not configured" in text
    assert "did you mean 'gitlab'" in text
    with pytest.raises(RuleError) as raised:
        async with Bot({"r.yaml": rules}):  # no mcp: section at all
            pass
    assert "no mcp.servers in the config" in str(raised.value)


async def test_a_computed_arguments_value_must_be_a_map() -> None:
    rules = """
rules:
  - id: r
    triggers: ["x *"]
    steps: [{plugin: MCP, server: box, tool: echo, arguments: "?= QUESTION"}]
"""
    # refused before any server is needed (this one is down: nothing listens on port 9)
    async with Bot({"r.yaml": rules}, sections=sections(box={"url": "http://127.0.0.1:9/"})) as bot:
        reply = await bot.ask("x hello")
    assert reply.error == "option 'arguments' of MCP must be dict, got str"


async def test_explain_runs_the_step_dry_and_calls_no_tool(toolbox_stdio: StdioToolbox) -> None:
    async with Bot({"r.yaml": RULES}, sections=sections(box=toolbox_stdio.config)) as bot:
        ex = await explain(bot.engine, Message("echo secret plans", user="ann"))
        (step,) = ex.steps
        assert step["result"] == PLACEHOLDER
        assert step["extra"]["mcp"]["dry_run"] is True
        assert step["extra"]["mcp"]["arguments"] == {"text": "said secret plans"}
        real = await explain(bot.engine, Message("echo for real", user="ann"), run=True)
        assert real.steps[0]["result"] == "said for real"
    assert [c["arguments"] for c in toolbox_stdio.calls()] == [{"text": "said for real"}]


def test_the_load_check_and_the_result_shape() -> None:
    check = make_check(["box", "files"])
    check({"server": "box", "tool": "echo"})
    with pytest.raises(ValueError, match=r"'fils' is not configured \(did you mean 'files'\?\)"):
        check({"server": "fils", "tool": "x"})
    check({"tool": "x"})  # a computed server is checked when the step runs
    with pytest.raises(ValueError, match="tool must name"):
        check({"server": "box", "tool": " "})
    text = CallResult("hi", {"result": "hi"}, False, ({"type": "text", "text": "hi"},))
    assert step_result(text) == "hi"
    data = CallResult('{"a":1}', {"a": 1}, False, ())
    assert step_result(data) == {"a": 1}
    image = CallResult("[image image/png, 70 B]", None, False, ({"type": "image"},))
    assert step_result(image) == "[image image/png, 70 B]"
    assert shown({"api_key": "k-123456789", "q": "x", "n": 2}) == {
        "api_key": "***",
        "q": "x",
        "n": 2,
    }  # the record's copy: the tool gets the real value
