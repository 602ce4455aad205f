"""Scheduled rules: each occurrence runs once across every daemon sharing the store.

A rule with ``schedule:`` fires on a five-field ``cron`` expression (APScheduler
3's :class:`~apscheduler.triggers.cron.CronTrigger` computes the times) or
``every`` N seconds/minutes/hours/days, aligned to the Unix epoch, so every
daemon computes the same fire times from the schedule alone, never from its
own clock's ticks. Each firing runs the rule's steps once per ``send_to``
target (``USER`` = ``cron``, ``PLATFORM``/``CHAT`` from the target; without
targets one run with ``PLATFORM`` = ``cron`` whose reply is only logged), with
the local ``FIRE_TIME`` (the scheduled time, ISO 8601, identical everywhere).

**Exactly once.** An occurrence is (rule, target, fire time). A daemon takes
the store's lease named after the occurrence's done mark
(``cron/done/<rule>/<target>/<fire>``), checks the mark, runs the rule's steps
on a buffer (:mod:`tmy.cron_run`: nothing reaches the store yet), then applies
the steps' writes, the done mark and the outbox entry of its reply in ONE
``Store.commit`` fenced by the lease's token. A daemon paused (SIGSTOP) or cut
off from the store past the lease's length has lost it: its commit is refused
(``LeaseLost``), it writes and sends nothing more and logs ``cron.lease_lost``;
the daemon that took the lease over found no done mark and ran the occurrence
itself. If the holder dies, its lease frees (at once for a dead process of the
same machine, else after the lease's 5 s) and a waiting daemon runs the
occurrence while it is still inside ``misfire_grace``. Side effects outside the
store (HTTP and LLM steps) of a run that lost its lease have happened; its
store writes have not.

**Sending.** The reply is posted after the commit, under the same lease, which
is checked right before the send. The outbox entry is committed in state
``sending`` first, and nobody resends an entry in that state: a holder paused
*between* that check and the send (microseconds, plus the adapter's own
queueing) still posts once, late, and the new holder does not post it again —
so a post goes out at most once per occurrence. A holder that finds its lease
lost before sending puts the entry back to ``retry`` (it knows it did not
send). A failed send (the adapter raised: NapCat not connected, a platform
error) stays in the outbox (``cron/outbox/<occurrence>``, indexed in
``cron/pending``) and is retried with backoff (2 s, doubling, at most 60 s)
while the occurrence is inside ``send_retry`` (default: ``misfire_grace``); each
resend is claimed by the same lease, so one daemon resends. Failures log
``cron.send_failed`` (warning) and count ``tmy_cron_send_failures{outcome=retry|
gave_up}``; ``run.py cron`` and ``/healthz`` show what waits. At most
:data:`MAX_OUTBOX` sends wait at once; past that a failed send is given up.

**Switched-off chats.** ``.tmy off`` in a chat (the engine's chat switch) stops
the scheduled runs for that chat: the occurrence is not run at all (a rotating
list does not advance), is marked done and kept in the history as
``skipped: chat off``; a pending resend to it is dropped the same way.

**Edge values.** ``misfire_grace`` and ``send_retry`` are at most
:data:`MAX_GRACE` (a day); done marks live that long plus two minutes, so a
reload that raises the grace never makes an occurrence that already ran
runnable again. ``misfire_grace: 0`` means on time only: a firing the timer
wakes up to (within :data:`ON_TIME_SLACK`) runs, a missed one never does.

**Coalescing.** A daemon that starts (or falls behind) runs only the latest
occurrence still inside ``misfire_grace``, not one per missed tick.

**History.** Every run is logged (``cron.fired`` / ``cron.done`` with its
trace id) and kept in ``cron/hist/<rule>``: the last :data:`HISTORY` runs with
fire time, daemon, target, trace id, outcome and send result.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

from tmy import metrics
from tmy.cron_run import Write, run_buffered, store_of, variable_keys
from tmy.errors import LeaseLost, RuleError, StoreError, TmyError
from tmy.extension import Extension, RuleKey
from tmy.logs import get_logger, preview
from tmy.message import Message, Reply, Target
from tmy.store.base import MISSING, Store
from tmy.store.leases import Lease

log = get_logger("tmy.cron")

HISTORY = 20  # runs kept per job
SCHEDULE_KEYS = ("cron", "every", "timezone", "send_to", "input", "misfire_grace", "send_retry")
TARGET_PLATFORMS = ("onebot", "discord", "telegram", "console")  # adapters that can send
DEFAULT_GRACE = 60.0
MAX_GRACE = 86_400.0
"""The largest ``misfire_grace`` / ``send_retry`` (a day): done marks live this long (+2 min),
so no grace a hot reload may set can make an occurrence that already ran runnable again."""
DONE_TTL = MAX_GRACE + 120
ON_TIME_SLACK = 1.0
"""How late the scheduler's own timer may wake and still count as on time (``misfire_grace: 0``
means "on time only", not "never"); no catch-up after downtime is ever allowed by it."""
CLAIM_ATTEMPTS = 3  # claims of one occurrence by one daemon when its lease was lost
RETRY_FIRST = 2.0  # s before the first resend of a failed scheduled send; doubles each time
RETRY_MAX = 60.0  # longest pause between resends
RETRY_POLL = 1.0  # how often each daemon looks for due resends in the outbox
OUTBOX_PREFIX = "cron/outbox/"
OUTBOX_INDEX = "cron/pending"  # {occurrence: fire time} of the entries waiting for a resend
MAX_OUTBOX = 1000
"""Failed sends kept for a resend at once (all rules); past it a failed send is given up."""
SKIPPED_OFF = "skipped: chat off"
MAX_CATCH_UP = 100_000  # occurrences looked at when finding the latest missed one
_EVERY = re.compile(r"\s*(\d+)\s*([smhd])\s*")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SendFn = Callable[[Target, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A rule's validated ``schedule:``."""

    cron: str | None
    every: int | None  # seconds
    timezone: str | None  # None: the config's timezone
    send_to: tuple[Target, ...]
    input: str
    misfire_grace: float
    send_retry: float | None = None  # None: failed sends are retried within misfire_grace

    def describe(self) -> str:
        return f"cron {self.cron!r}" if self.cron else f"every {self.every}s"

    @property
    def retry_window(self) -> float:
        """Seconds after the fire time a failed send is still retried."""
        return self.misfire_grace if self.send_retry is None else self.send_retry


