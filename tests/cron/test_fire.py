"""``Cron.fire_now`` (``cron fire``): one occurrence now, through the scheduler's own path.

A fired occurrence is claimed, committed with its done mark, posted (or kept in the
outbox and resent) and kept in the history like a scheduled one, marked manual; it
has a name of its own, so the occurrence scheduled for the same second still runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.cron.scheduled import RefusesFirstSend, history, wait_for
from tmy.config.memory import RecallSpec
from tmy.memory.recall import recall
from tmy.message import Message, Target
from tmy.testing import serving

EVERY_SECOND = """
variables:
  ticks: {scope: global, default: 0}
rules:
  - id: job
    schedule: {every: 1s, send_to: [{platform: onebot, chat: "group:5"}]}
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "tick {ticks} at {FIRE_TIME}"}
"""


@pytest.mark.slow  # a second of the schedule's real ticks
@pytest.mark.timeout(60)
async def test_a_fired_occurrence_leaves_the_one_scheduled_for_that_second_alone() -> None:
    async with serving({"r.yaml": EVERY_SECOND}, platform="onebot", timezone="UTC") as daemon:
        scheduler = daemon.app.cron
        assert scheduler is not None
        await daemon.pop()  # the schedule is running
        [fired] = await scheduler.fire_now(daemon.engine.rulebook.by_id["job"], by="test")
        assert fired.entry["manual"] is True and fired.entry["by"] == "test"
        assert fired.entry["sent"] == "ok" and fired.reply is not None
        fire_time = fired.entry["fire_time"]
        store = daemon.app.store

        async def scheduled_same_second() -> Any:
            runs = await history(store)
            return [r for r in runs if r["fire_time"] == fire_time and not r.get("manual")]

        # every second is a fire time: the scheduled occurrence of the fired one's second runs too
        assert await wait_for(scheduled_same_second, 10)
        posts: list[str] = []
        while fired.reply.text not in posts:  # posted among the scheduled ones
            posts.append((await daemon.pop()).text)
        manual = [r for r in await history(store) if r.get("manual")]
        assert len(manual) == 1 and manual[0]["trace_id"] == fired.entry["trace_id"]
        done = await store.keys("cron/done/job/")
        assert sum("/manual-" in k for k in done) == 1
        assert any(k.endswith(str(int(_ts(fire_time)))) for k in done)  # the scheduled mark


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


# yearly, on time only: a daemon started in these tests never runs a scheduled occurrence
# of its own (an hourly one within a minute after the hour would, and add a run)
HOURLY = """
variables:
  ticks: {scope: global, default: 0}
rules:
  - id: job
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0, send_retry: 60,
               send_to: [{platform: onebot, chat: "group:5"}]}
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "tick {ticks}"}
"""


@pytest.mark.slow  # the resend waits for the outbox's first backoff (2 s)
@pytest.mark.timeout(60)
async def test_a_failed_post_of_a_fired_occurrence_is_resent_from_the_outbox_marked_manual() -> (
    None
):
    onebot = RefusesFirstSend()
    async with serving({"r.yaml": HOURLY}, adapters=(onebot,), http_enabled=False,
                       timezone="UTC") as daemon:  # fmt: skip
        scheduler, store = daemon.app.cron, daemon.app.store
        assert scheduler is not None
        [fired] = await scheduler.fire_now(daemon.engine.rulebook.by_id["job"], by="cli x:ann")
        assert fired.entry["sent"].startswith("error: onebot: no bot account connected (retrying")
        assert fired.reply is not None and fired.reply.text == "tick 1"
        post = await onebot.pop(timeout=15)
        assert (post.target, post.text) == (Target("onebot", "group:5"), "tick 1")

        async def resent() -> Any:
            return [r for r in await history(store) if "attempt" in r]

        [retry] = await wait_for(resent, 5)
        assert retry["manual"] is True and retry["by"] == "cli x:ann"
        assert retry["sent"] == "ok (attempt 2)"
        assert onebot.attempts == ["tick 1", "tick 1"]
        assert await store.get("var/global/ticks") == 1  # one run, posted once


async def test_a_switched_off_chat_is_skipped_and_a_target_given_replaces_send_to() -> None:
    async with serving({"r.yaml": HOURLY}, platform="onebot", timezone="UTC") as daemon:
        scheduler = daemon.app.cron
        assert scheduler is not None and daemon.app.switch is not None
        rule = daemon.engine.rulebook.by_id["job"]
        await daemon.app.switch.set(Message("", chat="group:5", platform="onebot"), True)
        [skipped] = await scheduler.fire_now(rule, by="test")
        assert skipped.entry["outcome"] == "skipped: chat off" and skipped.reply is None
        assert skipped.entry["manual"] is True
        [other] = await scheduler.fire_now(rule, targets=[Target("onebot", "group:6")], by="t")
        assert other.entry["sent"] == "ok"
        post = await daemon.pop()
        assert post.target.chat == "group:6" and post.text == "tick 1"
        runs = await history(daemon.app.store)
        assert [(r["target"], r["outcome"]) for r in runs] == [
            ("onebot:group:5:", "skipped: chat off"),
            ("onebot:group:6:", "ok"),
        ]


RANKED = """
variables:
  points: {scope: user, default: 0, rank: true}
rules:
  - id: job
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0, send_to: [{platform: onebot, chat: "group:5"}]}
    steps:
      - {plugin: ADJUST, input: "?= points + 5", save: points}
      - {plugin: ADJUST, input: "points {points}"}
"""


async def test_a_scheduled_run_s_rank_true_write_reaches_the_real_leaderboard() -> None:
    """The run writes into a buffer committed fenced; its board syncs are repeated on the
    real store once the commit landed, so top()/rank_of() see the scheduled write."""
    async with serving({"r.yaml": RANKED}, platform="onebot", timezone="UTC") as daemon:
        scheduler, store = daemon.app.cron, daemon.app.store
        assert scheduler is not None
        for _ in range(2):
            await scheduler.fire_now(daemon.engine.rulebook.by_id["job"], by="test")
        assert await store.get("var/user/onebot/cron/points") == 10
        assert await store.rank_top("onebot/points", 3) == [("cron", 10, None)]  # name = id
        assert await store.rank_of("onebot/points", "cron") == 1


REMEMBERING = """
rules:
  - id: note
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0}
    steps:
      - {plugin: ADJUST, input: "the spare key is under the blue flowerpot"}
      - {plugin: REMEMBER, scope: global}
"""


async def test_a_scheduled_remember_is_recalled_after_its_commit() -> None:
    """A scheduled run's REMEMBER lands with the run's commit: its entry's value and, replayed
    after the commit, its place in the lexical index, so chat messages recall it."""
    async with serving({"r.yaml": REMEMBERING}, platform="onebot", timezone="UTC") as daemon:
        scheduler = daemon.app.cron
        assert scheduler is not None
        [fired] = await scheduler.fire_now(daemon.engine.rulebook.by_id["note"], by="test")
        assert fired.reply is not None and fired.reply.error is None
        question = "where is the spare key?"
        asker = Message(question, user="ann", platform="onebot", chat="group:7")
        found = await recall(daemon.engine.services, asker, RecallSpec(max=3), question)
        assert [s.item["text"] for s in found.entries] == [
            "the spare key is under the blue flowerpot"
        ]
