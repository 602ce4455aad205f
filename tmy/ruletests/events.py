"""What a test case sends besides text: ``send_event:``, ``event_data:``, ``approve:``,
``images:`` and ``reply_to:``.

``send_event: member_join`` sends that platform event (no text) from the case's
``user`` in its ``chat`` on its ``platform``, as an adapter would: ``event_data``
becomes ``EVENT_DATA`` (``user`` and ``chat`` are filled in when it does not
set them), ``EVENT_RAW`` is ``test``. ``approve: true|false`` checks the run's
decision on a request event (``Reply.approve``), besides or instead of a reply
expectation. ``images: [URL, …]`` (or one URL) attaches pictures to a ``send:``
message, as a platform would: IMAGES and ATTACHMENTS hold them and an LLM step
with ``vision: true`` sends them (the TESTONLY mock says how many it got).
``reply_to: {text, user, id}`` (or just the quoted text) makes the message a reply
to that one, as if the platform had it: REPLY_TO holds the map.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tmy.hints import did_you_mean
from tmy.message import EVENT_KINDS, Attachment, Event, Message

Report = Callable[[str, str, int], None]  # error(message, file, line)


def event_kind(value: Any, report: Report, file: str, line: int) -> str | None:
    """``send_event:``'s kind, or None (reported) when it names no event."""
    if value not in EVENT_KINDS:
        report(
            f"'send_event: {value}' is not an event{did_you_mean(value, EVENT_KINDS)}; "
            f"the events are {', '.join(EVENT_KINDS)}",
            file,
            line,
        )
        return None
    return str(value)


def event_data(value: Any, has_event: bool, report: Report, file: str, line: int) -> dict[str, Any]:
    """``event_data:`` — a map, and only beside ``send_event:``."""
    if value is None:
        return {}
    if not has_event:
        report("'event_data' goes with 'send_event: <kind>'", file, line)
        return {}
    if not isinstance(value, dict):
        report("'event_data' must be a map of EVENT_DATA fields: {comment: hi}", file, line)
        return {}
    return dict(value)


def approve(value: Any, report: Report, file: str, line: int) -> bool | None:
    """``approve:`` — true or false (the request must be accepted / declined)."""
    if value is None or isinstance(value, bool):
        return value
    report(f"'approve' is true or false (the run's APPROVE), got {value!r}", file, line)
    return None


def images(value: Any, report: Report, file: str, line: int) -> tuple[Attachment, ...]:
    """``images:`` — one picture URL or a list of them (http(s) or data: URLs)."""
    if value is None:
        return ()
    urls = [value] if isinstance(value, str) else value
    if not isinstance(urls, list) or not all(
        isinstance(u, str) and u.startswith(("http://", "https://", "data:image/")) for u in urls
    ):
        report(
            "'images' is a picture URL or a list of them "
            "(http(s):// or data:image/…), e.g. images: [https://example.com/cat.png]",
            file,
            line,
        )
        return ()
    return tuple(Attachment("image", url=u) for u in urls)


class QuotedMessage:
    """The platform a rule test plays for a quoting message: it knows the quoted one."""

    def __init__(self, quoted: dict[str, str]) -> None:
        self._quoted = quoted

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        return dict(self._quoted)

    async def media_source(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        return attachment.url, {}


def reply_to(value: Any, report: Report, file: str, line: int) -> dict[str, str] | None:
    """``reply_to:`` — the quoted message: its text, or a map of text, user and id."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"text": value}
    if not isinstance(value, dict) or not set(value) <= {"text", "user", "id"}:
        report(
            "'reply_to' is the quoted message's text, or a map with text, user and id: "
            "{text: lunch at noon, user: ann}",
            file,
            line,
        )
        return None
    quoted = {"text": "", "user": "", "id": "quoted-1"}
    quoted.update({k: str(v) for k, v in value.items() if v is not None})
    return quoted


def quoting(message: Message, quoted: dict[str, str] | None) -> Message:
    """``message`` replying to ``quoted`` (None: to nothing)."""
    if quoted is not None:
        message.reply_to = quoted["id"]
        message.api = QuotedMessage(quoted)
    return message


def event_message(message: Message, kind: str, data: dict[str, Any]) -> Message:
    """``message`` (the case's user, chat, platform) carrying the event ``kind``."""
    # USER and CHAT are the case's: EVENT_DATA[user] never says someone else
    message.event = Event(kind, "test", {**data, "user": message.user, "chat": message.chat})
    return message


def judge_approve(expected: bool | None, actual: bool | None) -> list[str]:
    """The failure lines when the run's decision is not ``expected`` (none: it matched)."""
    if expected is None or actual is expected:
        return []

    def shown(value: bool | None) -> str:
        return "none (APPROVE was not set)" if value is None else str(value).lower()

    return [f"expected approve: {shown(expected)}, the run decided: {shown(actual)}"]