def validate_schedule(raw: Any) -> Schedule:
    """The loader's check of ``schedule:`` (errors become file:line messages)."""
    if not isinstance(raw, dict):
        raise RuleError("must be a mapping with 'cron:' or 'every:'")
    unknown = [k for k in raw if k not in SCHEDULE_KEYS]
    if unknown:
        raise RuleError(f"unknown key {unknown[0]!r}; allowed: {', '.join(SCHEDULE_KEYS)}")
    cron, every = raw.get("cron"), raw.get("every")
    if (cron is None) == (every is None):
        raise RuleError("give exactly one of 'cron:' (five fields) or 'every:' (e.g. 30s)")
    seconds = None
    if cron is not None:
        if not isinstance(cron, str):
            raise RuleError(f"'cron:' must be a five-field string, got {cron!r}")
        try:
            cron_trigger(cron, UTC)
        except ValueError as exc:
            raise RuleError(f"bad cron expression {cron!r}: {exc}") from None
    else:
        seconds = parse_every(every)
    zone = raw.get("timezone")
    if zone is not None:
        if not isinstance(zone, str):
            raise RuleError(f"'timezone:' must be an IANA name, got {zone!r}")
        resolve_timezone(zone)
    grace = _seconds(raw, "misfire_grace", DEFAULT_GRACE)
    retry = _seconds(raw, "send_retry", None)
    text = raw.get("input", "")
    if not isinstance(text, str):
        raise RuleError(f"'input:' must be text, got {text!r}")
    return Schedule(
        cron=cron,
        every=seconds,
        timezone=zone,
        send_to=tuple(_targets(raw.get("send_to"))),
        input=text,
        misfire_grace=grace,
        send_retry=retry,
    )


def _seconds(raw: dict[str, Any], key: str, default: float | None) -> Any:
    """A duration key in seconds, 0 to :data:`MAX_GRACE`."""
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise RuleError(f"'{key}:' must be seconds >= 0, got {value!r}")
    if value > MAX_GRACE:
        raise RuleError(
            f"'{key}:' must be at most {MAX_GRACE:g} seconds (one day; done marks are kept "
            f"that long so an occurrence never runs twice), got {value!r}"
        )
    return float(value)


