"""A rules file's test case, validated: what it sends, as whom, and what it expects.

A case sends a message (``send:``), fires a scheduled rule (``fire:``) or sends a
platform event (``send_event: member_join`` with an optional ``event_data: {…}``,
from the case's ``user`` in its ``chat``); it expects a reply (``expect``,
``expect_re``, ``expect_error``, ``expect_no_reply``) and/or, for a request
event, a decision (``approve: true|false``, checked against ``Reply.approve``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from typing import Any

from tmy.config.timezone import zone_of
from tmy.errors import ConfigError
from tmy.message import Attachment

CASE_KEYS = (
    "name",
    "send",
    "fire",
    "send_event",
    "event_data",
    "user",
    "user_name",
    "chat",
    "platform",
    "private",
    "mention",
    "admin",
    "images",
    "reply_to",
    "vars",
    "now",
    "seed",
    "http",
    "expect",
    "expect_re",
    "expect_error",
    "expect_no_reply",
    "approve",
)
EXPECT_KEYS = ("expect", "expect_re", "expect_error", "expect_no_reply")
HTTP_KEYS = ("status", "json", "body", "text", "headers", "method")
DEFAULT_USER = "tester"
DEFAULT_PLATFORM = "test"
PREVIEW = 100  # characters of a reply shown on a PASS line


@dataclass(frozen=True)
class Canned:
    """One canned HTTP response: for requests whose URL matches ``pattern`` (a glob)."""

    pattern: str
    method: str | None
    status: int
    content: bytes
    headers: tuple[tuple[str, str], ...]

    def matches(self, method: str, urls: tuple[str, ...]) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.pattern in urls:
            return True
        return any(fnmatch.fnmatchcase(u, self.pattern) for u in urls)


@dataclass
class Case:
    """A validated test case."""

    file: str
    line: int
    name: str
    send: str | None
    fire: str | None  # a scheduled rule's id: run it as its schedule would
    user: str
    user_name: str
    chat: str
    platform: str
    private: bool | None
    mention: bool
    admin: bool
    vars: dict[str, Any]
    now: str | None
    http: tuple[Canned, ...]
    kind: str  # one of EXPECT_KEYS
    expected: Any
    seed: int | str | None = None  # pins random draws (the case's, else the file's seed:)
    event: str | None = None  # send_event: a platform event's kind (tmy.message.EVENT_KINDS)
    event_data: dict[str, Any] = field(default_factory=dict)  # its EVENT_DATA (+ user, chat)
    approve: bool | None = None  # the decision (Reply.approve) the run must take
    images: tuple[Attachment, ...] = ()  # pictures the sent message carries (IMAGES)
    reply_to: dict[str, str] | None = None  # the message it quotes (REPLY_TO)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def label(self) -> str:
        if self.fire is not None:
            said = f"fire {self.fire}"
        elif self.event is not None:
            said = f"event {self.event}"
        else:
            said = one_line(self.send or "")
        who = f" (user {self.user})" if self.user != DEFAULT_USER else ""
        return f"{self.name}: {said}{who}" if self.name else f"{said}{who}"

    def selected_by(self, pattern: str | None) -> bool:
        if not pattern:
            return True
        return pattern in self.name or pattern in (self.send or self.fire or self.event or "")


@dataclass
class Outcome:
    """What one case did and whether that was what it expected."""

    case: Case
    ok: bool
    actual: str
    error: str | None
    rule: str | None
    detail: list[str] = field(default_factory=list)  # lines explaining a failure

    def as_dict(self) -> dict[str, Any]:
        c = self.case
        out = {
            "file": c.file,
            "line": c.line,
            "name": c.name,
            "send": c.send if c.fire is None and c.event is None else None,
            "fire": c.fire,
            "ok": self.ok,
            "expectation": c.kind,
            "expected": c.expected,
            "actual": self.actual,
            "error": self.error,
            "rule": self.rule,
            "seed": c.seed,
            "detail": self.detail,
        }
        if c.event is not None:
            out["send_event"] = c.event
        if c.approve is not None:
            out["approve"] = c.approve
        return out


def zone(name: str) -> tzinfo | None:
    """The reading of a timezone setting (None: local time, or a bad name — the app
    refuses that with its own clear error when the cases run)."""
    try:
        return zone_of(name)
    except ConfigError:
        return None


def normalise_now(value: Any, tz: tzinfo | None) -> str:
    """``now:`` as NOW reads: ISO 8601 to the second, with an offset (the config's
    timezone when the test gives none). ValueError when it is no date/time."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and value.strip():
        moment = datetime.fromisoformat(value.strip())
    else:
        raise ValueError(f"{value!r} is not a date and time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz) if tz is not None else moment.astimezone()
    return moment.isoformat(timespec="seconds")


def one_line(text: str, limit: int = PREVIEW) -> str:
    """``text`` on one line (⏎ for a newline), cut at ``limit`` characters."""
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"
