"""MCP end to end: a served tmy daemon driving the toolbox (tests/mcp/servers/toolbox.py, the
SDK's own server side) over stdio, streamable HTTP and SSE — the ``MCP`` step without a model,
the LLM step's ``tools: ["mcp:toolbox/*", "!mcp:toolbox/delete_*"]`` with a fake model on
loopback, a tool list change, a hanging tool, a server killed and restarted, ``/healthz``, and
the tool calls in a run's steps (``ask --json``, ``run.done``).

Everything is real: the MCP servers are processes, the model is an HTTP server on loopback,
the config section goes through the mcp extension's own parser.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.mcp.conftest import (
    TOOLBOX_TOOLS,
    WAIT,
    HttpToolbox,
    StdioToolbox,
    health_until,
    healthz,
    offered,
    served,
    server_state,
    server_up,
)
from tests.mcp.servers.toolbox import STRUCTURED
from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.log_helpers import read_log

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]

# Rules by name; a test serves the ones it needs (a rule naming a server not configured
# would be a load-time error, rightly).
RULES = {
    "echo": """
  - id: echo
    triggers: ["echo *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - plugin: MCP
        server: toolbox
        tool: echo
        arguments: {text: "you said: {QUESTION}"}
""",
    "sum": """
  - id: sum
    triggers: ["sum *"]
    steps:
      - {plugin: MCP, server: toolbox, tool: add, arguments: {a: "?= len(QUESTION)", b: 10}}
""",
    "structured": """
  - id: structured
    triggers: ["structured"]
    steps: [{plugin: MCP, server: toolbox, tool: structured}]
""",
    "picture": """
  - id: picture
    triggers: ["picture"]
    steps: [{plugin: MCP, server: toolbox, tool: picture}]
""",
    "fail": """
  - id: fail
    triggers: ["fail *"]
    on_error: "failed: {STEP_ERROR}"
    steps: [{plugin: MCP, server: toolbox, tool: fail, arguments: {message: "{QUESTION}"}}]
""",
    "nap": """
  - id: nap
    triggers: ["nap"]
    on_error: "failed: {STEP_ERROR}"
    steps: [{plugin: MCP, server: toolbox, tool: slow, arguments: {seconds: 30}}]
""",
    "web": """
  - id: web
    triggers: ["web *"]
    on_error: "failed: {STEP_ERROR}"
    steps: [{plugin: MCP, server: web, tool: echo, arguments: {text: "{QUESTION}"}}]
""",
    "who": """
  - id: who
    triggers: ["who"]
    steps: [{plugin: MCP, server: toolbox, tool: whoami}]
""",
    "reveal": """
  - id: reveal
    triggers: ["reveal *"]
    steps: [{plugin: MCP, server: toolbox, tool: reveal, arguments: {name: "{QUESTION}"}}]
  - id: peek
    triggers: ["peek *"]
    steps: [{plugin: MCP, server: web, tool: reveal, arguments: {name: "{QUESTION}"}}]
""",
    "ping": """
  - id: ping
    triggers: ["ping"]
    steps: [{plugin: ADJUST, input: pong}]
""",
    "assistant": """
  - id: assistant
    triggers: ["ask *"]
    on_error: "sorry: {STEP_ERROR}"
    steps:
      - plugin: LLM
        tools: ["mcp:toolbox/*", "!mcp:toolbox/delete_*"]
""",
}


def rules(*names: str) -> dict[str, str]:
    return {"mcp.yaml": "rules:" + "".join(RULES[name] for name in names)}


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


# -- the MCP step, no model ----------------------------------------------------------------------


async def test_the_mcp_step_calls_a_tool_with_templated_arguments(
    toolbox_stdio: StdioToolbox,
) -> None:
    servers = {"toolbox": toolbox_stdio.config}
    async with served(rules("echo", "sum", "structured", "picture", "fail"), servers) as daemon:
        reply = await daemon.push("echo hello there")
        assert (reply.error, reply.text) == (None, "you said: hello there")
        (step,) = reply.steps
        assert (step.plugin, step.result) == ("MCP", "you said: hello there")
        assert (await daemon.push("sum abc")).text == "13"  # an expression argument: len("abc")
        structured = await daemon.push("structured")  # no text: its structured content
        assert structured.error is None and json.loads(structured.text) == STRUCTURED
        picture = await daemon.push("picture")  # an image block, mapped to text
        assert picture.error is None and "image" in picture.text.lower()
        assert "iVBORw0KGgo" not in picture.text  # not the PNG's base64
        failed = await daemon.push("fail out of widgets")  # isError: the tool's words fail it
        assert failed.error is not None and "out of widgets" in failed.error, failed.error
    assert [(c["tool"], c["arguments"]) for c in toolbox_stdio.calls()] == [
        ("echo", {"text": "you said: hello there"}),
        ("add", {"a": 3, "b": 10}),
        ("structured", {}),
        ("picture", {}),
        ("fail", {"message": "out of widgets"}),
    ]


async def test_the_mcp_step_over_sse(toolbox_sse: HttpToolbox) -> None:
    async with served(rules("web"), {"web": toolbox_sse.config}) as daemon:
        assert (await daemon.push("web over sse")).text == "over sse"
    assert [c["arguments"] for c in toolbox_sse.calls()] == [{"text": "over sse"}]


async def test_a_hanging_tool_fails_its_step_on_the_timeout_and_the_daemon_goes_on(
    toolbox_stdio: StdioToolbox,
) -> None:
    servers = {"toolbox": {**toolbox_stdio.config, "timeout": 1}}
    async with served(rules("nap", "echo", "ping"), servers) as daemon:
        reply = await daemon.push("nap")
        assert reply.error is not None and reply.text == f"failed: {reply.error}"
        said = reply.error.lower()  # names the server and the tool, says it ran out of time
        assert "'toolbox'" in said and "'slow'" in said, said
        assert any(word in said for word in ("within 1", "timed out", "timeout")), said
        assert (await daemon.push("ping")).text == "pong"
        assert (await daemon.push("echo still there")).text == "you said: still there"
    assert [c["tool"] for c in toolbox_stdio.calls()] == ["slow", "echo"]


# -- a server killed and restarted, /healthz -----------------------------------------------------


async def test_a_restarted_http_server_answers_the_next_call(toolbox_http: HttpToolbox) -> None:
    async with served(rules("web"), {"web": toolbox_http.config}) as daemon:
        assert (await daemon.push("web one")).text == "one"
        first = toolbox_http.pid
        await toolbox_http.restart()  # SIGKILL mid-conversation, then up again on the same port
        reply = await daemon.push("web two")
        assert (reply.error, reply.text) == (None, "two")
    calls = toolbox_http.calls()
    assert [(c["arguments"]["text"], c["pid"]) for c in calls] == [
        ("one", first),
        ("two", toolbox_http.pid),
    ]


async def test_a_model_calls_a_restarted_http_server_in_the_next_message(
    toolbox_http: HttpToolbox, provider: FakeProvider
) -> None:
    whoami = Reply(None, tool_calls=[{"name": "toolbox__whoami", "arguments": {}}])
    provider.script("fake", [whoami, Reply("one"), whoami, Reply("two")])
    async with served(rules("assistant"), {"toolbox": toolbox_http.config}, provider) as daemon:
        assert (await daemon.push("ask who?")).text == "one"
        first = toolbox_http.pid
        await toolbox_http.restart()
        reply = await daemon.push("ask who now?")
        assert (reply.error, reply.text) == (None, "two")
    requests = provider.seen()
    assert tool_messages(requests[1]) == [str(first)]
    assert tool_messages(requests[3])[-1] == str(toolbox_http.pid)


async def test_a_crashed_stdio_server_is_started_again(toolbox_stdio: StdioToolbox) -> None:
    async with served(rules("who"), {"toolbox": toolbox_stdio.config}) as daemon:
        first = int((await daemon.push("who")).text)
        os.kill(first, signal.SIGKILL)  # tmy's child dies under it
        async with asyncio.timeout(WAIT):  # reconnected with backoff: a new process, listed
            while (state := server_state(await healthz(daemon), "toolbox"))["reconnects"] < 1:
                await asyncio.sleep(0.1)
        await health_until(daemon, "ok", "toolbox", "connected")
        assert state["transport"] == "stdio"
        second = int((await daemon.push("who")).text)
    assert second != first
    assert [c["pid"] for c in toolbox_stdio.calls()] == [first, second]


async def test_a_dead_server_fails_only_its_steps_and_healthz_says_degraded(
    toolbox_stdio: StdioToolbox, toolbox_http: HttpToolbox
) -> None:
    servers = {"toolbox": toolbox_stdio.config, "web": toolbox_http.config}
    async with served(rules("web", "echo", "ping"), servers) as daemon:
        report = await health_until(daemon, "ok", "web", "connected")
        assert server_state(report, "toolbox")["state"] == "connected"
        assert server_state(report, "toolbox")["transport"] == "stdio"
        assert server_state(report, "web")["transport"] == "http"
        await toolbox_http.kill()
        down = await daemon.push("web anyone?")
        assert down.error is not None and down.text == f"failed: {down.error}"
        assert "web" in down.error, down.error  # names the server
        assert (await daemon.push("ping")).text == "pong"
        assert (await daemon.push("echo fine")).text == "you said: fine"  # the other server
        report = await healthz(daemon)
        assert report["status"] == "degraded", report
        assert server_state(report, "web")["state"] != "connected"
        assert await server_up(daemon, "web") == 0
        await toolbox_http.start()
        await health_until(daemon, "ok", "web", "connected")
        assert await server_up(daemon, "web") == 1
        assert (await daemon.push("web back")).text == "back"


async def test_secrets_in_env_and_headers_reach_the_server_and_are_masked(
    toolbox_stdio: StdioToolbox,
    toolbox_http: HttpToolbox,
    log_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("E2E_MCP_TOKEN", "e2e-header-secret-7731")
    stdio = toolbox_stdio.config
    stdio["env"].update(API_TOKEN="e2e-env-secret-5512", TOOLBOX_REVEAL="1")
    toolbox_http.env["TOOLBOX_REVEAL"] = "1"
    await toolbox_http.restart()
    web = {**toolbox_http.config, "headers": {"Authorization": "Bearer ${E2E_MCP_TOKEN}"}}
    async with served(rules("reveal"), {"toolbox": stdio, "web": web}) as daemon:
        revealed = await daemon.push("reveal API_TOKEN")
        peeked = await daemon.push("peek Authorization")
        assert (revealed.error, revealed.text) == (None, "***")  # the user never sees it
        assert (peeked.error, peeked.text) == (None, "***")
        report = json.dumps(await healthz(daemon))
    assert [c["value"] for c in toolbox_stdio.calls()] == ["e2e-env-secret-5512"]
    assert [c["value"] for c in toolbox_http.calls()] == ["Bearer e2e-header-secret-7731"]
    logged = json.dumps(read_log(log_file))
    for secret in ("e2e-env-secret-5512", "e2e-header-secret-7731"):
        assert secret not in logged and secret not in report
    assert "***" in logged  # the steps' results, as run.done shows them


async def test_a_secret_a_tool_says_back_never_reaches_the_model(
    toolbox_stdio: StdioToolbox, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2E_MODEL_SECRET", "e2e-model-secret-3390")
    stdio = toolbox_stdio.config
    stdio["env"].update(SECRET_TOKEN="${E2E_MODEL_SECRET}", TOOLBOX_REVEAL="1")
    reveal = {"name": "toolbox__reveal", "arguments": {"name": "SECRET_TOKEN"}}
    provider.script("fake", [Reply(None, tool_calls=[reveal]), Reply("done")])
    async with served(rules("assistant"), {"toolbox": stdio}, provider) as daemon:
        reply = await daemon.push("ask what is the token?")
        assert (reply.error, reply.text) == (None, "done")
    assert tool_messages(provider.seen()[1]) == ["***"]
    assert [c["value"] for c in toolbox_stdio.calls()] == ["e2e-model-secret-3390"]
    assert "e2e-model-secret-3390" not in json.dumps([s.result for s in reply.steps], default=str)


# -- the LLM step's MCP tools ---------------------------------------------------------------------


async def schemas(box: StdioToolbox) -> dict[str, dict[str, Any]]:
    """The toolbox's input schemas as the SDK's own client lists them."""
    config = box.config
    params = StdioServerParameters(command=config["command"], args=config["args"])
    async with Client(params) as client:
        return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}


async def test_the_model_sees_server__tool_with_its_schema_sorted_and_calls_it(
    toolbox_stdio: StdioToolbox, provider: FakeProvider, log_file: Path
) -> None:
    provider.script(
        "fake",
        [
            Reply(None, tool_calls=[{"name": "toolbox__echo", "arguments": {"text": "hi"}}]),
            Reply("it said hi"),
        ],
    )
    async with served(rules("assistant"), {"toolbox": toolbox_stdio.config}, provider) as daemon:
        reply = await daemon.push("ask say hi")
        assert (reply.error, reply.text) == (None, "it said hi")
    first, second = provider.seen()
    allowed = [name for name in TOOLBOX_TOOLS if name != "delete_thing"]
    assert tool_names(first) == [f"toolbox__{name}" for name in allowed]  # sorted by that name
    given = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    listed = await schemas(toolbox_stdio)
    assert given == {f"toolbox__{name}": listed[name] for name in allowed}  # as-is
    assert tool_messages(second) == ["hi"]
    assert [(c["tool"], c["arguments"]) for c in toolbox_stdio.calls()] == [
        ("echo", {"text": "hi"})
    ]
    # the call is a step of the run (ask --json) and of its run.done line
    (call,) = [s for s in reply.steps if s.uri == "assistant/0/tool/call_1_1"]
    assert (call.input, call.result, call.error) == ({"text": "hi"}, "hi", "")
    assert "echo" in call.plugin, call.plugin
    done = [e for e in read_log(log_file) if e.get("event") == "run.done"]
    steps = {s["uri"]: s for e in done if e.get("trace_id") == reply.trace_id for s in e["steps"]}
    assert steps["assistant/0/tool/call_1_1"]["result"] == "hi"


async def test_a_denied_tool_is_not_offered_and_never_called(
    toolbox_stdio: StdioToolbox, provider: FakeProvider
) -> None:
    named = {"name": "toolbox__delete_thing", "arguments": {"id": "x1"}}
    provider.script("fake", [Reply(None, tool_calls=[named]), Reply("I may not delete things.")])
    async with served(rules("assistant"), {"toolbox": toolbox_stdio.config}, provider) as daemon:
        await offered(daemon, "toolbox/delete_thing")  # known to tmy, only not to this step
        reply = await daemon.push("ask delete x1")
        assert reply.text == "I may not delete things."
    first, second = provider.seen()
    assert "toolbox__delete_thing" not in tool_names(first)
    (answer,) = tool_messages(second)
    assert answer.startswith("permission denied"), answer
    assert toolbox_stdio.calls() == []  # the server never saw it


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_tool_list_change_is_seen_by_the_next_request(
    transport: str,
    toolbox_stdio: StdioToolbox,
    provider: FakeProvider,
    request: pytest.FixtureRequest,
) -> None:
    box: StdioToolbox | HttpToolbox = toolbox_stdio
    if transport == "http":
        box = request.getfixturevalue("toolbox_http")
    provider.script(
        "fake",
        [
            Reply(None, tool_calls=[{"name": "toolbox__grow", "arguments": {}}]),
            Reply("grown"),
            Reply(None, tool_calls=[{"name": "toolbox__extra", "arguments": {}}]),
            Reply("used extra"),
        ],
    )
    async with served(rules("assistant"), {"toolbox": box.config}, provider) as daemon:
        assert (await daemon.push("ask grow")).text == "grown"
        await offered(daemon, "toolbox/extra")  # the server announced it; tmy listed again
        assert (await daemon.push("ask use it")).text == "used extra"
    requests = provider.seen()
    assert "toolbox__extra" not in tool_names(requests[0])
    assert "toolbox__extra" in tool_names(requests[2])
    assert tool_messages(requests[3])[-1] == "extra!"
    assert [c["tool"] for c in box.calls()] == ["grow", "extra"]


# -- run.py ask --json ----------------------------------------------------------------------------


def test_ask_json_shows_the_mcp_step(toolbox_stdio: StdioToolbox, tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "mcp.yaml").write_text(rules("echo")["mcp.yaml"], encoding="utf-8")
    config = {
        "rules": str(tmp_path / "rules"),
        "plugins": str(tmp_path / "no-plugins"),
        "store": f"sqlite:///{tmp_path / 'tmy.db'}",
        "mcp": {"servers": {"toolbox": toolbox_stdio.config}},
    }
    (tmp_path / "tmy.yaml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    done = subprocess.run(
        [sys.executable, "run.py", "--config", str(tmp_path / "tmy.yaml"), "ask", "--json",
         "echo from the command line"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["answer"], out["error"]) == ("you said: from the command line", None)
    (step,) = out["steps"]
    assert (step["plugin"], step["result"]) == ("MCP", "you said: from the command line")
    assert [c["tool"] for c in toolbox_stdio.calls()] == ["echo"]