def parse_every(value: Any) -> int:
    """``30s``, ``5m``, ``2h``, ``1d`` (or a bare number of seconds) as whole seconds."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _EVERY.fullmatch(value) if isinstance(value, str) else None
    if m is None or int(m.group(1)) <= 0:
        raise RuleError(
            f"'every:' must be a positive interval like 30s, 5m, 2h or 1d, got {value!r}"
        )
    return int(m.group(1)) * _UNIT[m.group(2)]


_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _standard_weekdays(field: str) -> str:
    """A cron day-of-week field (0 or 7 = Sunday) in APScheduler's names.

    APScheduler 3 numbers weekdays from Monday = 0, and ``from_crontab`` passes
    numbers through unchanged, so ``1-5`` would mean Tuesday to Saturday.
    Numbers are rewritten as day names; names and ``*`` stay as written.
    """
    days: list[str] = []
    for part in field.split(","):
        body, _, step_text = part.partition("/")
        if (body == "*" and not step_text) or any(c.isalpha() for c in body):
            days.append(part)
            continue
        step = int(step_text) if step_text else 1
        if body == "*":
            low, high = 0, 6
        else:
            first, _, last = body.partition("-")
            low, high = int(first), int(last or first)
        if not 0 <= low <= high <= 7 or step < 1:
            raise ValueError(f"day of week {part!r} must be within 0-7 (0 and 7 are Sunday)")
        days.extend(_DAY_NAMES[n] for n in range(low, high + 1, step))
    return ",".join(dict.fromkeys(days))


def cron_trigger(expression: str, tz: tzinfo) -> CronTrigger:
    """APScheduler's trigger for a standard five-field crontab line."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"Wrong number of fields; got {len(fields)}, expected 5")
    minute, hour, day, month, weekday = fields
    return CronTrigger(
        minute=minute,
        hour=hour,
        day=day,
        month=month,
        day_of_week=_standard_weekdays(weekday),
        timezone=tz,
    )


def _targets(raw: Any) -> Iterable[Target]:
    if raw is None:
        return
    if not isinstance(raw, list):
        raise RuleError("'send_to:' must be a list of {platform, chat} targets")
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("platform"), str):
            raise RuleError(f"each 'send_to:' target needs 'platform:' and 'chat:', got {item!r}")
        extra = [k for k in item if k not in ("platform", "chat", "user")]
        if extra:
            raise RuleError(f"unknown key {extra[0]!r} in a send_to target (platform, chat, user)")
        platform = item["platform"]
        if platform not in TARGET_PLATFORMS:
            raise RuleError(
                f"unknown platform {platform!r} in send_to; one of {', '.join(TARGET_PLATFORMS)}"
            )
        chat, user = item.get("chat", ""), item.get("user", "")
        if isinstance(chat, int) and not isinstance(chat, bool):
            chat = str(chat)
        if isinstance(user, int) and not isinstance(user, bool):
            user = str(user)
        if not isinstance(chat, str) or not isinstance(user, str) or not (chat or user):
            raise RuleError(f"a send_to target needs a text 'chat:' (or 'user:'), got {item!r}")
        yield Target(platform, chat, user)


def resolve_timezone(name: str | None) -> tzinfo:
    """An IANA zone, or the machine's own for ``local``/empty."""
    if name in (None, "", "local"):
        from tzlocal import get_localzone  # APScheduler's own dependency

        return get_localzone()
    try:
        return ZoneInfo(name)
    except Exception:
        raise RuleError(
            f"unknown timezone {name!r} (use an IANA name like 'Asia/Shanghai')"
        ) from None


# -- fire times ------------------------------------------------------------------------------


