"""The scheduler: fires the rulebook's scheduled rules, once per occurrence across daemons.

Each scheduled rule gets a loop that sleeps until its next fire time; each
firing runs once per ``send_to`` target. An occurrence is claimed with the
store's lease named after its done mark, run on a buffer
(:mod:`tmy.cron.buffered`), and its writes, done mark and outbox entry are
committed in one ``Store.commit`` fenced by the lease; then its reply is posted
(:mod:`tmy.cron.outbox`). See :mod:`tmy.cron` for the guarantees.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from tmy.cron.fenced import FencedRuns
from tmy.cron.occurrence import (
    daemon_id,
    done_key,
    fire_time_text,
    manual_occurrence_id,
    occurrence_id,
)
from tmy.cron.outbox import SendFn
from tmy.cron.schedule import Schedule, Timing
from tmy.engine.core import Engine
from tmy.errors import LeaseLost, StoreError
from tmy.logs import get_logger
from tmy.message import Reply, Target
from tmy.rulebook.model import Rule, Rulebook
from tmy.store.base import MISSING, Store

log = get_logger("tmy.cron")

ON_TIME_SLACK = 1.0
"""How late the scheduler's own timer may wake and still count as on time (``misfire_grace: 0``
means "on time only", not "never"); no catch-up after downtime is ever allowed by it."""
CLAIM_ATTEMPTS = 3  # claims of one occurrence by one daemon when its lease was lost


@dataclass(slots=True)
class _Job:
    rule: Rule
    schedule: Schedule
    timing: Timing
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    """One target's run of a fired-now occurrence (:meth:`Cron.fire_now`)."""

    target: Target | None
    entry: dict[str, Any]  # as kept in the history (outcome, sent, trace id, manual, by)
    reply: Reply | None  # None: not run (the chat is off, the claim was lost)


def scheduled_rules(rulebook: Rulebook) -> list[Rule]:
    return [r for r in rulebook.rules if "schedule" in r.extras]


