"""Hot variables: a pure step that reads and saves one variable is one atomic store update.

These tests fail if such a step were applied twice (a retried compare-and-set
counted again) or an update were lost, on every store backend.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.testing import Bot

HOT = """
variables:
  hits: {scope: global, default: 0}
  board: {scope: global, default: {}}
rules:
  - id: hit
    triggers: [hit]
    steps:
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
  - id: score
    triggers: ["score *"]
    steps:
      - {plugin: ADJUST, input: "?= board.get(QUESTION, 0) + 1", save: "board[{QUESTION}]"}
      - {plugin: ADJUST, input: "?= str(board[QUESTION])"}
"""


def load(text: str) -> Any:
    return load_sources([(Path("h.yaml"), text)], default_registry())


def test_a_pure_read_modify_write_step_is_an_atomic_update_and_frees_the_lock() -> None:
    book = load(HOT)
    assert book.by_id["hit"].steps[0].atomic_update
    assert book.by_id["score"].steps[0].atomic_update
    assert "hits" not in book.locked_variables and "board" not in book.locked_variables


def test_a_variable_an_impure_step_holds_locked_keeps_the_lock_everywhere() -> None:
    book = load(
        HOT
        + """
  - id: fetch
    triggers: [fetch]
    steps:
      - {plugin: HTTP, url: "http://127.0.0.1:9/?n={hits}", save: hits}
"""
    )
    assert not book.by_id["hit"].steps[0].atomic_update
    assert "hits" in book.locked_variables


def test_a_variable_in_a_multi_step_span_keeps_the_lock() -> None:
    book = load(
        HOT
        + """
  - id: guard
    triggers: [guard]
    steps:
      - {plugin: ADJUST, input: "?= hits", save: seen}
      - {plugin: ADJUST, input: "?= seen + 2", save: hits}
"""
    )
    assert not book.by_id["hit"].steps[0].atomic_update
    assert book.by_id["guard"].atomic_vars == ("hits",)


async def test_500_concurrent_hot_increments_are_consecutive_and_exact(store_url: str) -> None:
    async with Bot({"h.yaml": HOT}, store=store_url) as bot:
        replies = await asyncio.gather(*(bot.ask("hit", user=f"u{i}") for i in range(500)))
        assert all(r.error is None for r in replies), [r.error for r in replies if r.error][:3]
        answers = sorted(int(r.text) for r in replies)
        assert answers == list(range(1, 501)), "an increment was lost or applied twice"
        assert await bot.var("hits") == 500


async def test_nested_hot_saves_are_exact_and_the_run_sees_its_own_value(store_url: str) -> None:
    async with Bot({"h.yaml": HOT}, store=store_url) as bot:
        replies = await asyncio.gather(
            *(bot.ask(f"score {'ab'[i % 2]}", user=f"u{i}") for i in range(200))
        )
        for key in "ab":
            seen = sorted(int(r.text) for i, r in enumerate(replies) if "ab"[i % 2] == key)
            assert seen == list(range(1, 101))
        assert await bot.var("board") == {"a": 100, "b": 100}


async def test_two_daemons_on_one_store_share_one_hot_counter(store_url: str) -> None:
    async with (
        Bot({"h.yaml": HOT}, store=store_url) as one,
        Bot({"h.yaml": HOT}, store=store_url) as two,
    ):
        replies = await asyncio.gather(
            *(b.ask("hit", user=f"u{i}") for i in range(150) for b in (one, two))
        )
        assert sorted(int(r.text) for r in replies) == list(range(1, 301))


PURE_PLUGIN = """
from typing import Any
import asyncio

from tmy.executors.registry import Registry

CALLS = []


async def double(value: Any, cfg: dict, ctx: Any) -> Any:
    CALLS.append(value)
    return value * 2


async def sneaky(value: Any, cfg: dict, ctx: Any) -> Any:
    await asyncio.sleep(0)
    return value


def register(registry: Registry) -> None:
    registry.add("DOUBLE", double, pure=True)
    registry.add("SNEAKY", sneaky, pure=True)
"""


async def test_a_plugin_declared_pure_gets_the_fast_path_and_one_that_awaits_is_refused(
    tmp_path: Path,
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "pure.py").write_text(PURE_PLUGIN)
    rules = """
variables:
  n: {default: 1}
  m: {default: 1}
rules:
  - id: double
    triggers: [double]
    steps: [{plugin: DOUBLE, input: "?= n", save: n}]
  - id: sneaky
    triggers: [sneaky]
    steps: [{plugin: SNEAKY, input: "?= m + 1", save: m}]
"""
    async with Bot({"p.yaml": rules}, plugins=plugins) as bot:
        assert bot.engine.rulebook.by_id["double"].steps[0].atomic_update
        replies = await asyncio.gather(*(bot.ask("double") for _ in range(10)))
        assert sorted(r.text for r in replies) == sorted(str(2**k) for k in range(1, 11))
        assert await bot.var("n") == 1024
        refused = await bot.ask("sneaky")
        assert refused.error is not None and "declared pure but waited on I/O" in refused.error
        assert await bot.var("m") == 1  # nothing written


@pytest.mark.parametrize("when", ["?= QUESTION != 'no'", "yes"])
async def test_when_is_still_honoured_on_the_fast_path(when: str) -> None:
    rules = f"""
variables:
  n: {{default: 0}}
rules:
  - id: inc
    triggers: ["inc *"]
    steps:
      - {{plugin: ADJUST, input: "?= n + 1", save: n, when: "{when}"}}
      - {{plugin: ADJUST, input: "n={{n}}"}}
"""
    async with Bot({"w.yaml": rules}) as bot:
        assert await bot.say("inc yes") == "n=1"
        expected = "n=1" if when.startswith("?=") else "n=2"
        assert await bot.say("inc no") == expected


def test_a_rule_prefetches_what_it_reads_but_not_what_it_only_takes_from() -> None:
    book = load(
        """
variables:
  items: {default: [a, b]}
  last: {scope: user, default: ""}
  greeting: {default: hi}
rules:
  - id: chain
    triggers: [chain]
    steps:
      - {plugin: ADJUST, input: "{greeting}"}
      - {plugin: ADJUST, save: last}
      - {plugin: ADJUST, input: LOOPBACK, INPUT: items}
      - {plugin: ADJUST, input: "{STEP_RESULT} {last}"}
"""
    )
    rule = book.by_id["chain"]
    assert rule.atomic_vars == ()
    assert rule.prefetch == ("greeting", "last")  # items: only taken from; last: read at the end
