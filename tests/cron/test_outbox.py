"""The outbox (tmy.cron.outbox): a failed scheduled send is kept, retried, reported,
given up past its window, and resent once across daemons."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.cron.scheduled import GROUP, UTC_ZONE, RefusesFirstSend, counted, history, wait_for
from tests.support.log_helpers import read_log
from tmy.testing import serving


def _failures(outcome: str) -> float:
    from tmy.metrics import REGISTRY

    value = REGISTRY.get_sample_value(
        "tmy_cron_send_failures_total", {"rule": "job", "outcome": outcome}
    )
    return value or 0.0


@pytest.mark.slow
@pytest.mark.timeout(30)
async def test_a_failed_scheduled_send_is_kept_retried_and_reported(log_file: Path) -> None:
    from tmy.cron import format_report, jobs_report, outbox_entries

    schedule = "every: 1h, misfire_grace: 3600, send_retry: 7200"
    onebot = RefusesFirstSend()
    rules = {"r.yaml": counted(schedule, GROUP)}
    async with serving(rules, adapters=(onebot,), http_enabled=False) as daemon:
        store = daemon.app.store
        retries = _failures("retry")
        pending = await wait_for(lambda: outbox_entries(store))
        assert [item["state"] for _, item in pending] == ["retry"]
        assert _failures("retry") == retries + 1
        jobs = await jobs_report(daemon.engine.rulebook, store, UTC_ZONE)
        (item,) = jobs[0]["outbox"]
        assert item["attempts"] == 1 and "no bot account" in item["last_error"]
        assert "pending send" in format_report(jobs)
        health = await daemon.health()
        assert health["cron"]["outbox"]["pending"] == 1
        assert health["cron"]["outbox"]["oldest"] == item["fire_time"]
        # the retry (after the first backoff) goes out, and the outbox empties
        assert (await onebot.pop(timeout=8)).text.startswith("tick ")
        assert await wait_for(lambda: _outbox_empty(store), timeout=2)
        runs = await wait_for(lambda: _retried(store), timeout=2)
        assert runs[-1]["sent"] == "ok (attempt 2)" and runs[-1]["attempt"] == 2, runs
        assert (await daemon.health())["cron"]["outbox"]["pending"] == 0
    failed = [e for e in read_log(log_file) if e["event"] == "cron.send_failed"]
    assert failed and failed[0]["level"] == "warning", failed
    assert failed[0]["error"] == "onebot: no bot account connected"


async def _outbox_empty(store: Any) -> bool:
    from tmy.cron import outbox_entries

    return not await outbox_entries(store)


async def _retried(store: Any) -> list[dict[str, Any]]:
    runs = await history(store)
    return runs if any("attempt" in r for r in runs) else []


@pytest.mark.timeout(30)
async def test_a_send_that_keeps_failing_past_its_window_is_given_up_and_counted() -> None:
    from tmy.cron import outbox_entries

    # the occurrence that runs at start is already older than its 1 s retry window
    rules = {"r.yaml": counted("every: 1h, misfire_grace: 3600, send_retry: 1", GROUP)}
    given_up = _failures("gave_up")
    onebot = RefusesFirstSend(refuse=None)
    async with serving(rules, adapters=(onebot,), http_enabled=False) as daemon:
        store = daemon.app.store
        runs = await wait_for(lambda: history(store))
        assert runs[0]["sent"].endswith("(gave up after 1 attempt)"), runs
        assert _failures("gave_up") == given_up + 1
        assert await outbox_entries(store) == []
        assert onebot.sent == []


@pytest.mark.timeout(30)
async def test_a_full_outbox_gives_a_failed_send_up_at_once() -> None:
    """A Cron of its own, started after the outbox is filled (a served daemon's cron
    would run the occurrence before the test could fill it)."""
    from tmy.cron import MAX_OUTBOX, OUTBOX_INDEX, Cron
    from tmy.testing import Bot

    schedule = "every: 1h, misfire_grace: 3600, send_retry: 7200"
    async with Bot({"r.yaml": counted(schedule, GROUP)}) as bot:
        store = bot.app.store
        full = {f"other/-/{n}": "2026-01-01T00:00:00+00:00" for n in range(MAX_OUTBOX)}
        await store.set(OUTBOX_INDEX, full)

        async def send(target: Any, text: str) -> None:
            raise RuntimeError("onebot: no bot account connected")

        cron = Cron(bot.engine, store, send, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await wait_for(lambda: history(store))
        finally:
            await cron.stop()
        assert "the outbox is full" in runs[0]["sent"] and "gave up" in runs[0]["sent"], runs


@pytest.mark.slow
@pytest.mark.timeout(30)
async def test_two_daemons_resend_a_failed_scheduled_send_once(tmp_path: Path) -> None:
    """Both daemons poll the outbox; the resend is claimed, so exactly one posts it."""
    from tmy.cron import outbox_entries

    schedule = "every: 1h, misfire_grace: 3600, send_retry: 7200"
    rules = {"r.yaml": counted(schedule, GROUP)}
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    attempts: list[str] = []  # both daemons' onebot sends; the first one is refused
    one_bot, two_bot = (RefusesFirstSend(attempts=attempts) for _ in range(2))
    async with (
        serving(rules, store=url, adapters=(one_bot,), http_enabled=False) as one,
        serving(rules, store=url, adapters=(two_bot,), http_enabled=False),
    ):
        assert await wait_for(lambda: asyncio.sleep(0, len(attempts) >= 2), timeout=8)
        assert await wait_for(lambda: _outbox_empty(one.app.store), timeout=2)
        await asyncio.sleep(1.5)  # another poll of each daemon: nothing more goes out
        assert len(attempts) == 2, attempts
        assert len(one_bot.sent) + len(two_bot.sent) == 1
        assert await outbox_entries(one.app.store) == []
        assert await one.app.store.get("var/global/ticks") == 1
