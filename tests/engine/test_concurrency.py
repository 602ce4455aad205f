"""Concurrent runs never lose an update on persistent variables (every store, via the engine)."""

from __future__ import annotations

import asyncio
import json
import textwrap

import pytest

from tests.support.gate import Gate
from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.testing import Bot

N_ITEMS = 200
N_INCREMENTS = 500
N_USERS = 100


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    """conftest's ``store_url`` plus a Redis Cluster: these tests run on all three."""
    return str(request.getfixturevalue(f"{request.param}_store_url"))


RULES = f"""
variables:
  pool: {{scope: global, default: {json.dumps(list(range(N_ITEMS)))}}}
  counter: {{scope: global, default: 0}}
  scores: {{scope: global, default: {{}}}}
  ring: {{scope: global, default: [a, b, c, d, e]}}
rules:
  - id: take
    triggers: [take]
    steps:
      - {{plugin: ADJUST, input: SHIFT, INPUT: pool}}
  - id: count
    triggers: [count]
    steps:
      - {{plugin: ADJUST, input: "?= counter + 1", save: counter}}
  - id: score
    triggers: ["score *"]
    steps:
      - {{plugin: ADJUST, input: "?= int(QUESTION)", save: "scores[{{USER}}]"}}
  - id: spin
    triggers: [spin]
    steps:
      - {{plugin: ADJUST, input: LOOPBACK, INPUT: ring}}
"""


async def gather_bounded(coros: list, within: float = 100.0) -> list:
    """All results; a generous bound turns a deadlock into a failure instead of a hang."""
    async with asyncio.timeout(within):
        return await asyncio.gather(*coros)


async def test_concurrent_shift_hands_out_every_item_exactly_once(store_url: str) -> None:
    async with Bot({"c.yaml": RULES}, store=store_url) as bot:
        replies = await gather_bounded([bot.ask("take", user=f"u{i}") for i in range(N_ITEMS)])
        assert [r.error for r in replies] == [None] * N_ITEMS
        taken = sorted(int(r.text) for r in replies)
        assert taken == list(range(N_ITEMS))
        assert await bot.var("pool") == []
        late = await bot.ask("take")
        assert late.error is not None and "empty" in late.error


async def test_concurrent_increments_all_count(store_url: str) -> None:
    async with Bot({"c.yaml": RULES}, store=store_url) as bot:
        replies = await gather_bounded(
            [bot.ask("count", user=f"u{i % 50}") for i in range(N_INCREMENTS)]
        )
        assert [r.error for r in replies] == [None] * N_INCREMENTS
        assert await bot.var("counter") == N_INCREMENTS
        # every run saw a different value: no two read the same counter
        assert sorted(int(r.text) for r in replies) == list(range(1, N_INCREMENTS + 1))


async def test_concurrent_nested_saves_from_many_users_lose_no_key(store_url: str) -> None:
    async with Bot({"c.yaml": RULES}, store=store_url) as bot:
        replies = await gather_bounded(
            [bot.ask(f"score {i}", user=f"user{i}") for i in range(N_USERS)]
        )
        assert [r.error for r in replies] == [None] * N_USERS
        assert await bot.var("scores") == {f"user{i}": i for i in range(N_USERS)}


async def test_concurrent_loopback_keeps_every_member(store_url: str) -> None:
    async with Bot({"c.yaml": RULES}, store=store_url) as bot:
        replies = await gather_bounded([bot.ask("spin") for _ in range(52)])
        counts = {m: [r.text for r in replies].count(m) for m in "abcde"}
        assert sorted(counts.values()) == [10, 10, 10, 11, 11]
        # 52 rotations of a 5-member ring leave it rotated by 2
        assert await bot.var("ring") == ["c", "d", "e", "a", "b"]


async def test_two_engines_on_one_store_share_the_counter(store_url: str) -> None:
    """Two daemons on the same store (scale-out) still lose no increment."""
    async with (
        Bot({"c.yaml": RULES}, store=store_url) as one,
        Bot({"c.yaml": RULES}, store=store_url) as two,
    ):
        half = N_INCREMENTS // 5
        replies = await gather_bounded(
            [one.ask("count") for _ in range(half)] + [two.ask("count") for _ in range(half)]
        )
        assert [r.error for r in replies] == [None] * (2 * half)
        assert await one.var("counter") == 2 * half


# -- from test_bughunt.py (a bug hunt: each failed before its fix)


@pytest.fixture
def gate() -> Gate:
    return Gate()


QUEUE_RULES = """
variables:
  queue: {scope: global, default: ["x"]}
rules:
  - id: push
    triggers: ["push *"]
    steps:
      - plugin: GATED
        input: "?= queue + [QUESTION]"
        save: queue
  - id: next
    triggers: ["next"]
    steps:
      - plugin: ADJUST
        input: SHIFT
        INPUT: queue
"""


async def test_locked_step_and_list_mode_update_do_not_lose_updates(
    store_url: str, gate: Gate
) -> None:
    async with Bot({"q.yaml": QUEUE_RULES}, extensions=gate.extensions(), store=store_url) as bot:
        push = asyncio.create_task(bot.ask("push y"))
        await gate.wait_entered()
        # "push" now holds queue's lock between its read and its write; a SHIFT
        # arriving meanwhile must wait for it instead of landing in between
        shift = asyncio.create_task(bot.ask("next"))
        await asyncio.sleep(0.2)
        assert not shift.done(), "the SHIFT ran while a read-modify-write held the lock"
        gate.open()
        pushed, shifted = await asyncio.wait_for(asyncio.gather(push, shift), 10)
        assert pushed.error is None and shifted.error is None
        assert shifted.text == "x"
        # x was served once and is gone; y was pushed and is still there
        assert await bot.var("queue") == ["y"]


@pytest.mark.redis
async def test_computed_save_position_still_locks_the_variable(
    redis_url: str, redis_namespace: str
) -> None:
    rules = """
    variables:
      visits: {scope: global, default: 0}
    rules:
      - id: hello
        triggers: ["hello"]
        steps:
          - plugin: ADJUST
            input: "?= visits + 1"
            save: "?= 'visits'"
    """
    store = f"{redis_url}?prefix={redis_namespace}"
    async with Bot({"v.yaml": textwrap.dedent(rules)}, store=store) as bot:
        replies = await asyncio.gather(*(bot.ask("hello", user=f"u{i}") for i in range(50)))
        assert all(r.error is None for r in replies)
        assert await bot.var("visits") == 50
