"""What ``explain`` found out about one message, and the message it looks at."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmy.command import jsonable
from tmy.explain.render import render
from tmy.message import Event, Message

if TYPE_CHECKING:
    from tmy.rulebook.model import Rule
    from tmy.rulebook.triggers import Match


@dataclass
class Explanation:
    """Everything ``explain`` found out about one message (``as_dict`` is the --json form)."""

    text: str
    normalised: str = ""
    folded: str = ""
    message: dict[str, Any] = field(default_factory=dict)
    matched: str | None = None
    via: str | None = None  # "trigger" | "session" | "event"
    trigger: str | None = None
    reason: str | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)
    near_misses: list[dict[str, Any]] = field(default_factory=list)
    session: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    # random draws: {"uri" (the step; "" when not known), "call", "value"}
    draws: list[dict[str, Any]] = field(default_factory=list)
    writes: dict[str, Any] | None = None
    reply: dict[str, Any] = field(default_factory=lambda: {"text": "", "error": None})
    dry_run: bool = True
    trace_id: str = ""
    notes: list[str] = field(default_factory=list)
    event: dict[str, Any] | None = None  # a platform event explained: {kind, raw, data}
    # not part of the JSON: what the dry run and the rendering need
    match: Match | None = None
    rule: Rule | None = None
    blocked: bool = False
    answers_anyway: bool = False  # blocked, but a reply goes out (a cooldown's reply)
    looked_up: bool = False  # the triggers were consulted (not refused before matching)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "text": self.text,
            "normalised": self.normalised,
            "folded": self.folded,
            "message": self.message,
            "matched": self.matched,
            "ran": self.ran,
            "via": self.via,
            "trigger": self.trigger,
            "reason": self.reason,
            "candidates": self.candidates,
            "near_misses": self.near_misses,
            "session": self.session,
            "steps": self.steps,
            "requests": self.requests,
            "draws": self.draws,
            "writes": self.writes,
            "reply": self.reply,
            "dry_run": self.dry_run,
            "trace_id": self.trace_id,
            "notes": self.notes,
        }
        if self.event is not None:
            out["event"] = self.event
        return jsonable(out)

    @property
    def ran(self) -> bool:
        """Did (or, in a dry run, would) a rule run for this message?"""
        return self.matched is not None and not self.blocked

    @property
    def headline(self) -> str:
        """The one line that says what happens."""
        if self.matched is not None and not self.blocked:
            if self.via == "event" and self.event is not None:
                how = f"for the event {self.event['kind']}"
            elif self.via == "session":
                how = "through its open session (no trigger matched)"
            else:
                how = f"by trigger {self.trigger!r}"
            error = self.reply.get("error")
            tail = f"; the run failed: {error}" if error else ""
            return f"matched rule {self.matched!r} {how}{tail}"
        verb = "no run" if self.answers_anyway else "no reply"
        return f"{verb}: {self.reason or 'no rule matched'}"

    def render(self, *, compact: bool = False) -> str:
        """The text view (``compact``: shorter, for an answer in chat)."""
        return render(self, compact)


def message_for(
    text: str,
    *,
    user: str = "console",
    chat: str = "",
    platform: str = "console",
    user_name: str = "",
    private: bool | None = None,
    mention: bool = False,
    admin: bool = False,
    event: Event | None = None,
) -> Message:
    """The message ``explain`` looks at (``private=False`` without a chat: chat ``group``);
    with ``event``, that platform event instead of a text (``text`` is then ``""``)."""
    if private is False and not chat:
        chat = "group"
    return Message(
        text,
        user=user,
        chat=chat,
        platform=platform,
        user_name=user_name,
        private=private,
        mentions_bot=mention,
        is_admin=admin,
        event=event,
    )


def copy_message(message: Message, text: str) -> Message:
    return Message(
        text,
        user=message.user,
        chat=message.chat,
        platform=message.platform,
        user_name=message.user_name,
        private=message.private,
        is_admin=message.is_admin,
        admin_as=message.admin_as,
        mentions_bot=message.mentions_bot,
        reply_to=message.reply_to,
        self_id=message.self_id,
        message_id=message.message_id,
        attachments=message.attachments,
        event=message.event,
        chat_admin=message.chat_admin,
        api=message.api,
    )
