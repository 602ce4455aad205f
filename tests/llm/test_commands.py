"""The LLM extension's commands, ``ctx`` and ``budget``: text and JSON forms, on the app given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tmy.llm
from tmy.app import App
from tmy.command import Invocation, parse_words
from tmy.config import Settings
from tmy.llm.commands import BUDGET, CTX
from tmy.llm.usage import today
from tmy.message import Message

RULES = """
rules:
  - id: chat
    triggers: ["chat *"]
    steps:
      - plugin: LLM
        system: "Be brief."
  - id: plain
    triggers: ["plain"]
    steps: [{plugin: ADJUST, input: "no model here"}]
"""
ANN = Message("", user="ann")


@pytest.fixture
async def app() -> AsyncIterator[App]:
    settings = Settings(plugins=Path("/nonexistent"), store="sqlite:///:memory:")
    async with App(settings, extensions=(tmy.llm.EXTENSION,), rule_texts={"r.yaml": RULES}) as a:
        yield a


def _cli(app: App, **args: object) -> Invocation:
    return Invocation(args, ANN, "cli", app, app.settings)


async def test_ctx_prints_the_request_without_sending_it(app: App) -> None:
    result = await CTX.run(_cli(app, text="chat hello", json=False))
    assert result.ok and result.code == 0
    header, body = result.text.split("\n{", 1)
    assert header.splitlines()[:2] == [
        "# rule chat · step chat/0 · scene general",
        "# POST TESTONLY · model TESTONLY (TESTONLY)",
    ]
    assert "# tokens today for ann: 0 prompt + 0 completion (0 cached)" in header
    request = result.data["request"]
    assert json.loads("{" + body) == request["body"]
    assert request["prefix_sha256"] in header and request["scene"] == "general"
    assert result.data["rule"] == "chat" and result.data["tokens_today"] == {}
    usage = (await BUDGET.run(_cli(app, other=None))).data["usage"]
    assert usage == {"all": {}, "chat": {}, "user": {}}  # nothing was sent, nothing counted


async def test_ctx_json_prints_only_the_body(app: App) -> None:
    result = await CTX.run(_cli(app, text="chat hello", json=True))
    assert json.loads(result.text) == result.data["request"]["body"]
    assert result.data["request"]["body"]["messages"][-1]["content"].endswith("\n\nhello")


async def test_ctx_when_nothing_would_be_sent_exits_1(app: App) -> None:
    result = await CTX.run(_cli(app, text="nothing matches", json=False))
    assert (result.text, result.code, result.ok) == (
        "(no rule matched: nothing would be sent)",
        1,
        True,  # not an error: printed to stdout, as before
    )
    assert result.data == {"rule": None, "error": None, "user": "ann", "request": None}
    result = await CTX.run(_cli(app, text="plain", json=False))
    assert result.text == "(rule 'plain' sends no LLM request for this message)"


async def test_ctx_in_chat_takes_the_rest_of_the_line(app: App) -> None:
    args = parse_words(CTX, "chat two words")
    inv = Invocation(args, ANN, "chat", app, app.settings, compact=True)
    result = await CTX.run(inv)
    assert result.data["request"]["body"]["messages"][-1]["content"].endswith("two words")


async def test_budget_counts_the_sender_or_another_user(app: App) -> None:
    await app.engine.handle(Message("chat hi", user="ann"))
    day = today(app.engine.tz)
    mine = await BUDGET.run(_cli(app, other=None))
    assert mine.text.startswith(f"LLM usage on {day} for console:ann: {{")
    assert json.loads(mine.text.split(": ", 1)[1]) == mine.data["usage"]
    assert mine.data["usage"]["user"]["calls"] == 1 and mine.data["day"] == day
    args = parse_words(BUDGET, "bob")
    other = await BUDGET.run(Invocation(args, ANN, "chat", app, app.settings, compact=True))
    assert other.text.startswith(f"LLM usage on {day} for console:bob: ")
    assert other.data["user"] == "bob" and other.data["usage"]["user"] == {}
    assert other.data["usage"]["all"]["calls"] == 1
