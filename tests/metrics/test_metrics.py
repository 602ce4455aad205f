"""Prometheus metrics: the recording functions, the metered store, and the hooks in the engine.

Everything here is real: ``render()``'s text is parsed back with
prometheus-client's own parser, the store is a real SQLite file (and Redis),
rules run in :class:`tmy.testing.Bot`, the LLM answers from the TESTONLY mock.
Counters are process-global (other tests move them too), so every assertion
compares a reading taken before with one taken after.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from tests.adapters.test_onebot import RULES as ONEBOT_RULES
from tests.adapters.test_onebot import reverse, until
from tests.support.llm_helpers import ASK, rules
from tests.support.onebot_fake import SELF_ID, connect_reverse
from tmy import metrics
from tmy.errors import StoreError
from tmy.metrics import instruments
from tmy.store import open_store
from tmy.store.base import MISSING, Store
from tmy.store.metered import MeteredStore, metered
from tmy.testing import Bot

NAMES = {
    "tmy_messages_received": "counter",
    "tmy_messages_matched": "counter",
    "tmy_messages_unmatched": "counter",
    "tmy_runs": "counter",
    "tmy_step_seconds": "histogram",
    "tmy_store_op_seconds": "histogram",
    "tmy_store_errors": "counter",
    "tmy_llm_requests": "counter",
    "tmy_llm_tokens": "counter",
    "tmy_llm_retries": "counter",
    "tmy_cron_fires": "counter",
    "tmy_adapter_connects": "counter",
    "tmy_adapter_reconnects": "counter",
    "tmy_reloads": "counter",
}


def sample(name: str, **labels: str) -> float:
    """Sample ``name`` with exactly ``labels`` in a fresh ``render()`` (0 when absent)."""
    body, _ = metrics.render()
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


class Delta:
    """Readings of several samples before, to compare with after."""

    def __init__(self, *keys: tuple[str, dict[str, str]]) -> None:
        self.keys = keys
        self.before = [sample(name, **labels) for name, labels in keys]

    def moved(self) -> list[float]:
        return [sample(n, **lb) - b for (n, lb), b in zip(self.keys, self.before, strict=True)]


# -- the module --------------------------------------------------------------------------------


def test_render_is_prometheus_text_with_every_metric_named() -> None:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    assert "version=" in content_type
    families = {f.name: f.type for f in text_string_to_metric_families(body.decode())}
    for name, kind in NAMES.items():
        assert families.get(name) == kind, name
    assert metrics.REGISTRY is not __import__("prometheus_client").REGISTRY


def test_message_counts_received_and_matched_or_unmatched() -> None:
    d = Delta(
        ("tmy_messages_received_total", {"platform": "unit-p"}),
        ("tmy_messages_matched_total", {"platform": "unit-p"}),
        ("tmy_messages_unmatched_total", {"platform": "unit-p"}),
    )
    metrics.message("unit-p", True)
    metrics.message("unit-p", True)
    metrics.message("unit-p", False)
    assert d.moved() == [3, 2, 1]


def test_run_counts_by_rule_and_outcome() -> None:
    d = Delta(
        ("tmy_runs_total", {"rule": "unit-r", "outcome": "ok"}),
        ("tmy_runs_total", {"rule": "unit-r", "outcome": "error"}),
    )
    metrics.run("unit-r", True)
    metrics.run("unit-r", False)
    metrics.run("unit-r", False)
    assert d.moved() == [1, 2]


async def test_only_a_chain_that_ran_counts_as_a_run() -> None:
    """A message a cooldown holds back matched its rule, but its chain did not run."""
    rules = """
rules:
  - id: unit-cool
    triggers: ["cool"]
    cooldown: {seconds: 60, per: global, reply: "wait"}
    steps:
      - plugin: ADJUST
        input: "done"
