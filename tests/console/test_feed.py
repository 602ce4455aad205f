"""The console's live feed (tmy/console/feed.py): what the engine reports, drained in
batches, kept in a ring, counted, and offered to live views whose queues are bounded.

A real engine on real rules and a SQLite store reports to the feed; the fan-out is
driven by explicit drains, so no test depends on the clock.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from tmy.config import Settings
from tmy.console import feed as feeds
from tmy.console.feed import BATCH, RECENT, ROOM, SAMPLED, Feed, Filter
from tmy.console.records import TRACE, as_event, record_of
from tmy.engine.core import Engine
from tmy.engine.services import Services
from tmy.executors import default_registry
from tmy.message import Message
from tmy.rulebook.loader import load_sources
from tmy.store import Store

RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{QUESTION}"}
  - id: broken
    triggers: ["boom *"]
    steps:
      - {plugin: ADJUST, input: "?= int(QUESTION)"}
"""


def make_engine(store: Store) -> Engine:
    registry = default_registry()
    rulebook = load_sources([(Path("rules.yaml"), RULES)], registry)
    return Engine(rulebook, Services(Settings(), store, registry))


def event(i: int, **kw: object) -> dict:
    return {
        "event": "run.done",
        "text": "x",
        "trigger": "x",
        "question": "q",
        "answer": "a",
        "ms": 0.1,
        "rule": "r",
        "user": "u",
        "chat": "c",
        "platform": "p",
        "error": None,
        "steps": [],
        "trace_id": f"t{i}",
        **kw,
    }


async def test_runs_through_the_engine_reach_the_ring_and_the_counters(store: Store) -> None:
    engine = make_engine(store)
    feed = feeds.attach(engine)
    assert engine.observer == feed.observe and feeds.attach(engine) is feed  # once
    assert feeds.feed_of(SimpleNamespace(engine=engine)) is feed
    hit = await engine.handle(Message("echo hi", user="u1", chat="g1", platform="qq"))
    await engine.handle(Message("nothing", user="u2", chat="g2", platform="qq"))
    failed = await engine.handle(Message("boom x", user="u3", chat="g1", platform="qq"))
    latest = feed.latest()
    assert [r[TRACE] for _, r in latest][::2] == [failed.trace_id, hit.trace_id]
    assert as_event(feed.find(hit.trace_id)[0][1])["answer"] == "hi"
    assert feed.latest(Filter(errors=True)) == [latest[0]]
    assert feed.stats.total == {"messages": 3, "runs": 2, "errors": 1, "tokens": 0}
    chats = feeds.recent_chats(SimpleNamespace(engine=engine))
    assert [(c["chat"], c["user"]) for c in chats] == [("g1", "u3"), ("g2", "u2")]
    feed.stop()


async def test_a_slow_view_is_told_how_many_runs_it_missed() -> None:
    feed = Feed()
    slow = feed.subscribe(Filter(), size=5)
    for i in range(20):
        feed.observe(event(i))
    feed.drain()
    skipped, items = slow.take()
    assert skipped == 15 and [r[TRACE] for _, r in items] == [f"t{i}" for i in range(15, 20)]
    assert slow.take() == (0, [])
    feed.observe(event(20))
    feed.drain()
    assert slow.take()[0] == 0  # caught up: nothing more was skipped


async def test_a_view_keeping_up_with_1000_runs_a_second_misses_none() -> None:
    """Ten drains a second of 100 runs each, the view taking after each: nothing skipped."""
    feed = Feed()
    view = feed.subscribe(Filter())
    got = 0
    for tick in range(10):
        for i in range(100):
            feed.observe(event(tick * 100 + i))
        feed.drain()
        skipped, items = await view.next(1.0)
        assert skipped == 0
        got += len(items)
    assert got == 1000 and feed.stats.total["runs"] == 1000


def test_filters() -> None:
    e = record_of(event(1, rule="greet", user="alice", chat="g", platform="qq", error=None))
    assert Filter()(e) and Filter(rule="greet", user="alice", chat="g", platform="qq")(e)
    assert not Filter(rule="other")(e) and not Filter(errors=True)(e)
    assert not Filter(platform="discord")(e) and not Filter(chat="h")(e)
    assert Filter(errors=True)(record_of(event(1, error="boom")))
    query = {"rule": " greet ", "errors": "on", "user": "", "chat": "x" * 999}
    wanted = Filter.of(query)
    assert wanted.rule == "greet" and wanted.errors and len(wanted.chat) == 256
    assert wanted.query() == {"rule": "greet", "chat": "x" * 256, "errors": "1"}


