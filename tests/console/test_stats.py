"""The console's counters (tmy/console/stats.py): per-minute buckets over 24 hours, the
busiest rules, the slowest steps, tokens today, the recent chats — and their bounds.

Batches are the dicts the engine reports (built here as :func:`tmy.engine.tracing.log_run`
builds them); times are given, so nothing depends on the clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from tmy.console.records import record_of
from tmy.console.stats import CHATS, CURRENT_KEYS, MINUTES, SLOT_KEYS, SLOT_MINUTES, Stats


class Counted(Stats):
    """Stats fed engine dicts, as the feed does: each as its record."""

    def add(self, batch: list[dict], now: float) -> None:  # type: ignore[override]
        super().add([record_of(e) for e in batch], now)


T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC).timestamp()


def run(rule: str = "r", *, error: str | None = None, ms: float = 1.0, **extra: Any) -> dict:
    steps = extra.pop("steps", None) or [
        {
            "uri": f"{rule}/0",
            "plugin": "ADJUST",
            "input": "q",
            "result": "a",
            "error": error,
            "ms": ms,
            "skipped": False,
        }
    ]
    return {
        "event": "run.done",
        "trace_id": "t",
        "text": "x",
        "trigger": "x",
        "question": "q",
        "rule": rule,
        "user": extra.pop("user", "u"),
        "chat": extra.pop("chat", "c"),
        "platform": extra.pop("platform", "p"),
        "answer": "a",
        "error": error,
        "ms": ms,
        "steps": steps,
        **extra,
    }


def unmatched(user: str = "u", chat: str = "c") -> dict:
    return {
        "event": "message.unmatched",
        "trace_id": "t",
        "text": "x",
        "rule": None,
        "user": user,
        "chat": chat,
        "platform": "p",
        "reason": "no trigger",
    }


def test_counts_over_the_last_hour_and_day() -> None:
    stats = Counted()
    stats.add([run(), run(error="boom"), unmatched()], T0 - 2 * 3600)  # two hours ago
    stats.add([run(), unmatched(), run(nested=True), run(scheduled=True)], T0 - 30)
    hour, day = stats.window(T0, 60), stats.window(T0, MINUTES)
    assert hour == {"messages": 2, "runs": 3, "errors": 0, "tokens": 0}
    assert day == {"messages": 5, "runs": 5, "errors": 1, "tokens": 0}
    assert stats.window(T0 + 25 * 3600, MINUTES)["runs"] == 0  # a day later: gone


def test_a_bucket_is_reused_a_day_later() -> None:
    stats = Counted()
    stats.add([run()], T0)
    stats.add([run(), run()], T0 + MINUTES * 60)  # the same slot of the ring, a day on
    assert stats.window(T0 + MINUTES * 60, 1)["runs"] == 2
    assert stats.window(T0 + MINUTES * 60, MINUTES)["runs"] == 2


def test_the_series_for_the_chart() -> None:
    stats = Counted()
    stats.add([run()], T0 - 3 * 60)
    stats.add([run(error="x"), unmatched()], T0)
    points = stats.series(T0, 60, 5)
    assert len(points) == 12 and points[-1]["start"] <= T0 < points[-1]["start"] + 300
    assert points[-1] == {**points[-1], "runs": 2, "errors": 1, "messages": 3}
    assert sum(p["runs"] for p in points) == 2  # the one 3 minutes ago is in the last point


def test_busiest_rules_and_slowest_steps() -> None:
    stats = Counted()
    batch = [run("fast", ms=1.0) for _ in range(5)] + [run("slow", ms=50.0), run("slow", ms=150)]
    stats.add(batch, T0)
    assert stats.busiest_rules(T0, 60)[:2] == [
        {"rule": "fast", "runs": 5},
        {"rule": "slow", "runs": 2},
    ]
    slowest = stats.slowest_steps(T0, 60)
    assert slowest[0] == {
        "rule": "slow",
        "step": "slow/0",
        "runs": 2,
        "mean_ms": 100.0,
        "max_ms": 150.0,
    }
    assert slowest[1]["rule"] == "fast" and slowest[1]["runs"] == 5


def test_a_large_batch_times_a_sample_of_its_steps_and_counts_them_all() -> None:
    stats = Counted()
    stats.add([run("r", ms=2.0) for _ in range(5000)], T0)
    [step] = stats.slowest_steps(T0, 60)
    assert step["mean_ms"] == 2.0 and step["runs"] == 5000
    assert stats.busiest_rules(T0, 60) == [{"rule": "r", "runs": 5000}]


def test_skipped_steps_are_not_timed() -> None:
    stats = Counted()
    skipped = {
        "uri": "r/1",
        "plugin": "X",
        "input": None,
        "result": None,
        "error": None,
        "ms": 0,
        "skipped": True,
    }
    stats.add([run("r", steps=[skipped])], T0)
    assert stats.slowest_steps(T0, 60) == []


def test_tokens_today_from_the_steps() -> None:
    """An LLM step's ``tokens`` (tmy.engine.tracing.step_fields) add up per day."""
    tz = ZoneInfo("Asia/Shanghai")  # the day turns at 16:00 UTC
    stats = Counted(tz)
    llm = {
        "uri": "ask/0",
        "plugin": "LLM",
        "input": "q",
        "result": "a",
        "error": None,
        "ms": 900.0,
        "skipped": False,
        "tokens": 150,
    }
    stats.add([run("ask", steps=[llm]), run("ask", steps=[{**llm, "tokens": 50}])], T0)
    assert stats.tokens_on(T0) == 200 and stats.window(T0, 60)["tokens"] == 200
    # a day passes without a run: yesterday's tokens are not today's
    assert stats.tokens_on(T0 + 4.5 * 3600) == 0
    stats.add([run("ask", steps=[llm])], T0 + 4.5 * 3600)  # 00:30 the next day there
    assert stats.tokens_on(T0 + 4.5 * 3600) == 150
    assert stats.window(T0 + 4.5 * 3600, MINUTES)["tokens"] == 350