"""
    d = Delta(
        ("tmy_runs_total", {"rule": "unit-cool", "outcome": "ok"}),
        ("tmy_runs_total", {"rule": "unit-cool", "outcome": "error"}),
        ("tmy_messages_matched_total", {"platform": "unit-cool-p"}),
    )
    async with Bot({"r.yaml": rules}) as bot:
        answers = [(await bot.ask("cool", platform="unit-cool-p")).text for _ in range(3)]
    assert answers == ["done", "wait", "wait"]
    assert d.moved() == [1, 0, 3]


def test_step_and_store_op_observe_histograms() -> None:
    d = Delta(
        ("tmy_step_seconds_count", {"plugin": "UNIT"}),
        ("tmy_step_seconds_sum", {"plugin": "UNIT"}),
        ("tmy_step_seconds_bucket", {"plugin": "UNIT", "le": "0.5"}),
        ("tmy_step_seconds_bucket", {"plugin": "UNIT", "le": "+Inf"}),
        ("tmy_store_op_seconds_count", {"op": "unit-op"}),
        ("tmy_store_errors_total", {"op": "unit-op"}),
    )
    metrics.step("UNIT", 0.25)
    metrics.step("UNIT", 2.0)
    metrics.store_op("unit-op", 0.001)
    metrics.store_error("unit-op")
    count, total, le_half, le_inf, ops, errors = d.moved()
    assert (count, le_half, le_inf, ops, errors) == (2, 1, 2, 1, 1)
    assert total == pytest.approx(2.25)


def test_llm_request_counts_requests_tokens_and_retries() -> None:
    d = Delta(
        ("tmy_llm_requests_total", {"model": "unit-m"}),
        ("tmy_llm_tokens_total", {"model": "unit-m", "kind": "prompt"}),
        ("tmy_llm_tokens_total", {"model": "unit-m", "kind": "completion"}),
        ("tmy_llm_tokens_total", {"model": "unit-m", "kind": "cached"}),
        ("tmy_llm_retries_total", {"model": "unit-m"}),
    )
    metrics.llm_request("unit-m", prompt_tokens=100, completion_tokens=7, cached_tokens=64)
    metrics.llm_request("unit-m", 10, 3, 0, retries=2)
    assert d.moved() == [2, 110, 10, 64, 2]


def test_cron_adapter_and_reload_counters() -> None:
    d = Delta(
        ("tmy_cron_fires_total", {"rule": "unit-c", "outcome": "ok"}),
        ("tmy_cron_fires_total", {"rule": "unit-c", "outcome": "error"}),
        ("tmy_cron_fires_total", {"rule": "unit-c", "outcome": "skipped"}),
        ("tmy_cron_fires_total", {"rule": "unit-c", "outcome": "other"}),
        ("tmy_adapter_connects_total", {"adapter": "unit-a"}),
        ("tmy_adapter_reconnects_total", {"adapter": "unit-a"}),
        ("tmy_reloads_total", {"outcome": "ok"}),
        ("tmy_reloads_total", {"outcome": "error"}),
    )
    metrics.cron_fire("unit-c", "ok")
    metrics.cron_fire("unit-c", "skipped")
    metrics.cron_fire("unit-c", "skipped")
    metrics.cron_fire("unit-c", "error")
    metrics.cron_fire("unit-c", "exploded")  # not an outcome: counted, as "other"
    metrics.adapter_connected("unit-a", reconnect=False)
    metrics.adapter_connected("unit-a", reconnect=True)
    metrics.reload(True)
    metrics.reload(False)
    metrics.reload(False)
    assert d.moved() == [1, 1, 2, 1, 2, 1, 1, 2]


def test_label_values_past_the_cap_are_folded_into_other() -> None:
    registry = CollectorRegistry()
    counter = Counter("capped", "a counter with a capped label", ["name"], registry=registry)
    children = instruments.Children(counter.labels, cap=3)
    for i in range(10):
        children(f"hostile-{i}").inc()
    children("hostile-0").inc()  # a value seen before the cap keeps its own child
    children(["unhashable"])  # refused as a key, folded rather than raising
    (family,) = registry.collect()
    values = {s.labels["name"]: s.value for s in family.samples if s.name == "capped_total"}
    assert values == {"hostile-0": 2, "hostile-1": 1, "hostile-2": 1, "other": 7}
    assert len(children.cache) == 3
    assert metrics.MAX_LABEL_VALUES == 1000


def test_long_and_empty_label_values_are_tidied() -> None:
    assert instruments.label("") == "none"
    assert len(instruments.label("x" * 10_000)) <= 121
    assert instruments.label(42) == "42"


# -- the metered store --------------------------------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = metered(open_store(f"sqlite:///{tmp_path / 'm.db'}"))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


OPS = ("get", "get_many", "set", "delete", "update", "keys", "ping", "lock")


def op_counts() -> Delta:
    return Delta(*(("tmy_store_op_seconds_count", {"op": op}) for op in OPS))


async def test_metered_store_times_every_operation(sqlite_store: Store) -> None:
    store = sqlite_store
    assert isinstance(store, MeteredStore)
    assert metered(store) is store  # not wrapped twice
    assert store.url.startswith("sqlite:///") and store.url.endswith("m.db")
    assert store.path.name == "m.db"  # a backend attribute passes through
    assert isinstance(store, Store)
    d = op_counts()
    await store.set("a/1", {"n": 1})
    await store.set("a/2", [1, 2], ttl=60)
    assert await store.get("a/1") == {"n": 1}
    assert await store.get_many(["a/1", "a/3"]) == [{"n": 1}, MISSING]
    assert await store.update("a/1", lambda v: ({"n": v["n"] + 1}, v["n"] + 1)) == 2
    assert await store.keys("a/") == ["a/1", "a/2"]
    assert await store.delete("a/2") is True
    await store.ping()
    async with store.lock("a/1"):
        assert await store.get("a/1") == {"n": 2}
    assert d.moved() == [2, 1, 2, 1, 1, 1, 1, 1]


async def test_metered_store_counts_store_errors_and_reraises(sqlite_store: Store) -> None:
    store = sqlite_store
    d = Delta(
        ("tmy_store_errors_total", {"op": "set"}),
        ("tmy_store_op_seconds_count", {"op": "set"}),
        ("tmy_store_errors_total", {"op": "get"}),
        ("tmy_store_errors_total", {"op": "lock"}),
        ("tmy_store_op_seconds_count", {"op": "lock"}),
    )
    with pytest.raises(StoreError):
        await store.set("bad", object())  # JSON cannot hold it: refused
    with pytest.raises(StoreError):
        await store.get("")  # not a key
    async with store.lock("held"):
        with pytest.raises(StoreError):  # a second holder gives up after its wait
            async with store.lock("held", wait=0.05):
                pass
    with pytest.raises(ZeroDivisionError):  # not a store error: passes through, not counted
        await store.update("k", lambda v: (1 / 0, None))
    assert d.moved() == [1, 1, 1, 1, 2]


async def test_metered_store_on_every_backend(store: Store) -> None:
    wrapped = metered(store)
    d = op_counts()
    await wrapped.set("x", 1)
    assert await wrapped.update("x", lambda v: (v + 1, v + 1)) == 2
    async with wrapped.lock("x"):
        assert await wrapped.get("x") == 2
    moved = dict(zip(OPS, d.moved(), strict=True))
    assert (moved["set"], moved["update"], moved["lock"], moved["get"]) == (1, 1, 1, 1)


async def test_a_lock_body_error_is_not_a_lock_error(sqlite_store: Store) -> None:
    d = Delta(("tmy_store_errors_total", {"op": "lock"}))
    with pytest.raises(StoreError):
        async with sqlite_store.lock("body"):
            raise StoreError("raised inside the body, not by the acquire")
    async with sqlite_store.lock("body", wait=0.5):  # released: can be taken again
        pass
    assert d.moved() == [0]


# -- hooks: steps, the LLM, adapters ---------------------------------------------------------


STEPS = """
rules:
  - id: two
    triggers: [two]
    steps:
      - {plugin: ADJUST, input: "one"}
      - {plugin: ADJUST, input: "{STEP_RESULT} two"}
  - id: skipped
    triggers: [skip]
    steps:
      - {plugin: ADJUST, input: "no", when: "?= 1 == 2"}
      - {plugin: ADJUST, input: "yes"}