class Timing:
    """The fire times of one schedule in its time zone."""

    def __init__(self, schedule: Schedule, default_zone: str) -> None:
        self.schedule = schedule
        self.tz = resolve_timezone(schedule.timezone or default_zone)
        self.trigger = cron_trigger(schedule.cron, self.tz) if schedule.cron else None

    def after(self, moment: datetime) -> datetime:
        """The first fire time strictly after ``moment``."""
        if self.trigger is None:
            step = self.schedule.every
            assert step is not None
            ts = (math.floor(moment.timestamp()) // step + 1) * step
            return datetime.fromtimestamp(ts, self.tz)
        fire = self.trigger.get_next_fire_time(None, moment + timedelta(microseconds=1))
        assert fire is not None  # a five-field crontab always fires again
        return fire

    def latest(self, now: datetime, grace: float) -> datetime | None:
        """The last fire time at or before ``now`` and no more than ``grace`` s old."""
        if self.trigger is None:
            step = self.schedule.every
            assert step is not None
            fire = datetime.fromtimestamp(math.floor(now.timestamp()) // step * step, self.tz)
            return fire if (now - fire).total_seconds() <= grace else None
        found = None
        fire = self.after(now - timedelta(seconds=grace) - timedelta(microseconds=1))
        for _ in range(MAX_CATCH_UP):
            if fire > now:
                break
            found = fire
            fire = self.after(fire)
        return found

    def upcoming(self, count: int, now: datetime | None = None) -> list[datetime]:
        fire = now or datetime.now(self.tz)
        out = []
        for _ in range(count):
            fire = self.after(fire)
            out.append(fire)
        return out


def cron_message(schedule: Schedule, target: Target | None) -> Message:
    """The message a scheduled run answers: its input, from user "cron", in the target's chat
    (a rule test's ``fire:`` builds the same one)."""
    return Message(
        schedule.input,
        user="cron",
        chat=target.chat if target else "cron",
        platform=target.platform if target else "cron",
        user_name="cron",
        private=False,
    )


def fire_time_text(fire: datetime) -> str:
    return fire.isoformat(timespec="seconds")


def target_key(target: Target | None) -> str:
    return "-" if target is None else f"{target.platform}:{target.chat}:{target.user}"


def history_key(rule_id: str) -> str:
    return f"cron/hist/{rule_id}"


def occurrence_id(rule_id: str, target: Target | None, fire: datetime) -> str:
    return f"{rule_id}/{target_key(target)}/{int(fire.timestamp())}"


def done_key(occ: str) -> str:
    """The occurrence's done mark; also the name of its claim lease (one slot on a cluster)."""
    return f"cron/done/{occ}"


def outbox_key(occ: str) -> str:
    return f"{OUTBOX_PREFIX}{occ}"


def _mark(entry: dict[str, Any]) -> dict[str, Any]:
    """The done mark: small (an every-second rule keeps a day of them)."""
    return {"daemon": entry["daemon"], "trace_id": entry["trace_id"], "outcome": entry["outcome"]}


def _outbox_item(
    rule_id: str, target: Target, reply: Reply, fire: datetime, schedule: Schedule, token: str
) -> dict[str, Any]:
    return {
        "rule": rule_id,
        "platform": target.platform,
        "chat": target.chat,
        "user": target.user,
        "text": reply.text,
        "fire_time": fire_time_text(fire),
        "deadline": fire.timestamp() + schedule.retry_window,
        "trace_id": reply.trace_id,
        "attempts": 1,
        "state": "sending",  # sending (someone holds its claim and sends) | retry
        "token": token,
        "next_at": None,
        "error": None,
    }


def _outbox_ttl(item: dict[str, Any]) -> float:
    """An entry outlives its retry window by two minutes (then the store drops it)."""
    return max(item["deadline"] - time.time(), 0.0) + 120


async def outbox_entries(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """Every indexed outbox entry (key, entry), oldest fire time first."""
    return (await _outbox_scan(store))[0]


async def _outbox_scan(store: Store) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(entries, occurrences indexed whose entry is gone): one read of the index, one
    ``get_many`` of its entries (never a scan of the store's keys)."""
    index = await store.get(OUTBOX_INDEX)
    occs = list(index) if isinstance(index, dict) else []
    keys = [outbox_key(occ) for occ in occs]
    values = await store.get_many(keys) if keys else []
    found, gone = [], []
    for occ, key, value in zip(occs, keys, values, strict=True):
        if isinstance(value, dict):
            found.append((key, value))
        else:
            gone.append(occ)
    found.sort(key=lambda kv: str(kv[1].get("fire_time", "")))
    return found, gone


def outbox_summary(entries: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``{"pending": n, "oldest": fire time or None, "sending": n}`` for health reports."""
    items = [v for _, v in entries]
    oldest = min((str(v.get("fire_time")) for v in items), default=None)
    return {
        "pending": len(items),
        "sending": sum(1 for v in items if v.get("state") == "sending"),
        "oldest": oldest,
    }


def _without(index: Any, occs: list[str]) -> tuple[Any, None]:
    drop = set(occs)
    kept = {k: v for k, v in index.items() if k not in drop} if isinstance(index, dict) else {}
    return (kept or MISSING), None


def _log_chat_off(rule_id: str, fire_text: str, target: Target | None) -> None:
    log.info("cron.skipped", rule=rule_id, fire_time=fire_text, target=target_key(target),
             reason="chat off")  # fmt: skip


def _one_slot_commits(store: Store) -> bool:
    """A Redis Cluster commits one hash slot at a time."""
    from tmy.store.redis import RedisClusterStore

    return isinstance(store_of(store), RedisClusterStore)


def daemon_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# -- the service -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Job:
    rule: Any  # tmy.rulebook.model.Rule
    schedule: Schedule
    timing: Timing
    task: asyncio.Task[None] | None = None


def scheduled_rules(rulebook: Any) -> list[Any]:
    return [r for r in rulebook.rules if "schedule" in r.extras]


class Cron:
    """Fires the rulebook's scheduled rules; follows reloads (``update``)."""

    def __init__(
        self,
        engine: Any,
        store: Store,
        send: SendFn | None,
        *,
        default_zone: str = "local",
        on_fire: Callable[[str, str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self._one_slot = _one_slot_commits(store)  # a Redis Cluster: commits one slot at a time
        self.send = send
        self.default_zone = default_zone
        self.on_fire = on_fire  # (rule id, outcome): metrics
        self.daemon = daemon_id()
        self.jobs: dict[str, _Job] = {}
        self._runs: set[asyncio.Future[Any]] = set()
        self._retrying: set[str] = set()  # outbox keys this daemon is resending now
        self._retrier: asyncio.Task[None] | None = None

    def start(self, rulebook: Any) -> None:
        self.update(rulebook)
        if self._retrier is None:
            self._retrier = asyncio.create_task(self._retry_loop(), name="cron outbox")

    def update(self, rulebook: Any) -> None:
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
        self, rule: Any, schedule: Schedule, fire: datetime, target: Target | None, on_time: bool
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
                    entry = await self._run_fenced(lease, occ, rule, schedule, fire, target)
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

    async def _run_fenced(
        self,
        lease: Lease,
        occ: str,
        rule: Any,
        schedule: Schedule,
        fire: datetime,
        target: Target | None,
    ) -> dict[str, Any]:
        """Run one claimed occurrence; its writes, done mark and outbox entry land together.

        The steps run on a buffer (:mod:`tmy.cron_run`); one ``commit`` fenced by
        the claim lease applies their writes, the done mark and (when there is a
        reply to post) the outbox entry in state ``sending`` — or, when the lease
        was lost meanwhile, nothing at all (``LeaseLost``: the new holder runs it).
        """
        fire_text = fire_time_text(fire)
        message = cron_message(schedule, target)
        if target is not None and await self._chat_off(message):
            # not run at all: a rotating tip does not advance while the chat is off
            entry = self._entry(fire_text, target, None, SKIPPED_OFF, None, "not sent")
            await self._commit([(done_key(occ), _mark(entry), DONE_TTL)], lease)
            _log_chat_off(rule.id, fire_text, target)
            self._count(rule.id, "skipped")
            return entry
        # the variables the rule may write stay locked from the run's first read to its
        # commit (name order, after the claim: no deadlock), so a chat run or another
        # occurrence writing them waits instead of being overwritten by this commit
        keys = variable_keys(self.engine.rulebook, rule.scheduled_locks, message)
        async with AsyncExitStack() as stack:
            held = [await stack.enter_async_context(self.store.lock(key)) for key in keys]
            reply, writes = await run_buffered(
                self.engine, rule, message, schedule.input, {"FIRE_TIME": fire_text}
            )
            outcome = "error" if reply.error else "ok"
            item = None
            if target is not None and reply.text and self.send is not None:
                item = _outbox_item(rule.id, target, reply, fire, schedule, lease.token)
            entry = self._entry(fire_text, target, reply.trace_id, outcome, reply.error, "")
            commit: list[Write] = [*writes, (done_key(occ), _mark(entry), DONE_TTL)]
            if item is not None:
                commit.append((outbox_key(occ), item, _outbox_ttl(item)))
            await self._commit(commit, lease, held)
        if target is None:
            sent = "logged only"
        elif not reply.text:
            sent = "nothing to send"
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
        )
        self._count(rule.id, outcome)
        return entry

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

    async def _send_claimed(self, lease: Lease, occ: str, item: dict[str, Any]) -> str:
        """Post an outbox entry (state ``sending``) under its claim; what the history says.

        The lease is checked right before the send: a holder that lost it sends
        nothing and puts the entry back to ``retry`` (it knows it did not send),
        so a live daemon sends it. Nobody ever resends an entry left in
        ``sending``: its holder may have sent it (a holder paused between that
        check and the send still sends once, late) — at most once, never twice.
        """
        assert self.send is not None
        target = Target(item["platform"], item["chat"], item["user"])
        # indexed before the post: if this daemon dies mid-send, the entry stays visible
        # (run.py cron, /healthz) and is given up, logged and counted when its window ends
        item["indexed"] = await self._index_before_send(occ, item)
        try:
            lease.check()
        except LeaseLost:
            await self._unclaim(occ, item)
            raise
        try:
            await self.send(target, item["text"])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an adapter's failure must not stop the scheduler
            return await self._send_failed(lease, occ, item, exc)
        # sent: nothing may resend it, so the entry goes whoever holds the lease now
        try:
            await self.store.delete(outbox_key(occ))
            if item["indexed"]:
                await self._index(occ, item, add=False)
        except StoreError as exc:
            log.warning("cron.outbox_failed", rule=item["rule"], error=str(exc))
        return "ok" if item["attempts"] == 1 else f"ok (attempt {item['attempts']})"

    async def _unclaim(self, occ: str, item: dict[str, Any]) -> None:
        """Put our own ``sending`` entry back to ``retry`` (only if it is still ours)."""

        def back(current: Any) -> tuple[Any, None]:
            if (
                isinstance(current, dict)
                and current.get("state") == "sending"
                and current.get("token") == item["token"]
            ):
                current.update(state="retry", next_at=time.time(), token=None)
            return current, None

        try:
            await self.store.update(outbox_key(occ), back)
        except StoreError as exc:
            log.warning("cron.outbox_failed", rule=item["rule"], error=str(exc))

    async def _index(self, occ: str, item: dict[str, Any], *, add: bool) -> bool:
        """Add ``occ`` to (or drop it from) the outbox index; False when the index is full.

        The index is a hint, written after the entry's own fenced commit: the
        entry is the truth (a missing entry is dropped from the index by the
        retry loop; an entry missing from the index is never retried and expires).
        """

        def change(current: Any) -> tuple[Any, bool]:
            index = current if isinstance(current, dict) else {}
            if not add:
                index.pop(occ, None)
            elif occ not in index:
                if len(index) >= MAX_OUTBOX:
                    return current, False
                index[occ] = item["fire_time"]
            return (index or MISSING), True

        return bool(await self.store.update(OUTBOX_INDEX, change))

    async def _index_before_send(self, occ: str, item: dict[str, Any]) -> bool:
        """Index the entry about to be posted; False (logged) when it cannot be kept."""
        try:
            if await self._index(occ, item, add=True):
                return True
            item["unkept"] = f"the outbox is full: {MAX_OUTBOX} posts wait already"
        except StoreError as exc:
            item["unkept"] = f"the outbox index could not be written: {exc}"
        log.warning("cron.outbox_failed", rule=item["rule"], error=item["unkept"])
        return False

    async def _send_failed(
        self, lease: Lease, occ: str, item: dict[str, Any], exc: Exception
    ) -> str:
        """Keep a failed send in the outbox for a retry with backoff, or give it up."""
        error = str(exc) or type(exc).__name__
        attempt = item["attempts"]
        now = time.time()
        pause = min(RETRY_FIRST * 2 ** (attempt - 1), RETRY_MAX)
        if not item["indexed"]:  # a resend nobody could find: give it up now
            error += f" (not kept for a resend: {item['unkept']})"
        if not item["indexed"] or now + pause > item["deadline"]:
            await self._give_up(lease, occ, item, error)
            if item["indexed"]:
                await self._index(occ, item, add=False)
            return f"error: {error} (gave up after {attempt} attempt{'s' * (attempt > 1)})"
        item.update(state="retry", next_at=now + pause, error=error, token=None)
        await self._commit([(outbox_key(occ), item, _outbox_ttl(item))], lease)
        self._send_failure(item, error, "retry", retry_in_s=pause)
        return f"error: {error} (retrying in {pause:g}s)"

    async def _give_up(self, lease: Lease, occ: str, item: dict[str, Any], error: str) -> None:
        """Drop a send from the outbox (fenced by its claim), logged and counted as given up."""
        await self._commit([(outbox_key(occ), MISSING, None)], lease)
        self._send_failure(item, error, "gave_up")

    def _send_failure(self, item: dict[str, Any], error: str, outcome: str, **more: Any) -> None:
        log.warning(
            "cron.send_failed",
            rule=item["rule"],
            fire_time=item["fire_time"],
            target=f"{item['platform']}:{item['chat']}:{item['user']}",
            attempt=item["attempts"],
            outcome=outcome,
            error=error,
            **more,
        )
        metrics.cron_send_failed(item["rule"], outcome)

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
        switch = getattr(self.engine, "switch", None)
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

    # -- the outbox: failed sends, retried by whichever daemon claims them first ---------------

    async def _retry_loop(self) -> None:
        """Every :data:`RETRY_POLL` s, resend due outbox entries (each under its claim)."""
        while True:
            await asyncio.sleep(RETRY_POLL)
            try:
                entries, gone = await _outbox_scan(self.store)
                if gone:  # sent or given up (or expired): drop the hints in one write
                    await self.store.update(OUTBOX_INDEX, functools.partial(_without, occs=gone))
            except TmyError as exc:
                log.warning("cron.outbox_failed", error=str(exc))
                continue
            now = time.time()
            for key, item in entries:
                if key in self._retrying:
                    continue
                due = item.get("state") == "retry" and (item.get("next_at") or 0) <= now
                stale = item.get("state") == "sending" and now > item.get("deadline", 0)
                if due or stale:
                    self._retrying.add(key)
                    self._spawn(self._retry(key))

    async def _retry(self, key: str) -> None:
        occ = key[len(OUTBOX_PREFIX) :]
        item: dict[str, Any] | None = None
        try:
            async with self.store.lock(done_key(occ), wait=0.0) as lease:
                item = await self.store.get(key)
                if not isinstance(item, dict):
                    return
                entry = await self._retry_claimed(lease, occ, item)
        except LeaseLost as exc:
            if item is not None:
                self._lease_lost(item.get("rule", "?"), item.get("fire_time", "?"), None, exc)
            return
        except StoreError:
            return  # another daemon holds the claim (or the store is down): next poll
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cron.crashed", rule=item.get("rule") if item else None)
            return
        finally:
            self._retrying.discard(key)
        if entry is not None:
            await self._remember(item["rule"], entry)

    async def _retry_claimed(
        self, lease: Lease, occ: str, item: dict[str, Any]
    ) -> dict[str, Any] | None:
        now = time.time()
        target = Target(item["platform"], item["chat"], item["user"])
        entry = self._entry(item["fire_time"], target, item.get("trace_id"), "retry", None, "")
        entry["attempt"] = item["attempts"] + 1
        if item.get("state") == "sending":
            if now <= item["deadline"]:
                return None
            # its sender stopped mid-send (crashed or paused): it may have been sent
            error = "its sender stopped mid-send; not resent (it may have gone out)"
            await self._give_up(lease, occ, item, error)
            entry.update(attempt=item["attempts"], sent=f"unknown: {error}")
            return entry
        if item.get("state") != "retry" or (item.get("next_at") or 0) > now:
            return None
        if now > item["deadline"]:
            await self._give_up(lease, occ, item, item.get("error") or "?")
            entry.update(attempt=item["attempts"], sent=f"error: {item.get('error')} (gave up)")
            return entry
        message = Message("", user="cron", chat=target.chat, platform=target.platform)
        if await self._chat_off(message):
            await self._commit([(outbox_key(occ), MISSING, None)], lease)
            _log_chat_off(item["rule"], item["fire_time"], target)
            entry.update(outcome=SKIPPED_OFF, sent="not sent")
            return entry
        if self.send is None:
            return None
        item.update(state="sending", attempts=item["attempts"] + 1, token=lease.token)
        await self._commit([(outbox_key(occ), item, _outbox_ttl(item))], lease)
        entry["sent"] = await self._send_claimed(lease, occ, item)
        entry["outcome"] = "ok"
        log.info(
            "cron.resent",
            rule=item["rule"],
            fire_time=item["fire_time"],
            target=target_key(target),
            attempt=item["attempts"],
            sent=entry["sent"],
        )
        return entry

    async def outbox_health(self) -> dict[str, Any]:
        """The outbox for ``/healthz``: pending sends and the oldest one's fire time."""
        return outbox_summary(await outbox_entries(self.store))

    def _count(self, rule_id: str, outcome: str) -> None:
        if self.on_fire is not None:
            self.on_fire(rule_id, outcome)


def _append(history: Any, entry: dict[str, Any]) -> tuple[list[Any], None]:
    runs = history if isinstance(history, list) else []
    runs.append(entry)
    return runs[-HISTORY:], None


async def jobs_report(
    rulebook: Any, store: Store, default_zone: str, *, upcoming: int = 3
) -> list[dict[str, Any]]:
    """Every scheduled rule with its next fire times and last runs (``run.py cron``)."""
    out = []
    pending: dict[str, list[dict[str, Any]]] = {}
    for _, item in await outbox_entries(store):
        pending.setdefault(str(item.get("rule")), []).append(_outbox_view(item))
    for rule in scheduled_rules(rulebook):
        schedule: Schedule = rule.extras["schedule"]
        timing = Timing(schedule, default_zone)
        history = await store.get(history_key(rule.id))
        out.append(
            {
                "rule": rule.id,
                "file": f"{rule.file}:{rule.line}",
                "schedule": schedule.describe(),
                "timezone": str(timing.tz),
                "send_to": [target_key(t) for t in schedule.send_to],
                "misfire_grace": schedule.misfire_grace,
                "send_retry": schedule.retry_window,
                "next": [fire_time_text(f) for f in timing.upcoming(upcoming)],
                "last_runs": history if isinstance(history, list) else [],
                "outbox": pending.pop(rule.id, []),
            }
        )
    return out


def _outbox_view(item: dict[str, Any]) -> dict[str, Any]:
    """An outbox entry as ``run.py cron`` shows it (times as ISO text, no lease token)."""

    def when(ts: Any) -> str | None:
        if not isinstance(ts, (int, float)):
            return None
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")

    return {
        "fire_time": item.get("fire_time"),
        "target": f"{item.get('platform')}:{item.get('chat')}:{item.get('user')}",
        "state": item.get("state"),
        "attempts": item.get("attempts"),
        "last_error": item.get("error"),
        "next_attempt": when(item.get("next_at")),
        "gives_up_at": when(item.get("deadline")),
        "trace_id": item.get("trace_id"),
    }


def format_report(jobs: list[dict[str, Any]]) -> str:
    """``jobs_report`` as text for people (CLI and the admin command)."""
    if not jobs:
        return "no scheduled rules"
    lines = []
    for job in jobs:
        targets = ", ".join(job["send_to"]) or "(log only)"
        lines.append(f"{job['rule']}  {job['schedule']} ({job['timezone']}) -> {targets}")
        lines.append(f"  next: {', '.join(job['next'])}")
        for run in job["last_runs"][-5:]:
            verb = f"retry {run['attempt']} of" if "attempt" in run else "ran"
            lines.append(
                f"  {verb} {run['fire_time']} on {run['daemon']} [{run['target']}]: "
                f"{run['outcome']}, sent {run['sent']} (trace {run['trace_id']})"
            )
        if not job["last_runs"]:
            lines.append("  no runs yet")
        for item in job.get("outbox", []):
            lines.append(
                f"  pending send {item['fire_time']} [{item['target']}]: {item['state']}, "
                f"{item['attempts']} attempt(s), last error {item['last_error']}, "
                f"next {item['next_attempt'] or '-'}, gives up {item['gives_up_at']}"
            )
    return "\n".join(lines)


def _fire_time_local(_schedule: Schedule) -> tuple[str, ...]:
    return ("FIRE_TIME",)


EXTENSION = Extension(
    name="cron",
    rule_keys={"schedule": RuleKey(validate_schedule, locals=_fire_time_local)},
    doc="scheduled rules (schedule:), fired once across every daemon sharing the store",
)
"""The ``schedule:`` rule key (with the run local ``FIRE_TIME``). The scheduler itself
(:class:`Cron`) is started by the app when it serves and this extension is installed."""
