"""The tool loop: native tool_calls and the text protocol, permissions, the turn limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.log_helpers import read_log
from tmy import logs
from tmy.llm.tools import allowed, parse_text_calls
from tmy.testing import Bot


def on(provider: FakeProvider, **model: Any) -> dict[str, Any]:
    return {"models": {"fake": {"base_url": provider.base_url, "model": "fake", **model}}}


TOOLS = """
rules:
  - id: assistant
    triggers: ["ask *"]
    on_error: "sorry: {STEP_ERROR}"
    steps:
      - plugin: LLM
        tools: [weather, delete_user, ADJUST]
        permissions: ["*", "!delete_*"]
        PROTOCOL
  - id: weather
    triggers: ["weather *"]
    tool:
      description: "The weather in a city today."
      parameters:
        type: object
        properties: {city: {type: string}}
        required: [city]
    steps:
      - plugin: ADJUST
        input: "Sunny in {QUESTION[city]}"
  - id: delete_user
    triggers: ["delete user *"]
    tool: {description: "Delete a user account."}
    steps:
      - {plugin: ADJUST, input: "deleted!"}
"""


def tool_rules(protocol: str = "native", limit: int | None = None) -> str:
    extra = f"tool_protocol: {protocol}"
    if limit:
        extra += f"\n        max_tool_turns: {limit}"
    return TOOLS.replace("PROTOCOL", extra)


async def test_native_tool_calls_run_rules_and_add_up_usage(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply(
                None,
                tool_calls=[
                    {"name": "weather", "arguments": {"city": "Paris"}},
                    {"name": "weather", "arguments": {"city": "Oslo"}},
                ],
                prompt_tokens=100,
                completion_tokens=20,
            ),
            Reply("Paris is sunny, so is Oslo.", prompt_tokens=150, completion_tokens=10),
        ],
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider)) as bot:
        reply = await bot.ask("ask weather in Paris and Oslo?")
        assert reply.error is None and reply.text == "Paris is sunny, so is Oslo."
        stats = reply.steps[0].extra["llm"]
        assert (stats["prompt_tokens"], stats["completion_tokens"]) == (250, 30)
        assert stats["tool_calls"] == 2 and len(stats["calls"]) == 2
        uris = [s.uri for s in reply.steps]
        assert uris == ["assistant/0", "assistant/0/tool/call_1_1", "assistant/0/tool/call_1_2"]
        assert (
            reply.steps[1].input == {"city": "Paris"} and reply.steps[1].result == "Sunny in Paris"
        )
    first, second = provider.seen()
    assert [t["function"]["name"] for t in first["tools"]] == ["weather", "delete_user", "ADJUST"]
    assert first["tools"][0]["function"]["parameters"]["required"] == ["city"]
    assistant, tool1, tool2 = second["messages"][-3:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1_1", "call_1_2"]
    assert tool1 == {"role": "tool", "tool_call_id": "call_1_1", "content": "Sunny in Paris"}
    assert tool2 == {"role": "tool", "tool_call_id": "call_1_2", "content": "Sunny in Oslo"}


async def test_tool_calls_arrive_in_a_stream(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply("", tool_calls=[{"name": "weather", "arguments": {"city": "Rome"}}]),
            Reply("Rome: sunny."),
        ],
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider, stream=True)) as bot:
        assert await bot.say("ask rome?") == "Rome: sunny."
    assert provider.seen()[1]["messages"][-1]["content"] == "Sunny in Rome"


async def test_denied_tool_is_told_permission_denied(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply(None, tool_calls=[{"name": "delete_user", "arguments": {}}]),
            Reply("I may not delete accounts."),
        ],
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider)) as bot:
        reply = await bot.ask("ask delete bob")
        assert reply.text == "I may not delete accounts."
        assert reply.steps[1].error.startswith("permission denied")
    tool_message = provider.seen()[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"].startswith(
        "permission denied"
    )


async def test_bad_calls_are_reported_to_the_model(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply(
                None,
                tool_calls=[
                    {"name": "nope", "arguments": {}},
                    {"name": "weather", "arguments": "{not json"},
                    {"name": "weather", "arguments": {"town": "x"}},
                ],
            ),
            Reply("done"),
        ],
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider)) as bot:
        assert await bot.say("ask ?") == "done"
    results = [m["content"] for m in provider.seen()[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("unknown tool 'nope'")
    assert results[1].startswith("the arguments are not valid JSON")
    assert results[2] == "invalid arguments for weather: 'city' is a required property"


async def test_an_executor_is_a_tool_too(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply(None, tool_calls=[{"name": "ADJUST", "arguments": {"input": "copied"}}]),
            Reply("ok"),
        ],
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider)) as bot:
        await bot.say("ask copy")
    assert provider.seen()[1]["messages"][-1]["content"] == "copied"


async def test_a_model_that_never_stops_calling_tools(provider: FakeProvider) -> None:
    provider.default = lambda body: Reply(
        None, tool_calls=[{"name": "weather", "arguments": {"city": "Loop"}}]
    )
    async with Bot({"r.yaml": tool_rules(limit=3)}, llm=on(provider)) as bot:
        reply = await bot.ask("ask forever")
        assert reply.error == (
            "the model was still calling tools (weather) after 3 turns (max_tool_turns)"
        )
        assert reply.text.startswith("sorry: the model was still calling tools")
    assert len(provider.seen()) == 3
    ids = [c["id"] for m in provider.seen()[-1]["messages"] for c in m.get("tool_calls") or []]
    assert ids == ["call_1_1", "call_2_1"]


async def test_the_default_limit_is_12_turns(provider: FakeProvider) -> None:
    provider.default = lambda body: Reply(
        None, tool_calls=[{"name": "weather", "arguments": {"city": "Loop"}}]
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider)) as bot:
        reply = await bot.ask("ask forever")
        assert reply.error == (
            "the model was still calling tools (weather) after 12 turns (max_tool_turns)"
        )
        assert len(reply.steps) == 1 + 11  # the LLM step, then one tool call per earlier turn
        assert reply.steps[-1].uri == "assistant/0/tool/call_11_1"
    assert len(provider.seen()) == 12


async def test_each_tool_call_is_logged_as_a_step(provider: FakeProvider, log_file: Path) -> None:
    provider.script(
        "fake",
        [
            Reply(None, tool_calls=[{"name": "weather", "arguments": {"city": "Bern"}}]),
            Reply(None, tool_calls=[{"name": "delete_user", "arguments": {}}]),
            Reply("Bern is sunny."),
        ],
    )
    async with Bot({"r.yaml": tool_rules()}, llm=on(provider)) as bot:
        reply = await bot.ask("ask bern")
        assert reply.text == "Bern is sunny."
    logs.flush()
    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    mine = [e for e in events if e.get("trace_id") == reply.trace_id]
    runs = [e for e in mine if e["event"] == "run.done"]  # the tool rule's run, then the caller's
    assert [r["rule"] for r in runs] == ["weather", "assistant"]
    done = {s["uri"]: s for r in runs for s in r["steps"]}
    assert done["assistant/0/tool/call_1_1"]["plugin"] == "tool:weather"
    assert done["assistant/0/tool/call_1_1"]["result"] == "Sunny in Bern"
    assert done["weather/0"]["result"] == "Sunny in Bern"  # the tool rule's own step
    assert done["assistant/0/tool/call_2_1"]["error"].startswith("permission denied")
    assert done["assistant/0"]["result"] == "Bern is sunny."
    calls = [e for e in mine if e["event"] == "llm.call"]
    assert [e["uri"] for e in calls] == ["assistant/0"] * 3
    assert all(e["model"] == "fake" and e["prompt_tokens"] == 10 for e in calls)


async def test_text_protocol_on_the_mock() -> None:
    async with Bot({"r.yaml": tool_rules("text")}) as bot:
        reply = await bot.ask('ask MOCK:TOOL:weather:{"city": "Lima"}')
        assert reply.error is None
        assert (
            reply.text == '[TESTONLY mock] tool results: <tool_result id="call_1_1" '
            'name="weather">\nSunny in Lima\n</tool_result>'
        )
        assert [s.uri for s in reply.steps] == ["assistant/0", "assistant/0/tool/call_1_1"]


async def test_text_protocol_is_explained_and_parsed(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply(
                'Let me check.\n<tool_call>\n{"calls":['
                '{"name":"weather","arguments":{"city":"Kyiv"}},'
                '{"name":"delete_user","arguments":{}}]}\n</tool_call>'
            ),
            Reply('<tool_call>{"name": "weather", "arguments": {"city": "Lviv"}}</tool_call>'),
            Reply("Kyiv and Lviv are sunny."),
        ],
    )
    async with Bot({"r.yaml": tool_rules("text")}, llm=on(provider)) as bot:
        assert await bot.say("ask Ukraine?") == "Kyiv and Lviv are sunny."
    first, second, third = provider.seen()
    assert "tools" not in first
    system = first["messages"][0]["content"]
    assert (
        '<tool_call>\n{"calls":[{"name":"<tool name>","arguments":{...}}]}\n</tool_call>' in system
    )
    assert "- weather: The weather in a city today." in system
    results = second["messages"][-1]
    assert results["role"] == "user"
    assert (
        '<tool_result id="call_1_1" name="weather">\nSunny in Kyiv\n</tool_result>'
        in (results["content"])
    )
    assert '<tool_result id="call_1_2" name="delete_user">\npermission denied' in results["content"]
    assert (
        '<tool_result id="call_2_1" name="weather">\nSunny in Lviv'
        in (third["messages"][-1]["content"])
    )


async def test_mock_tool_command_with_native_tools() -> None:
    async with Bot({"r.yaml": tool_rules()}) as bot:
        reply = await bot.ask('ask MOCK:TOOL:weather:{"city": "Quito"} MOCK:TOOL:delete_user:{}')
        assert (
            reply.text == "[TESTONLY mock] tool results: Sunny in Quito; permission denied: "
            "tool 'delete_user' is not allowed here"
        )


def test_permission_globs() -> None:
    rules = ["w*", "!delete_*", "read_file"]
    assert allowed("weather", rules) and allowed("wiki", rules) and allowed("read_file", rules)
    assert not allowed("delete_user", rules) and not allowed("search", rules)
    assert allowed("anything", []) and allowed("search", ["!delete_*"])
    assert not allowed("wipe", ["w*", "!wipe"])  # negatives win


def test_text_protocol_parsing() -> None:
    calls, rest, error = parse_text_calls(
        'Sure.\n<tool_call>{"calls":[{"name":"a","arguments":{"x":1}},{"name":"b"}]}</tool_call>'
    )
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("a", {"x": 1}), ("b", {})]
    assert rest == "Sure." and error == ""
    calls, _, error = parse_text_calls("<tool_call>{broken</tool_call>")
    assert calls == [] and error.startswith("invalid JSON in <tool_call>")
    calls, _, _ = parse_text_calls('<tool_call>{"name": "c", "params": {"y": 2}}')  # unterminated
    assert calls == [{"name": "c", "arguments": '{"y": 2}'}]


async def test_a_tool_rule_leaves_the_callers_session_and_summary_alone() -> None:
    """A rule run as a tool must not open its session or store its STEP_SUMMARY
    for the user's conversation: those belong to the rule the user reached."""
    rules = """
rules:
  - id: caller
    triggers: ["assistant *"]
    steps:
      - plugin: LLM
        tools: [probe]
  - id: probe
    session: 60
    tool:
      description: "a tool that would open a session"
      parameters: {type: object, properties: {}}
    steps:
      - plugin: ADJUST
        input: ["asked", "answered"]
        save: STEP_SUMMARY
      - plugin: ADJUST
        input: "probed"
"""
    from tmy.message import Message
    from tmy.testing import Bot

    async with Bot({"t.yaml": rules}) as bot:
        reply = await bot.ask("assistant MOCK:TOOL:probe:{}")
        assert reply.error is None and "probed" in reply.text
        assert any(s.uri.startswith("caller/0/tool/") for s in reply.steps)
        follow_up = await bot.ask("and now?")
        assert follow_up.rule is None  # no session was opened by the tool rule
        assert await bot.engine.summary_for(Message("", user="tester", platform="test")) is None


