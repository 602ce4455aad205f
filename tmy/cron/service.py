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
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from tmy import metrics
from tmy.cron.buffered import Sync, Write, run_buffered, variable_keys
from tmy.cron.occurrence import (
    DONE_TTL,
    SKIPPED_OFF,
    _log_chat_off,
    _mark,
    cron_message,
    daemon_id,
    done_key,
    fire_time_text,
    history_key,
    manual_occurrence_id,
    occurrence_id,
    outbox_key,
    target_key,
)
from tmy.cron.outbox import Outbox, SendFn, _outbox_item, _outbox_ttl
from tmy.cron.schedule import Schedule, Timing
from tmy.engine.core import Engine
from tmy.errors import LeaseLost, StoreError, TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message, Reply, Target
from tmy.rulebook.model import Rule, Rulebook
from tmy.store.base import MISSING, Store
from tmy.store.leases import Lease

log = get_logger("tmy.cron")

HISTORY = 20  # runs kept per job
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


class Cron(Outbox):
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

    async def _run_fenced(
        self,
        lease: Lease,
        occ: str,
        rule: Rule,
        schedule: Schedule,
        fire: datetime,
        target: Target | None,
        *,
        manual_by: str | None = None,
        unsent: str | None = None,
    ) -> tuple[dict[str, Any], Reply | None]:
        """Run one claimed occurrence; its writes, done mark and outbox entry land together.

        The steps run on a buffer (:mod:`tmy.cron.buffered`); one ``commit`` fenced by
        the claim lease applies their writes, the done mark and (when there is a
        reply to post) the outbox entry in state ``sending`` — or, when the lease
        was lost meanwhile, nothing at all (``LeaseLost``: the new holder runs it).
        Returns the history entry and the reply (None when the chat is off).

        ``manual_by``: a fired-now run (``cron fire``), by whom; its history entry says
        ``manual``. ``unsent``: why this process cannot post to ``target`` (``cron fire``
        run where no daemon serves the platform): the reply is kept in the history
        only, not in the outbox.
        """
        fire_text = fire_time_text(fire)
        message = cron_message(schedule, target)
        manual = {} if manual_by is None else {"manual": True, "by": manual_by}
        if target is not None and await self._chat_off(message):
            # not run at all: a rotating tip does not advance while the chat is off
            entry = self._entry(fire_text, target, None, SKIPPED_OFF, None, "not sent")
            entry.update(manual)
            await self._commit([(done_key(occ), _mark(entry), DONE_TTL)], lease)
            _log_chat_off(rule.id, fire_text, target)
            self._count(rule.id, "skipped")
            return entry, None
        # the variables the rule may write stay locked from the run's first read to its
        # commit (name order, after the claim: no deadlock), so a chat run or another
        # occurrence writing them waits instead of being overwritten by this commit
        keys = variable_keys(self.engine.rulebook, rule.scheduled_locks, message)
        async with AsyncExitStack() as stack:
            held = [await stack.enter_async_context(self.store.lock(key)) for key in keys]
            reply, writes, syncs = await run_buffered(
                self.engine, rule, message, schedule.input, {"FIRE_TIME": fire_text}
            )
            outcome = "error" if reply.error else "ok"
            item = None
            if target is not None and reply.text and self.send is not None and unsent is None:
                item = _outbox_item(rule.id, target, reply, fire, schedule, lease.token)
                item.update(manual)
            entry = self._entry(fire_text, target, reply.trace_id, outcome, reply.error, "")
            entry.update(manual)
            commit: list[Write] = [*writes, (done_key(occ), _mark(entry), DONE_TTL)]
            if item is not None:
                commit.append((outbox_key(occ), item, _outbox_ttl(item)))
            await self._commit(commit, lease, held)
            await self._sync_boards(syncs)
        if target is None:
            sent = "logged only"
        elif not reply.text:
            sent = "nothing to send"
        elif unsent is not None:
            sent = f"not sent: {unsent}"
        elif item is None:
            sent = "error: no adapters running"
        else:
            sent = await self._send_claimed(lease, occ, item)
        entry["sent"] = sent
        log.info(
            "cron.done",
            trace_id=reply.trace_id,
            rule=rule.id,
            fire_time=fire_text,
            target=target_key(target),
            outcome=outcome,
            sent=sent,
            answer=preview(reply.text),
            **manual,
        )
        self._count(rule.id, outcome)
        return entry, reply

    async def _sync_boards(self, syncs: Sequence[Sync]) -> None:
        """Make the leaderboards of the ``rank: true`` variables the run committed follow
        them (the run synced its buffer's boards only). Each sync re-reads the committed
        value; one that fails is logged, and the board catches up at the next write."""
        for board, member, key, name in syncs:
            try:
                await self.store.rank_sync(board, member, key, name)
            except TmyError as exc:
                log.warning("rank.sync_failed", key=key, user=member, error=str(exc))

    async def _commit(self, writes: list[Write], lease: Lease, held: Sequence[Lease] = ()) -> None:
        """``store.commit`` fenced by ``lease``; on a Redis Cluster, one slot at a time.

        A cluster runs a script on one node, so a commit there may only touch the
        lease's own slot: the done mark goes first, fenced; every other write
        then goes alone after a local check of the lease (not fenced in the store).
        """
        if not self._one_slot:
            await self.store.commit(writes, fence=[lease, *held])
            return
        first = [w for w in writes if w[0] == lease.key]
        await self.store.commit(first, fence=[lease])
        fences = {x.key: x for x in held}
        for write in writes:
            if write[0] != lease.key:
                lease.check()
                own = fences.get(write[0])  # a variable's key and its lease share a slot
                await self.store.commit([write], fence=[own] if own is not None else [])

    def _lease_lost(
        self, rule_id: str, fire_text: str, target: Target | None, exc: Exception
    ) -> None:
        log.error(
            "cron.lease_lost",
            rule=rule_id,
            fire_time=fire_text,
            target=target_key(target),
            error=str(exc),
            detail="this daemon lost the occurrence's lease (paused or cut off from the store): "
            "it wrote and sent nothing more; the daemon that took the lease runs or sends it",
        )
        metrics.lease_lost("cron")

    async def _chat_off(self, message: Message) -> bool:
        """Whether ``.tmy off`` silenced the target chat (the engine's chat switch)."""
        switch = self.engine.switch
        return switch is not None and bool(await switch.is_off(message))

    async def _remember(self, rule_id: str, entry: dict[str, Any]) -> None:
        try:
            await self.store.update(history_key(rule_id), lambda h: _append(h, entry))
        except TmyError as exc:
            log.warning("cron.history_failed", rule=rule_id, error=str(exc))

    def _entry(
        self,
        fire_text: str,
        target: Target | None,
        trace_id: str | None,
        outcome: str,
        error: str | None,
        sent: str,
    ) -> dict[str, Any]:
        return {
            "fire_time": fire_text,
            "daemon": self.daemon,
            "target": target_key(target),
            "trace_id": trace_id,
            "outcome": outcome,
            "error": error,
            "sent": sent,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def _count(self, rule_id: str, outcome: str) -> None:
        if self.on_fire is not None:
            self.on_fire(rule_id, outcome)


def _append(history: Any, entry: dict[str, Any]) -> tuple[list[Any], None]:
    runs = history if isinstance(history, list) else []
    runs.append(entry)
    return runs[-HISTORY:], None
