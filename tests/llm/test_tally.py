"""Usage counters added in memory and written in batches (tmy.llm.tally), on SQLite and Redis.

What must hold however the counts travel: a clean stop writes every count; a
daily budget refuses the request that would exceed it across two daemons on one
store, even with a flush interval far longer than the test; concurrent calls and
concurrent flushes of two daemons lose nothing; ``budget`` and ``ctx`` see what
this daemon has not written yet. Real fake provider on loopback, real stores.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.llm_helpers import RULES
from tmy.command import Invocation
from tmy.config.llm import load_config
from tmy.engine.keys import conversation_key
from tmy.errors import ConfigError
from tmy.llm import runtime_of
from tmy.llm.commands import BUDGET
from tmy.llm.history import LAST, last_message
from tmy.llm.tally import LEASE, Tally, add_to
from tmy.llm.usage import keys, today
from tmy.message import Message
from tmy.store import open_store
from tmy.store.base import MISSING
from tmy.testing import Bot

HOUR = 3600  # a flush interval no test waits for: only a clean stop or a budget writes


def config(provider: FakeProvider, **budget: Any) -> dict[str, Any]:
    return {
        "models": {"fake": {"base_url": provider.base_url, "model": "fake"}},
        "budget": {"flush_interval": HOUR, **budget},
    }


def who(user: str) -> Message:
    return Message("", user=user, platform="test")


async def stored(store_url: str, key: str) -> Any:
    store = open_store(store_url)
    await store.open()
    try:
        return await store.get(key)
    finally:
        await store.close()


async def test_counts_wait_in_memory_and_reach_the_store_at_a_clean_stop(
    provider: FakeProvider, store_url: str
) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=10, completion_tokens=5)
    async with Bot({"r.yaml": RULES}, store=store_url, llm=config(provider)) as bot:
        for _ in range(3):
            assert await bot.say("ask hi", user="ann") == "ok"
        counters = keys(today(bot.engine.tz), who("ann"))
        store = bot.engine.services.store
        assert await store.get(counters["user"]) is MISSING  # not written per call
        assert await store.get(conversation_key(LAST, who("ann"))) is MISSING  # nor ctx's last
    for scope in ("user", "chat", "all"):  # the app stopped: everything was written
        value = await stored(store_url, counters[scope])
        assert (value["prompt"], value["completion"], value["calls"]) == (30, 15, 3)
        assert value["models"] == {"fake": 45} and value["latency_ms"] > 0
    last = await stored(store_url, conversation_key(LAST, who("ann")))
    assert last["text"] == "ask hi" and last["rule"] == "ask"


async def test_a_budget_holds_across_two_daemons_on_one_store(
    provider: FakeProvider, store_url: str
) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=10, completion_tokens=5)
    limits = config(provider, per_user_daily_tokens=20)
    async with (
        Bot({"r.yaml": RULES}, store=store_url, llm=limits) as one,
        Bot({"r.yaml": RULES}, store=store_url, llm=limits) as two,
    ):
        assert await one.say("ask 1", user="ann") == "ok"  # 15 of 20
        assert await two.say("ask 2", user="ann") == "ok"  # 30: over from now on
        for bot in (one, two):  # each daemon refuses, whichever spent the tokens
            reply = await bot.ask("ask 3", user="ann")
            assert reply.error == (
                "the daily LLM budget for ann is used up (30 of 20 tokens today; "
                "llm.budget.per_user_daily_tokens)"
            )
        assert await two.say("ask 1", user="bob") == "ok"  # another user still has a budget
    assert len(provider.seen()) == 3


async def test_a_daily_budget_for_everyone_holds_across_two_daemons(
    provider: FakeProvider, store_url: str
) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=10, completion_tokens=5)
    limits = config(provider, daily_tokens=16)
    async with (
        Bot({"r.yaml": RULES}, store=store_url, llm=limits) as one,
        Bot({"r.yaml": RULES}, store=store_url, llm=limits) as two,
    ):
        assert await one.say("ask 1", user="ann") == "ok"
        assert await two.say("ask 1", user="bob") == "ok"
        reply = await one.ask("ask 1", user="cid")
        assert "the daily LLM budget is used up (30 of 16 tokens" in str(reply.error)
    assert len(provider.seen()) == 2


async def test_concurrent_calls_and_flushes_of_two_daemons_lose_no_count(
    provider: FakeProvider, store_url: str
) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=2, completion_tokens=1)
    async with (
        Bot({"r.yaml": RULES}, store=store_url, llm=config(provider)) as one,
        Bot({"r.yaml": RULES}, store=store_url, llm=config(provider)) as two,
    ):
        for _ in range(3):  # three rounds: each adds to what the last flushes wrote
            replies = await asyncio.gather(
                *(bot.ask("ask hi", user=f"u{i % 4}") for i in range(10) for bot in (one, two))
            )
            assert all(r.text == "ok" for r in replies)
            await asyncio.gather(*(runtime_of(b.engine.services).tally.flush() for b in (one, two)))
        store = one.engine.services.store
        day = today(one.engine.tz)
        everyone = await store.get(keys(day, who("u0"))["all"])
        assert everyone["calls"] == 60 and everyone["prompt"] == 120
        for user in ("u0", "u1", "u2", "u3"):
            mine = await store.get(keys(day, who(user))["user"])
            assert mine["calls"] == (18 if user in ("u0", "u1") else 12)


async def test_budget_and_ctx_see_counts_not_written_yet(provider: FakeProvider) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=10, completion_tokens=5)
    async with Bot({"r.yaml": RULES}, llm=config(provider)) as bot:
        await bot.say("ask hi", user="ann")
        tally = runtime_of(bot.engine.services).tally
        counters = keys(today(bot.engine.tz), who("ann"))
        assert await bot.engine.services.store.get(counters["user"]) is MISSING
        inv = Invocation({"other": None}, who("ann"), "cli", bot.app, bot.settings)
        result = await BUDGET.run(inv)
        assert result.data["usage"]["user"]["calls"] == 1
        assert result.data["usage"]["all"]["prompt"] == 10
        last = await last_message(bot.engine.services.store, who("ann"), tally)
        assert last == {"text": "ask hi", "question": "hi", "rule": "ask"}


async def test_a_flush_that_does_not_finish_keeps_its_counts_for_the_next_one(
    store_url: str,
) -> None:
    store = open_store(store_url)
    await store.open()
    try:
        tally = Tally(lambda: store, write_through=False)
        tally.add(["llm/usage/d/all"], 3, 2, 1, "m", 5.0)
        async with store.lock(LEASE, wait=1):  # another flush holds the lease: this one waits
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(tally.flush(), 0.5)
        assert tally.unwritten("llm/usage/d/all") is not None  # kept, not dropped
        tally.add(["llm/usage/d/all"], 1, 0, 0, "m", 1.0)
        await tally.flush()
        value = await store.get("llm/usage/d/all")
        assert (value["prompt"], value["completion"], value["cached"], value["calls"]) == (
            4,
            2,
            1,
            2,
        )
        assert value["models"] == {"m": 6} and value["latency_ms"] == 6.0
        assert tally.unwritten("llm/usage/d/all") is None
    finally:
        await store.delete("llm/usage/d/all")
        await store.close()


def test_add_to_starts_from_nothing_and_keeps_other_fields() -> None:
    delta = {"prompt": 1, "completion": 2, "cached": 0, "calls": 1, "models": {"m": 3}}
    delta["latency_ms"] = 1.5
    assert add_to(MISSING, delta) == {**delta, "latency_ms": 1.5}
    kept = add_to({"prompt": 5, "note": "x", "models": {"n": 1}}, delta)
    assert kept["prompt"] == 6 and kept["note"] == "x" and kept["models"] == {"n": 1, "m": 3}


def test_the_flush_interval_is_a_number_of_seconds_under_llm_budget() -> None:
    assert load_config({}).usage_flush_interval == 1.0
    assert load_config({"budget": {"flush_interval": 0}}).usage_flush_interval == 0.0
    assert load_config({"budget": {"flush_interval": 2.5}}).usage_flush_interval == 2.5
    for wrong in (-1, 7200, "soon"):
        with pytest.raises(ConfigError, match="flush_interval"):
            load_config({"budget": {"flush_interval": wrong}})


async def test_interval_zero_writes_at_every_call(provider: FakeProvider) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=1, completion_tokens=1)
    llm = {**config(provider), "budget": {"flush_interval": 0}}
    async with Bot({"r.yaml": RULES}, llm=llm) as bot:
        await bot.say("ask hi", user="ann")
        store = bot.engine.services.store
        assert (await store.get(keys(today(bot.engine.tz), who("ann"))["user"]))["calls"] == 1
        assert (await store.get(conversation_key(LAST, who("ann"))))["text"] == "ask hi"