"""


async def test_each_executed_step_is_observed_by_plugin() -> None:
    async with Bot({"m.yaml": STEPS}) as bot:
        d = Delta(("tmy_step_seconds_count", {"plugin": "ADJUST"}))
        assert await bot.say("two") == "one two"
        assert d.moved() == [2]
        d = Delta(("tmy_step_seconds_count", {"plugin": "ADJUST"}))
        assert await bot.say("skip") == "yes"
        assert d.moved() == [1]  # a step skipped by when: ran nothing


async def test_an_llm_step_on_the_mock_counts_requests_and_tokens() -> None:
    async with Bot({"r.yaml": rules(ASK)}) as bot:
        d = Delta(
            ("tmy_llm_requests_total", {"model": "TESTONLY"}),
            ("tmy_llm_tokens_total", {"model": "TESTONLY", "kind": "prompt"}),
            ("tmy_llm_tokens_total", {"model": "TESTONLY", "kind": "completion"}),
            ("tmy_llm_retries_total", {"model": "TESTONLY"}),
            ("tmy_step_seconds_count", {"plugin": "LLM"}),
        )
        reply = await bot.ask("t hello there")
        assert reply.error is None
        stats = reply.steps[0].extra["llm"]
        requests, prompt, completion, retries, steps = d.moved()
        assert requests == len(stats["calls"]) >= 1
        assert prompt == stats["prompt_tokens"] > 0
        assert completion == stats["completion_tokens"] > 0
        assert retries == 0
        assert steps == 1


async def test_onebot_connections_count_connects_and_reconnects() -> None:
    d = Delta(
        ("tmy_adapter_connects_total", {"adapter": "onebot"}),
        ("tmy_adapter_reconnects_total", {"adapter": "onebot"}),
    )
    async with Bot({"ob.yaml": ONEBOT_RULES}) as bot, reverse(bot, send_interval=0) as served:
        first = await served.connect()
        await first.close()
        await until(lambda: not served.adapter.health()["self_ids"])
        again = await connect_reverse(served.session, served.url, SELF_ID)
        await until(lambda: served.adapter.health()["self_ids"] == [str(SELF_ID)])
        other = await served.connect(SELF_ID + 1)
        await asyncio.gather(again.close(), other.close())
    assert d.moved() == [3, 1]  # SELF_ID twice (once a reconnect), another account once
