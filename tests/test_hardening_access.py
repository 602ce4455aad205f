"""Hardening: who may do what (tools, admins) and what a caller may send (ids, bodies).

Each test reproduces an attack on the daemon as it was before the fix: a
non-admin reaching an ``admin_only`` rule through an LLM tool call, a spoofed
``platform:user`` admin id, and hostile HTTP bodies (deep nesting, huge or
non-string ids, lone surrogates).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.log_helpers import read_log
from tmy.adapters.http import HttpAdapter
from tmy.testing import Bot

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


ADMIN_RULES = """
rules:
  - id: admin
    triggers: [reload]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "reloaded"}
"""


async def test_platform_user_admin_cannot_be_spoofed_from_another_platform() -> None:
    admins = frozenset({"telegram:42", "7", "matrix:@ops:example.org"})
    async with Bot({"a.yaml": ADMIN_RULES}, admins=admins) as bot:
        # the attack: a user id that spells the listed platform:user, on another platform
        assert (await bot.ask("reload", user="telegram:42", platform="http")).rule is None
        # a bare id never matches a user id containing the separator
        assert (await bot.ask("reload", user="x:7", platform="http")).rule is None
        assert (await bot.ask("reload", user="7:", platform="http")).rule is None
        # the real ones
        assert (await bot.ask("reload", user="42", platform="telegram")).rule == "admin"
        assert (await bot.ask("reload", user="42", platform="http")).rule is None
        assert (await bot.ask("reload", user="7", platform="discord")).rule == "admin"
        # an id containing ':' is reachable only through its platform:user entry
        ops = await bot.ask("reload", user="@ops:example.org", platform="matrix")
        assert ops.rule == "admin"
        assert (await bot.ask("reload", user="@ops:example.org", platform="http")).rule is None


def test_admins_parses_entries_once() -> None:
    from tmy.engine.core import Admins

    admins = Admins(frozenset({"telegram:42", "7", ":odd", "trailing:"}))
    assert admins.admits("telegram", "42")
    assert not admins.admits("http", "telegram:42")
    assert admins.admits("any", "7")
    # malformed entries are bare ids; they can never match an id containing ':'
    assert not admins.admits("", "odd")
    assert not admins.admits("x", "trailing:")
    assert not Admins(frozenset())


HTTP_RULES = """
rules:
  - id: who
    triggers: ["who"]
    steps:
      - {plugin: ADJUST, input: "{USER}@{PLATFORM}/{CHAT}"}
  - id: big
    triggers: ["big"]
    steps:
      - {plugin: ADJUST, input: "?= 'x' * 60000"}
"""


@pytest.fixture
async def http_bot() -> AsyncIterator[tuple[httpx.AsyncClient, Bot]]:
    async with Bot({"h.yaml": HTTP_RULES}) as bot:
        adapter = HttpAdapter("127.0.0.1:0")
        await adapter.start(bot.engine.handle)
        try:
            base = f"http://127.0.0.1:{adapter.port}"
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                yield client, bot
        finally:
            await adapter.stop()


async def test_deeply_nested_json_is_a_400_not_a_500(http_bot) -> None:
    client, _ = http_bot
    body = "[" * 100_000 + "]" * 100_000
    response = await client.post(
        "/v1/messages", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "nested" in response.json()["error"]
    nested = '{"text": "who", "user": ' + "[" * 50_000 + "]" * 50_000 + "}"
    response = await client.post(
        "/v1/messages", content=nested, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    # the daemon keeps serving
    ok = await client.post("/v1/messages", json={"text": "who", "user": "ann"})
    assert ok.status_code == 200 and ok.json()["answer"] == "ann@http/private:ann"


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("user", "u" * 257, "257 characters"),
        ("chat", "c" * 1_000_000, "limit is 256"),
        ("platform", "p" * 300, "limit is 256"),
        ("user", True, "must be a string"),
        ("chat", False, "must be a string"),
        ("user", 1.5, "must be a string"),
        ("user", ["a"], "must be a string"),
        ("user", {"id": 1}, "must be a string"),
    ],
    ids=["long-user", "1MB-chat", "long-platform", "bool", "bool2", "float", "list", "dict"],
)
async def test_bad_ids_are_refused_with_400(http_bot, field, value, says) -> None:
    client, _ = http_bot
    response = await client.post("/v1/messages", json={"text": "who", field: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error and says in error


async def test_lone_surrogates_in_ids_are_refused(http_bot) -> None:
    client, _ = http_bot
    raw = '{"text": "who", "user": "ann\\ud800"}'
    response = await client.post(
        "/v1/messages", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]
    # numeric ids (as platforms send them) and ids at the limit are fine
    ok = await client.post("/v1/messages", json={"text": "who", "user": 42, "chat": "g" * 256})
    assert ok.status_code == 200
    assert ok.json()["answer"] == "42@http/" + "g" * 256


async def test_engine_refuses_bad_ids_from_any_adapter() -> None:
    async with Bot({"h.yaml": HTTP_RULES}) as bot:
        reply = await bot.ask("who", user="u" * 10_000)
        assert reply.rule is None and "user" in reply.error and "limit is 256" in reply.error
        reply = await bot.ask("who", chat="bad\ud800")
        assert reply.rule is None and "surrogate" in reply.error
        assert (await bot.ask("who", user="ann")).text == "ann@test/private:ann"


async def test_reply_over_the_limit_is_a_clear_error(http_bot) -> None:
    client, _ = http_bot
    data = (await client.post("/v1/messages", json={"text": "big"})).json()
    assert data["rule"] == "big"
    assert "max_reply_chars" in data["error"] and "60000" in data["error"]
    assert len(data["answer"]) < 1000
    assert len(json.dumps(data)) < 5000


GROW_RULES = """
variables:
  notes: {scope: global, default: []}
rules:
  - id: note
    triggers: ["note *"]
    steps:
      - {plugin: ADJUST, input: "?= notes + [QUESTION]", save: notes}
      - {plugin: ADJUST, input: "noted"}
  - id: count
    triggers: [count]
    steps:
      - {plugin: ADJUST, input: "?= len(notes)"}
"""


async def test_a_value_too_big_for_the_store_is_refused_and_nothing_is_lost() -> None:
    async with Bot({"g.yaml": GROW_RULES}, max_value_bytes=50_000) as bot:
        chunk = "x" * 15_000
        for _ in range(3):
            assert (await bot.ask(f"note {chunk}")).error is None
        refused = await bot.ask(f"note {chunk}")
        assert "max_value_bytes" in refused.error and "50,000" in refused.error
        assert (await bot.say("count")) == "3"  # the stored list is intact
