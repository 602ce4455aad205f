"""A rule's ``schedule:``: validated at load time, and its fire times in its time zone.

Fire times come from the schedule alone (a five-field ``cron`` line through
APScheduler's :class:`~apscheduler.triggers.cron.CronTrigger`, or ``every`` N
seconds aligned to the Unix epoch), never from a daemon's own clock ticks, so
every daemon sharing a store computes the same ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from apscheduler.triggers.cron import CronTrigger

from tmy.config.timezone import concrete, zone_of
from tmy.errors import RuleError
from tmy.message import Target, adapter_of

SCHEDULE_KEYS = ("cron", "every", "timezone", "send_to", "input", "misfire_grace", "send_retry")
# adapters that can send (``satori:<platform>`` goes through satori: tmy.message.adapter_of)
TARGET_PLATFORMS = (
    "onebot", "discord", "telegram", "qq", "feishu", "slack", "matrix", "satori", "console",
)  # fmt: skip
DEFAULT_GRACE = 60.0
MAX_GRACE = 86_400.0
"""The largest ``misfire_grace`` / ``send_retry`` (a day): done marks live this long (+2 min),
so no grace a hot reload may set can make an occurrence that already ran runnable again."""
MAX_CATCH_UP = 100_000  # occurrences looked at when finding the latest missed one
_EVERY = re.compile(r"\s*(\d+)\s*([smhd])\s*")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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
        if adapter_of(platform) not in TARGET_PLATFORMS:
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
        problem = target_problem(platform, chat)
        if problem is not None:
            raise RuleError(problem)
        yield Target(platform, chat, user)


# what the OneBot adapter can post to (tmy/adapters/onebot: group or private, then an id)
_ONEBOT_CHAT = re.compile(r"(group|private):[A-Za-z0-9_.:@-]{1,64}")
_BRIDGED = re.compile(r"satori:[A-Za-z0-9_.-]{1,64}")  # satori:<the platform behind the server>
_QQ_CHAT = re.compile(r"(group|private|channel|dm|guild):[A-Za-z0-9_.-]{1,128}")


def target_problem(platform: str, chat: str) -> str | None:
    """What is wrong with posting to ``chat`` on ``platform`` (the adapters that can refuse
    a target's shape on every send: caught at ``check`` instead), or None."""
    if adapter_of(platform) == "satori" and not _BRIDGED.fullmatch(platform):
        return (
            f"a satori target names the platform behind the server, satori:<platform> "
            f"(satori:qq, satori:discord …, as PLATFORM shows it), got {platform!r}"
        )
    if platform == "onebot" and chat and not _ONEBOT_CHAT.fullmatch(chat):
        guess = f"; did you mean 'group:{chat}'?" if chat.isdigit() else ""
        return (
            f"a onebot chat is 'group:<id>' or 'private:<id>' (the CHAT a QQ message "
            f"carries), got {chat!r}{guess}"
        )
    if platform == "qq" and chat and not _QQ_CHAT.fullmatch(chat):
        return (
            "a qq chat is group:<group_openid>, private:<user_openid>, channel:<channel id>, "
            f"dm:<guild id> or guild:<guild id> (the CHAT a QQ message carries), got {chat!r}"
        )
    return None


def resolve_timezone(name: str | None) -> tzinfo:
    """An IANA zone, or the machine's own for ``local``/empty (the config's one resolver)."""
    return concrete(zone_of(name, RuleError))


# -- fire times ------------------------------------------------------------------------------


class Timing:
    """The fire times of one schedule in its time zone: the rule's own ``timezone:``,
    else ``default_zone`` (the config's, ``settings.tz``; None: the machine's)."""

    def __init__(self, schedule: Schedule, default_zone: tzinfo | None) -> None:
        self.schedule = schedule
        own = zone_of(schedule.timezone, RuleError) if schedule.timezone else None
        self.tz = concrete(own if schedule.timezone else default_zone)
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
