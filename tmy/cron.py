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
the store's lease on ``cron/claim/<rule>/<target>/<fire>`` — on Redis a
``SET NX PX`` with a random token, on SQLite a unique row, both renewed while
the run works — checks the occurrence's done mark, runs it, writes the done
mark and gives the lease back. Another daemon waiting for the same occurrence
gets the lease after that and finds the mark: it skips. If the holder dies,
its lease frees (at once for a dead process of the same machine, else after
the lease's 5 s) and a waiting daemon runs the occurrence, as long as it is
still inside ``misfire_grace``. In that crash case the occurrence may have run
partly (or wholly, if the holder died between its last step and the done
mark): the guarantee is no occurrence skipped and none run twice by live
daemons.

**Coalescing.** A daemon that starts (or falls behind) runs only the latest
occurrence still inside ``misfire_grace``, not one per missed tick.

**History.** Every run is logged (``cron.fired`` / ``cron.done`` with its
trace id) and kept in ``cron/hist/<rule>``: the last :data:`HISTORY` runs with
fire time, daemon, target, trace id, outcome and send result.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger

from tmy.adapters.base import Target
from tmy.errors import RuleError, StoreError, TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message, Reply
from tmy.store.base import MISSING, Store

log = get_logger("tmy.cron")

HISTORY = 20  # runs kept per job
SCHEDULE_KEYS = ("cron", "every", "timezone", "send_to", "input", "misfire_grace")
TARGET_PLATFORMS = ("onebot", "discord", "telegram", "console")  # adapters that can send
DEFAULT_GRACE = 60.0
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

    def describe(self) -> str:
        return f"cron {self.cron!r}" if self.cron else f"every {self.every}s"


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
    grace = raw.get("misfire_grace", DEFAULT_GRACE)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        raise RuleError(f"'misfire_grace:' must be seconds >= 0, got {grace!r}")
    text = raw.get("input", "")
    if not isinstance(text, str):
        raise RuleError(f"'input:' must be text, got {text!r}")
    return Schedule(
        cron=cron,
        every=seconds,
        timezone=zone,
        send_to=tuple(_targets(raw.get("send_to"))),
        input=text,
        misfire_grace=float(grace),
    )


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
        self.send = send
        self.default_zone = default_zone
        self.on_fire = on_fire  # (rule id, outcome): metrics
        self.daemon = daemon_id()
        self.jobs: dict[str, _Job] = {}
        self._runs: set[asyncio.Task[Any]] = set()

    def start(self, rulebook: Any) -> None:
        self.update(rulebook)

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
        self.jobs.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runs:
            await asyncio.wait(list(self._runs), timeout=grace)

    async def _loop(self, job: _Job) -> None:
        timing, grace = job.timing, job.schedule.misfire_grace
        now = datetime.now(timing.tz)
        missed = timing.latest(now, grace)
        if missed is not None:
            self._fire(job, missed)  # coalesced: only the latest missed occurrence
        previous = missed or now
        while True:
            fire = timing.after(previous)
            while (delay := fire.timestamp() - time.time()) > 0:
                await asyncio.sleep(delay)
            late = time.time() - fire.timestamp()
            if late > grace:  # the loop was held up: run only the latest occurrence
                latest = timing.latest(datetime.now(timing.tz), grace)
                log.warning("cron.behind", rule=job.rule.id, late_s=round(late, 3))
                if latest is None:
                    previous = datetime.now(timing.tz)
                    continue
                fire = latest
            self._fire(job, fire)
            previous = fire

    def _fire(self, job: _Job, fire: datetime) -> None:
        targets: tuple[Target | None, ...] = job.schedule.send_to or (None,)
        for target in targets:
            task = asyncio.create_task(self._occurrence(job.rule, job.schedule, fire, target))
            self._runs.add(task)
            task.add_done_callback(self._runs.discard)

    async def _occurrence(
        self, rule: Any, schedule: Schedule, fire: datetime, target: Target | None
    ) -> None:
        """Claim, run, mark done: once across every daemon on the store."""
        stamp = int(fire.timestamp())
        occurrence = f"{rule.id}/{target_key(target)}/{stamp}"
        deadline = fire.timestamp() + schedule.misfire_grace
        try:
            async with self.store.lock(
                f"cron/claim/{occurrence}", wait=max(deadline - time.time(), 0.0)
            ):
                if await self.store.get(f"cron/done/{occurrence}") is not MISSING:
                    return  # another daemon ran it
                if time.time() > deadline:
                    log.warning("cron.missed", rule=rule.id, fire_time=fire_time_text(fire))
                    self._count(rule.id, "skipped")
                    return
                entry = await self.run(rule, schedule, fire, target)
                # kept past every daemon's last chance to try this occurrence
                await self.store.set(
                    f"cron/done/{occurrence}", entry, ttl=schedule.misfire_grace + 120
                )
        except StoreError as exc:
            # the lease stayed taken past the grace window, or the store is down
            log.warning(
                "cron.claim_failed", rule=rule.id, fire_time=fire_time_text(fire), error=str(exc)
            )
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cron.crashed", rule=rule.id)
            return
        try:
            await self.store.update(history_key(rule.id), lambda h: _append(h, entry))
        except TmyError as exc:
            log.warning("cron.history_failed", rule=rule.id, error=str(exc))

    async def run(
        self, rule: Any, schedule: Schedule, fire: datetime, target: Target | None
    ) -> dict[str, Any]:
        """Run one occurrence for one target (no claim) and send its reply; the history entry."""
        message = cron_message(schedule, target)
        fire_text = fire_time_text(fire)
        reply: Reply = await self.engine.run_scheduled(
            rule, message, schedule.input, {"FIRE_TIME": fire_text}
        )
        outcome = "error" if reply.error else "ok"
        sent = "logged only"
        if target is not None and reply.text:
            if self.send is None:
                sent = "error: no adapters running"
            else:
                try:
                    await self.send(target, reply.text)
                    sent = "ok"
                except Exception as exc:  # an adapter's failure must not stop the scheduler
                    sent = f"error: {exc}"
        elif target is not None:
            sent = "nothing to send"
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
        return {
            "fire_time": fire_text,
            "daemon": self.daemon,
            "target": target_key(target),
            "trace_id": reply.trace_id,
            "outcome": outcome,
            "error": reply.error,
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


async def jobs_report(
    rulebook: Any, store: Store, default_zone: str, *, upcoming: int = 3
) -> list[dict[str, Any]]:
    """Every scheduled rule with its next fire times and last runs (``run.py cron``)."""
    out = []
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
                "next": [fire_time_text(f) for f in timing.upcoming(upcoming)],
                "last_runs": history if isinstance(history, list) else [],
            }
        )
    return out


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
            lines.append(
                f"  ran {run['fire_time']} on {run['daemon']} [{run['target']}]: "
                f"{run['outcome']}, sent {run['sent']} (trace {run['trace_id']})"
            )
        if not job["last_runs"]:
            lines.append("  no runs yet")
    return "\n".join(lines)