# -- from test_hardening_access.py (issue 7 hardening: who may do what, what a caller may send)


TOOL_RULES = """
variables:
  wiped: {scope: global, default: 0}
rules:
  - id: assistant
    triggers: ["assistant *"]
    steps:
      - plugin: LLM
        tools: [wipe, lounge, dm_only, weather]
  - id: wipe
    triggers: ["wipe"]
    admin_only: true
    tool: {description: "Wipe everything."}
    steps:
      - {plugin: ADJUST, input: "?= wiped + 1", save: wiped}
      - {plugin: ADJUST, input: "wiped!"}
  - id: lounge
    chats: ["group:lounge"]
    tool: {description: "Only in the lounge."}
    steps:
      - {plugin: ADJUST, input: "lounge ran"}
  - id: dm_only
    private: true
    platforms: [test]
    tool: {description: "Private chats on the test platform only."}
    steps:
      - {plugin: ADJUST, input: "dm ran"}
  - id: weather
    tool: {description: "The weather."}
    steps:
      - {plugin: ADJUST, input: "sunny"}
"""


def _tool_steps(reply) -> list:  # the tool-call records of the LLM step
    return [s for s in reply.steps if "/tool/" in s.uri]


async def test_admin_only_rule_is_refused_as_a_tool_to_a_non_admin(log_file: Path) -> None:
    async with Bot({"t.yaml": TOOL_RULES}, admins=frozenset({"test:boss"})) as bot:
        reply = await bot.ask("assistant MOCK:TOOL:wipe:{}", user="mallory")
        events = read_log(log_file)
        calls = _tool_steps(reply)
        assert len(calls) == 1
        assert calls[0].result.startswith("permission denied")
        assert "wipe" in calls[0].result
        assert await bot.var("wiped") == 0  # nothing ran
        assert not any(s.uri.startswith("wipe/") for s in reply.steps)
        refused = [e for e in events if e.get("event") == "tool.refused"]
        assert refused and refused[0]["rule"] == "wipe" and refused[0]["user"] == "mallory"

        # the admin it was written for still gets it
        reply = await bot.ask("assistant MOCK:TOOL:wipe:{}", user="boss")
        assert _tool_steps(reply)[0].result == "wiped!"
        assert await bot.var("wiped") == 1


async def test_chat_platform_and_private_filters_hold_for_tools() -> None:
    async with Bot({"t.yaml": TOOL_RULES}) as bot:
        elsewhere = await bot.ask("assistant MOCK:TOOL:lounge:{}", chat="group:other")
        assert _tool_steps(elsewhere)[0].result.startswith("permission denied")
        inside = await bot.ask("assistant MOCK:TOOL:lounge:{}", chat="group:lounge")
        assert _tool_steps(inside)[0].result == "lounge ran"

        in_group = await bot.ask("assistant MOCK:TOOL:dm_only:{}", chat="group:lounge")
        assert _tool_steps(in_group)[0].result.startswith("permission denied")
        other_platform = await bot.ask("assistant MOCK:TOOL:dm_only:{}", platform="web")
        assert _tool_steps(other_platform)[0].result.startswith("permission denied")
        in_dm = await bot.ask("assistant MOCK:TOOL:dm_only:{}")
        assert _tool_steps(in_dm)[0].result == "dm ran"

        unfiltered = await bot.ask("assistant MOCK:TOOL:weather:{}", chat="group:x")
        assert _tool_steps(unfiltered)[0].result == "sunny"
