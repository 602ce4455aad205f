"""tmy.memory.EXTENSION: what it adds, its runtime (memory_of), and its recall plugged into the
LLM runtime for as long as the app is open — the extension point that keeps tmy.llm below it."""

from __future__ import annotations

from pathlib import Path

import pytest

import tmy.llm
import tmy.memory
from tmy.app import App
from tmy.command import Invocation
from tmy.config import Settings
from tmy.errors import ConfigError, ExecutorError
from tmy.extension import Extension
from tmy.llm import runtime_of
from tmy.llm.commands import CTX
from tmy.memory import MemoryRuntime, memory_of
from tmy.memory.hooks import MemoryRecall
from tmy.message import Message

RULES = """
rules:
  - id: remember
    triggers: ["remember *"]
    steps: [{plugin: REMEMBER}]
  - id: chat
    triggers: ["chat *"]
    steps:
      - plugin: LLM
        memory: 6
"""
BOTH = (tmy.llm.EXTENSION, tmy.memory.EXTENSION)


def _settings(**llm: object) -> Settings:
    return Settings(plugins=Path("/nonexistent"), store="sqlite:///:memory:", llm=dict(llm))


def test_the_extension_names_what_it_adds() -> None:
    ext = tmy.memory.EXTENSION
    assert isinstance(ext, Extension) and ext.name == "memory"
    assert [s.name for s in ext.executors(_settings())] == ["REMEMBER", "FORGET"]
    assert [c.name for c in ext.commands] == ["memory", "dialog"]
    assert not ext.rule_keys and not ext.step_keys
    with pytest.raises(ConfigError, match="kep"):  # llm.memory is validated with the settings
        _settings(memory={"dialogue": {"kep": 3}})


async def test_the_lifespan_plugs_recall_into_the_llm_runtime_while_the_app_is_open() -> None:
    async with App(_settings(), extensions=BOTH, rule_texts={"r.yaml": RULES}) as app:
        services = app.engine.services
        memory = memory_of(services)
        assert isinstance(memory, MemoryRuntime) and app.state["memory"] is memory
        recall = runtime_of(services).recall
        assert isinstance(recall, MemoryRecall) and recall.memory is memory
        await app.engine.handle(Message("remember my cat is called Mimi", user="ann"))
        reply = await app.engine.handle(Message("chat what is my cat called", user="ann"))
        assert "my cat is called Mimi" in reply.text  # the mock echoes the recalled tail
        assert reply.steps[0].extra["memory"]["entries"][0]["text"] == "my cat is called Mimi"
        llm = runtime_of(services)
    assert llm.recall is None  # unplugged when the app closed


async def test_memory_works_without_the_llm_extension() -> None:
    rules = 'rules: [{id: r, triggers: ["remember *"], steps: [{plugin: REMEMBER}]}]'
    async with App(_settings(), extensions=(tmy.memory.EXTENSION,), rule_texts={"r": rules}) as app:
        reply = await app.engine.handle(Message("remember tea, not coffee", user="ann"))
        assert reply.text == "OK, I'll remember: tea, not coffee"
        assert "llm" not in app.state


async def test_memory_of_names_the_missing_extension() -> None:
    async with App(_settings(), rule_texts={"r.yaml": "rules: []"}) as bare:
        with pytest.raises(ExecutorError, match="memory extension is not installed"):
            memory_of(bare.engine.services)


async def test_ctx_shows_what_memory_recalled() -> None:
    async with App(_settings(), extensions=BOTH, rule_texts={"r.yaml": RULES}) as app:
        await app.engine.handle(Message("remember my cat is called Mimi", user="ann"))
        inv = Invocation(
            {"text": "chat what is my cat called", "json": False},
            Message("", user="ann"),
            "cli",
            app,
            app.settings,
        )
        result = await CTX.run(inv)
    assert "# memory (lexical, min_score 0.35): 1 of 1 entries" in result.text
    assert "#   + " in result.text and "'my cat is called Mimi'" in result.text
    assert result.data["memory"]["entries"][0]["text"] == "my cat is called Mimi"
    entry = result.data["memory"]["entries"][0]
    assert entry["scope"] == "user"