def test_recent_chats_newest_first_and_bounded() -> None:
    stats = Counted()
    stats.add([run(chat="a", user="u1"), unmatched(chat="b", user="u2")], T0)
    stats.add([run(chat="a", user="u3", rule="x")], T0 + 5)
    chats = stats.recent_chats()
    assert [(c["chat"], c["user"], c["at"]) for c in chats] == [
        ("a", "u3", T0 + 5),
        ("b", "u2", T0),
    ]
    assert chats[0]["rule"] == "x" and chats[1]["rule"] is None
    stats.add([unmatched(chat=f"c{i}") for i in range(CHATS + 500)], T0 + 10)
    chats = stats.recent_chats()
    assert len(chats) == CHATS and chats[0]["chat"] == f"c{CHATS + 499}"
    assert len(stats.recent_chats(10)) == 10


def test_memory_is_bounded_with_many_rules() -> None:
    stats = Counted()
    for k in range(5):
        stats.add([run(f"r{k}-{i}") for i in range(3000)], T0)
    slot = stats._slot(int(T0 // 60))
    assert len(slot.rules) == 15_000 <= CURRENT_KEYS  # the current slot counts every rule
    assert len(slot.steps) <= SLOT_KEYS
    assert len(stats.busiest_rules(T0, 60, top=10)) == 10
    stats.add([run("later")], T0 + SLOT_MINUTES * 60)  # the next slot: the last one is closed
    assert len(slot.rules) == SLOT_KEYS
    stats.add([run(f"many-{i}") for i in range(CURRENT_KEYS + 1)], T0 + SLOT_MINUTES * 60)
    assert len(stats._slot(int(T0 // 60) + SLOT_MINUTES).rules) <= CURRENT_KEYS
