"""The LLM extension's commands, ``ctx`` and ``budget``: text and JSON forms, on the app given."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tmy.llm
from tests.support.llm_fake_provider import FakeProvider
from tests.support.llm_helpers import on
from tmy.app import App
from tmy.command import Invocation, parse_words
from tmy.config import Settings
from tmy.llm import runtime_of
from tmy.llm.commands import BUDGET, CTX
from tmy.llm.usage import today
from tmy.memory.runtime import memory_of
from tmy.message import Message
from tmy.testing import Bot, serving

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
    assert result.data == {
        "rule": None,
        "error": None,
        "user": "ann",
        "text": "nothing matches",
        "via": "query",
        "request": None,
    }
    result = await CTX.run(_cli(app, text="plain", json=False))
    assert result.text == "(rule 'plain' sends no LLM request for this message)"


async def test_ctx_in_a_chat_switched_off_says_nothing_would_be_sent(app: App) -> None:
    """As ask and explain do: a chat where '.tmy off' silenced the bot sends no request."""
    assert app.switch is not None
    await app.switch.set(ANN, True)
    result = await CTX.run(_cli(app, text="chat hello", json=False))
    assert result.code == 1 and result.data["request"] is None
    assert result.text.startswith("(the bot is switched off in this chat")
    await app.switch.set(ANN, False)
    assert (await CTX.run(_cli(app, text="chat hello", json=False))).code == 0


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


# -- ctx [QUERY]: the next request for this user in this chat, changing nothing -----------------

CTX_RULES = """
variables:
  asked: {scope: user, default: 0}
rules:
  - id: remember
    triggers: ["remember *"]
    steps: [{plugin: REMEMBER}]
  - id: ai
    triggers: ["ai *"]
    steps:
      - {plugin: ADJUST, input: "?= asked + 1", save: asked}
      - {plugin: ADJUST, input: "{QUESTION}"}
      - {plugin: LLM, system: "You are tmy.", history: 2, memory: 6, tools: [lookup]}
  - id: lookup
    tool: {description: "Look a word up."}
    steps: [{plugin: ADJUST, input: "a definition"}]
"""
ROOT = {"user": "root", "platform": "test", "chat": "group:7"}


async def _snapshot(store_file: Path, bot: Bot) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Every key and value, and the bytes of the SQLite file and its WAL.

    First what the once-a-second writers hold (recall uses, usage, the last LLM message)
    is written — a write a run only queued shows — and the WAL is checkpointed into the
    file: the store's checkpoint thread copies pages back whenever a read wakes it, which
    moves bytes but changes nothing (the -shm file's read marks move with every read)."""
    services = bot.engine.services
    store = services.store
    await memory_of(services).uses.flush(store)
    await runtime_of(services).tally.flush()
    keys = await store.keys("")
    values = dict(zip(keys, await store.get_many(keys), strict=True))
    with contextlib.closing(sqlite3.connect(store_file, timeout=10)) as db:
        for _ in range(200):  # busy while the store's own thread checkpoints: again
            if db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the WAL could not be checkpointed in 2 s")
    files = {name: (store_file.parent / name).read_bytes() for name in ("tmy.db", "tmy.db-wal")}
    return values, files


async def test_ctx_in_chat_shows_the_next_request_and_changes_nothing(
    provider: FakeProvider, tmp_path: Path
) -> None:
    db = tmp_path / "tmy.db"
    async with Bot(
        {"r.yaml": CTX_RULES}, store=f"sqlite:///{db}", admins=["test:root"], llm=on(provider)
    ) as bot:
        await bot.say("remember my cat is called Mimi", **ROOT)
        for word in ("one", "two", "three"):  # 3 turns > history: 2: the next request folds
            await bot.say(f"ai {word}", **ROOT)
        sent = len(provider.seen())
        before = await _snapshot(db, bot)
        shown = await bot.say(".tmy ctx what is my cat called", **ROOT)
        again = await bot.say(".tmy ctx", **ROOT)  # no QUERY: the last LLM message
        assert await bot.say(".tmy ctx", user="mallory", chat="group:7") == ""  # admins only
        after = await _snapshot(db, bot)
    assert len(provider.seen()) == sent  # nothing sent
    assert after == before  # not a key, not a byte: no history, usage, counter, memory use
    lines = shown.splitlines()
    assert lines[0] == "# rule ai · step ai/2 · scene general"
    follow = "# 'what is my cat called' as a follow-up to your last LLM conversation (rule ai)"
    assert follow in lines
    assert "# tools offered: lookup" in lines
    assert "# the history is full: the next request folds it into one summary pair first" in lines
    assert any(line.startswith("# memory (") for line in lines)
    system = shown.split("\n[system] ", 1)[1].split("\n[user] ")[0]
    assert system.endswith("\n\nYou are tmy.")  # the scene prompt, then the step's system
    history = [line for line in lines if line.startswith("[assistant]")]
    assert history == ["[assistant] echo: one", "[assistant] echo: two", "[assistant] echo: three"]
    assert "- my cat is called Mimi" in shown and lines[-1].endswith("what is my cat called")
    assert "# your last LLM message in this chat: 'ai three'" in again
    assert again.endswith("\nthree") and "- my cat is called Mimi" not in again


async def test_ctx_without_query_and_without_history_says_so(app: App) -> None:
    result = await CTX.run(_cli(app, text=None, json=False))
    assert (result.text, result.code) == (
        "(no earlier message of yours in this chat reached an LLM step: give a QUERY)",
        1,
    )
    await app.engine.handle(Message("chat hello", user="ann"))
    result = await CTX.run(_cli(app, text=None, json=False))
    assert result.code == 0 and result.data["via"] == "last"
    assert result.data["text"] == "chat hello"
    body = result.data["request"]["body"]
    assert body["messages"][-1]["content"].endswith("\n\nhello")
    assert result.data["request"]["history_len"] == 0  # "chat" keeps no history


async def test_ctx_over_http_admin_commands(provider: FakeProvider) -> None:
    key = "k-ctx-test"
    async with serving({"r.yaml": CTX_RULES}, llm=on(provider), http_api_keys=[key]) as daemon:
        await daemon.push("ai hello", user="ann", chat="group:7")
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:

            async def post(body: dict[str, Any]) -> dict[str, Any]:
                response = await client.post(
                    "/admin/commands/ctx",
                    json={**body, "user": "ann", "chat": "group:7", "platform": "test"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert response.status_code == 200, response.text
                return dict(response.json())

            last = await post({"args": {}})
            query = await post({"argv": "ai what now"})
    assert last["ok"] and last["data"]["via"] == "last" and last["data"]["text"] == "ai hello"
    assert last["text"].startswith("# rule ai · step ai/2 · scene general\n")
    assert query["data"]["via"] == "query"
    messages = query["data"]["request"]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"].endswith("\n\nwhat now")
    assert len(provider.seen()) == 1  # only the real message was sent
