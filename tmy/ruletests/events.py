"""What a test case sends besides text: ``send_event:``, ``event_data:``, ``approve:``
and ``images:``.

``send_event: member_join`` sends that platform event (no text) from the case's
``user`` in its ``chat`` on its ``platform``, as an adapter would: ``event_data``
becomes ``EVENT_DATA`` (``user`` and ``chat`` are filled in when it does not
set them), ``EVENT_RAW`` is ``test``. ``approve: true|false`` checks the run's
decision on a request event (``Reply.approve``), besides or instead of a reply
expectation. ``images: [URL, …]`` (or one URL) attaches pictures to a ``send:``
message, as a platform would: IMAGES and ATTACHMENTS hold them and an LLM step
with ``vision: true`` sends them (the TESTONLY mock says how many it got).
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


def event_message(message: Message, kind: str, data: dict[str, Any]) -> Message:
    """``message`` (the case's user, chat, platform) carrying the event ``kind``."""
    message.event = Event(kind, "test", {"user": message.user, "chat": message.chat, **data})
    return message


def judge_approve(expected: bool | None, actual: bool | None) -> list[str]:
    """The failure lines when the run's decision is not ``expected`` (none: it matched)."""
    if expected is None or actual is expected:
        return []

    def shown(value: bool | None) -> str:
        return "none (APPROVE was not set)" if value is None else str(value).lower()

    return [f"expected approve: {shown(expected)}, the run decided: {shown(actual)}"]