def test_reporting_never_grows_without_bound() -> None:
    """A loop that never yields: past ROOM runs, a plain run is noted by its rule id only
    (drained every SAMPLED), a failed one kept whole (drained every BATCH); RECENT kept."""
    feed = Feed()
    total = 2 * SAMPLED + 5
    for i in range(total):
        feed.observe(event(i, error="boom" if i % 64 == 0 else None))
        assert len(feed._pending) < BATCH + ROOM and len(feed._sampled) < SAMPLED
    feed.drain()
    assert feed.stats.total["runs"] == total and feed.drained == total
    assert feed.stats.total["errors"] == len(range(0, total, 64))
    assert 1000 <= feed.kept < 1000 + BATCH + ROOM
    errors = feed.latest(Filter(errors=True), limit=RECENT)
    assert len(errors) >= 1000 - ROOM  # the newest kept are the failed ones


def test_a_busy_bot_is_sampled_counts_stay_exact_failures_all_shown() -> None:
    """Past ROOM runs between two drains a plain run is sampled out: counted (messages,
    runs, its rule among the busiest) but not kept; each view is told how many it missed
    — a view of one rule its rule's, an "errors only" view none: no failure is sampled."""
    feed = Feed(room=10)
    every = feed.subscribe(Filter())
    ruled = feed.subscribe(Filter(rule="a"))
    failed = feed.subscribe(Filter(errors=True))
    for i in range(100):
        feed.observe(event(i, rule="a" if i % 2 else "b", error="boom" if i % 10 == 0 else None))
    miss = {"event": "message.unmatched", "trace_id": "t100", "rule": None, "user": "u",
            "chat": "c", "platform": "p", "text": "x", "reason": "no trigger"}  # fmt: skip
    feed.observe(miss)
    llm = {"uri": "s1", "plugin": "LLM", "input": "q", "result": "a", "error": None, "ms": 1.0,
           "skipped": False, "tokens": 7}  # fmt: skip
    feed.observe(event(101, tokens=7, steps=[llm]))  # a model was asked: kept
    assert feed.drain() == 102
    total = feed.stats.total
    assert total == {"messages": 102, "runs": 101, "errors": 10, "tokens": 7}
    busiest = feed.stats.busiest_rules(time.time(), 60)
    assert sorted((r["rule"], r["runs"]) for r in busiest) == [("a", 50), ("b", 50), ("r", 1)]
    skipped, items = every.take()
    assert len(items) == 10 + 9 + 1 and skipped == 102 - len(items)  # 9 failed past the room
    skipped, items = ruled.take()
    assert skipped == 45 and all(r[2] == "a" for _, r in items)
    skipped, items = failed.take()
    assert skipped == 0 and len(items) == 10
    assert every.take_maybe() == ruled.take_maybe() == failed.take_maybe() == 0


async def test_a_view_of_one_user_is_told_runs_may_have_been_sampled_out() -> None:
    """Whose a sampled-out run was is not known: a view filtered by user, chat or platform
    is told how many runs it may have missed (``take_maybe``), and wakes up for it."""
    feed = Feed(room=2)
    ann = feed.subscribe(Filter(user="ann"))
    for i in range(5):
        feed.observe(event(i, user="ann" if i == 4 else "bob"))
    feed.drain()
    skipped, items = await ann.next(1.0)
    assert (skipped, items) == (0, []) and ann.take_maybe() == 3 and ann.take_maybe() == 0


def test_a_flagged_run_keeps_its_whole_dict() -> None:
    nested = event(1, nested=True)
    record = record_of(nested)
    assert as_event(record) is nested
    assert as_event(record_of(event(2)))["trace_id"] == "t2"


async def test_the_ticker_drains_on_the_loop() -> None:
    feed = Feed()
    view = feed.subscribe(Filter(rule="r"))
    feed.start(every=0.01)
    try:
        feed.observe(event(1))
        skipped, items = await view.next(5.0)  # woken by the ticker's drain
        assert skipped == 0 and items[0][1][TRACE] == "t1"
    finally:
        feed.stop()
    feed.unsubscribe(view)
    assert not feed.subscribers


async def test_next_times_out_empty() -> None:
    view = Feed().subscribe(Filter())
    assert await view.next(0.01) == (0, [])
    await asyncio.sleep(0)


def test_a_broken_event_never_fails_the_engines_call() -> None:
    """The observer runs inside the engine's handling: whatever goes wrong stays here."""
    feed = Feed()
    feed.observe({"event": "run.done", "steps": []})  # no fields: logged, dropped
    feed.observe(event(1))
    assert feed.drain() == 1