class Cron(FencedRuns):
    """Fires the rulebook's scheduled rules; follows reloads (``update``)."""

    def __init__(
        self,
        engine: Engine,
        store: Store,
        send: SendFn | None,
        *,
        default_zone: tzinfo | None = None,
        on_fire: Callable[[str, str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self._one_slot = store.one_slot_commits  # a Redis Cluster: commits one slot at a time
        self.send = send
        self.default_zone = default_zone
        self.on_fire = on_fire  # (rule id, outcome): metrics
        self.daemon = daemon_id()
        self.jobs: dict[str, _Job] = {}
        self._runs: set[asyncio.Future[Any]] = set()
        self._retrying: set[str] = set()  # outbox keys this daemon is resending now
        self._retrier: asyncio.Task[None] | None = None

    def start(self, rulebook: Rulebook) -> None:
        self.update(rulebook)
        if self._retrier is None:
            self._retrier = asyncio.create_task(self._retry_loop(), name="cron outbox")

    def update(self, rulebook: Rulebook) -> None:
        """Follow a new rulebook: start new jobs, stop removed ones, restart changed ones.

        An occurrence already claimed or done is never run again: the claim and
        the done mark live in the store, keyed by rule, target and fire time.
        """
        wanted = {r.id: r for r in scheduled_rules(rulebook)}
        for rule_id in list(self.jobs):
            job = self.jobs[rule_id]
            new = wanted.get(rule_id)
            if new is None or new.extras["schedule"] != job.schedule:
                self._cancel(job)
                del self.jobs[rule_id]
                if new is None:
                    log.info("cron.removed", rule=rule_id)
            else:
                job.rule = new  # same schedule: keep the loop, run the new steps
        for rule_id, rule in wanted.items():
            if rule_id in self.jobs:
                continue
            schedule = rule.extras["schedule"]
            job = _Job(rule, schedule, Timing(schedule, self.default_zone))
            job.task = asyncio.create_task(self._loop(job), name=f"cron {rule_id}")
            self.jobs[rule_id] = job
            log.info(
                "cron.scheduled",
                rule=rule_id,
                schedule=schedule.describe(),
                next=fire_time_text(job.timing.upcoming(1)[0]),
            )

    def _cancel(self, job: _Job) -> None:
        if job.task is not None:
            job.task.cancel()

    async def stop(self, grace: float = 30.0) -> None:
        """Stop firing; let runs already started finish (up to ``grace`` s)."""
        for job in self.jobs.values():
            self._cancel(job)
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        if self._retrier is not None:
            self._retrier.cancel()
            tasks.append(self._retrier)
            self._retrier = None
        self.jobs.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runs:
            await asyncio.wait(list(self._runs), timeout=grace)

    async def _loop(self, job: _Job) -> None:
        timing, grace = job.timing, job.schedule.misfire_grace
        now = datetime.now(timing.tz)
        missed = timing.latest(now, grace)
        if missed is not None:
            self._fire(job, missed, on_time=False)  # coalesced: only the latest missed one
        previous = missed or now
        while True:
            fire = timing.after(previous)
            while (delay := fire.timestamp() - time.time()) > 0:
                await asyncio.sleep(delay)
            late = time.time() - fire.timestamp()
            on_time = True
            # the timer's own slack is not lateness: misfire_grace 0 still fires on time
            if late > max(grace, ON_TIME_SLACK):  # held up: run only the latest occurrence
                latest = timing.latest(datetime.now(timing.tz), grace)
                log.warning("cron.behind", rule=job.rule.id, late_s=round(late, 3))
                if latest is None:
                    previous = datetime.now(timing.tz)
                    continue
                fire, on_time = latest, False
            self._fire(job, fire, on_time=on_time)
            previous = fire

    def _fire(self, job: _Job, fire: datetime, *, on_time: bool) -> None:
        targets: tuple[Target | None, ...] = job.schedule.send_to or (None,)
        for target in targets:
            self._spawn(self._occurrence(job.rule, job.schedule, fire, target, on_time))

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    async def _occurrence(
        self, rule: Rule, schedule: Schedule, fire: datetime, target: Target | None, on_time: bool
    ) -> None:
        """Claim, run, mark done (fenced by the claim), send: once across every daemon.

        A run whose lease was lost wrote nothing; this daemon then claims the
        occurrence again (at most :data:`CLAIM_ATTEMPTS` times, inside the grace
        window): it finds the done mark of the daemon that took over, or — when
        that one lost its lease too (both cut off at once) — runs it itself.
        """
        occ = occurrence_id(rule.id, target, fire)
        deadline = fire.timestamp() + schedule.misfire_grace + (ON_TIME_SLACK if on_time else 0.0)
        for attempt in range(1, CLAIM_ATTEMPTS + 1):
            try:
                async with self.store.lock(
                    done_key(occ), wait=max(deadline - time.time(), 0.0)
                ) as lease:
                    if await self.store.get(done_key(occ)) is not MISSING:
                        return  # another daemon ran it
                    if time.time() > deadline:
                        log.warning("cron.missed", rule=rule.id, fire_time=fire_time_text(fire))
                        self._count(rule.id, "skipped")
                        return
                    entry, _ = await self._run_fenced(lease, occ, rule, schedule, fire, target)
                    break
            except LeaseLost as exc:
                self._lease_lost(rule.id, fire_time_text(fire), target, exc)
                if attempt == CLAIM_ATTEMPTS or time.time() > deadline:
                    return
                continue
            except StoreError as exc:
                # the lease stayed taken past the grace window, or the store is down
                log.warning(
                    "cron.claim_failed",
                    rule=rule.id,
                    fire_time=fire_time_text(fire),
                    error=str(exc),
                )
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cron.crashed", rule=rule.id)
                return
        else:
            return
        await self._remember(rule.id, entry)

    async def fire_now(
        self,
        rule: Rule,
        *,
        targets: Sequence[Target | None] | None = None,
        by: str = "",
        unsendable: Callable[[Target], str | None] | None = None,
    ) -> list[Fired]:
        """Run one occurrence of ``rule`` now (``cron fire``), through the scheduler's path.

        Each target (default: the schedule's ``send_to``; none: one logged-only run)
        is claimed, run on a buffer, committed fenced with its done mark and outbox
        entry, posted and kept in the history like a scheduled occurrence, marked
        ``manual`` (with ``by``). ``FIRE_TIME`` is now, in the schedule's zone. The
        occurrence has a name of its own (:func:`manual_occurrence_id`), so the
        scheduled occurrences and the next fire time are untouched. ``unsendable(target)``
        says why this process cannot post there (None: it can): the reply is then
        kept in the history as not sent, not queued in the outbox.
        """
        schedule: Schedule = rule.extras["schedule"]
        fire = datetime.now(Timing(schedule, self.default_zone).tz).replace(microsecond=0)
        chosen = tuple(targets) if targets is not None else (schedule.send_to or (None,))
        out = []
        for target in chosen:
            occ = manual_occurrence_id(rule.id, target, fire)
            unsent = unsendable(target) if unsendable is not None and target is not None else None
            reply: Reply | None = None
            try:
                async with self.store.lock(done_key(occ)) as lease:
                    entry, reply = await self._run_fenced(
                        lease, occ, rule, schedule, fire, target, manual_by=by, unsent=unsent
                    )
            except LeaseLost as exc:  # paused or cut off from the store: nothing was written
                self._lease_lost(rule.id, fire_time_text(fire), target, exc)
                entry = self._entry(fire_time_text(fire), target, None, "error", str(exc), "")
                entry.update(manual=True, by=by, sent="not sent")
            await self._remember(rule.id, entry)
            out.append(Fired(target, entry, reply))
        return out
