"""MemoryRecall, long-term memory's implementation of the LLM runtime's Recall slot: what an LLM
step with ``memory:`` gets before its request and leaves after its answer, driven through real
LLM steps on the TESTONLY mock (which echoes the tail it was sent)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tmy.llm
import tmy.memory
from tmy.app import App
from tmy.config import Settings
from tmy.llm.inspect import inspect
from tmy.memory.dialog import open_key
from tmy.memory.entries import owner_entries, user_key
from tmy.message import Message
from tmy.store.base import MISSING

RULES = """
rules:
  - id: remember
    triggers: ["remember *"]
    steps: [{plugin: REMEMBER}]
  - id: full
    triggers: ["full *"]
    steps: [{plugin: LLM, memory: 3}]
  - id: none
    triggers: ["none *"]
    steps: [{plugin: LLM, memory: {max: 0, dialogue: 0}}]
  - id: quiet
    triggers: ["quiet *"]
    steps: [{plugin: LLM, memory: {max: 3, summarize: false}}]
  - id: computed
    triggers: ["computed *"]
    steps: [{plugin: LLM, memory: "?= {'max': 3, 'scope': QUESTION}"}]
"""
ANN = {"user": "ann", "platform": "console"}


@pytest.fixture
async def app() -> AsyncIterator[App]:
    settings = Settings(plugins=Path("/nonexistent"), store="sqlite:///:memory:")
    extensions = (tmy.llm.EXTENSION, tmy.memory.EXTENSION)
    async with App(settings, extensions=extensions, rule_texts={"r.yaml": RULES}) as a:
        await a.engine.handle(Message("remember my cat is called Mimi", **ANN))
        yield a


async def _uses(app: App) -> int:
    """The entry's uses as written (noted uses are written within a second: now, here)."""
    await tmy.memory.memory_of(app.engine.services).uses.flush(app.store)
    (entry,) = await owner_entries(app.store, user_key("console", "ann"))
    return int(entry["uses"])


async def test_recall_fills_the_tail_counts_the_use_and_records_the_turn(app: App) -> None:
    reply = await app.engine.handle(Message("full what is my cat called", **ANN))
    assert "<memory>" in reply.text and "- my cat is called Mimi" in reply.text
    details = reply.steps[0].extra["memory"]
    assert [e["text"] for e in details["entries"]] == ["my cat is called Mimi"]
    assert await _uses(app) == 1
    opened = await app.store.get(open_key(Message("", **ANN)))
    assert opened["turns"][0][0] == "what is my cat called"


async def test_summarize_false_recalls_without_recording_the_turn(app: App) -> None:
    reply = await app.engine.handle(Message("quiet what is my cat called", **ANN))
    assert "- my cat is called Mimi" in reply.text
    assert await app.store.get(open_key(Message("", **ANN))) is MISSING


async def test_max_0_and_dialogue_0_recall_nothing_but_the_turn_still_counts(app: App) -> None:
    reply = await app.engine.handle(Message("none what is my cat called", **ANN))
    assert "<memory>" not in reply.text and "memory" not in reply.steps[0].extra
    assert await _uses(app) == 0
    opened = await app.store.get(open_key(Message("", **ANN)))
    assert opened["rule"] == "none"  # summarize defaults to true


async def test_the_ctx_dry_run_writes_nothing(app: App) -> None:
    seen = await inspect(app, Message("full what is my cat called", **ANN))
    assert seen.request is not None and "- my cat is called Mimi" in str(seen.request["body"])
    assert await _uses(app) == 0
    assert await app.store.get(open_key(Message("", **ANN))) is MISSING


async def test_a_computed_memory_value_that_is_wrong_is_a_step_error(app: App) -> None:
    reply = await app.engine.handle(Message("computed whatever", **ANN))
    assert reply.error is not None and "memory: unknown key 'scope'" in reply.error
