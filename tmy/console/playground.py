"""The console's Playground: send a message as anyone, anywhere, and see why it got the
answer it got.

A form (fields ``text``, ``user``, ``user_name``, ``chat``, ``platform``, ``private``,
``mention``, ``admin``, ``run``; prefilled from the query string, so the live page can link
a run here to replay it) is explained by :func:`tmy.explain.explain`: every rule whose
trigger matched and why the winner won, near misses, each step with its input, result,
error and time, the reply. A dry run by default — the store is read through an overlay
and nothing is written, HTTP and LLM requests are recorded, not sent — exactly
``explain``'s. With ``run`` checked the message is handled for real (``explain --run``):
the store changes and steps send, so it is a change: admin only, logged (every POST
carries the CSRF token: the guard checks it). The reply is shown here, never posted to a
chat.

Conversation mode (``conversation``) keeps the sender and the chat between sends and
clears the text, with the exchange so far carried in a hidden field; run for real, a
session or a cooldown the first message opens is what the next one meets (a dry run
stores nothing, so each dry send starts afresh).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from tmy.console.web import ConsoleRequest, Refused, Route, changed, page
from tmy.explain import explain, message_for
from tmy.logs import preview
from tmy.message import EVENT_KINDS, Event

FIELDS = ("text", "user", "user_name", "chat", "platform", "private", "mention", "admin", "run")
HISTORY = 20  # exchanges a conversation keeps
HISTORY_CHARS = 500  # characters of each text and reply it keeps
_TRUE = frozenset(("1", "on", "true", "yes", "checked"))


@dataclass
class Form:
    """What the playground sends, as the form holds it."""

    text: str = ""
    user: str = "console"
    user_name: str = ""
    chat: str = ""
    platform: str = "console"
    private: bool = True
    mention: bool = False
    admin: bool = False
    run: bool = False
    conversation: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    event: str = ""  # a platform event (tmy.message.EVENT_KINDS) instead of a text
    data: str = ""  # the event's EVENT_DATA, JSON (user and chat are filled in)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def form_from(values: Mapping[str, Any], *, submitted: bool = False) -> Form:
    """The form from a query string or a POST. A checkbox left out of a submitted HTML form
    (``submitted``, or the form's hidden ``sent`` field) is off; elsewhere (a replay link, a
    script) ``private`` left out follows the chat: private when it is "" or
    ``private:<id>``, as a platform's message is."""
    submitted = submitted or "sent" in values
    chat = str(values.get("chat", "")).strip()
    if "private" in values or submitted:
        private = _flag(values.get("private", ""))
    else:
        private = chat == "" or chat.startswith("private:")
    return Form(
        text=str(values.get("text", "")),
        user=str(values.get("user", "")).strip() or "console",
        user_name=str(values.get("user_name", "")).strip(),
        chat=chat,
        platform=str(values.get("platform", "")).strip() or "console",
        private=private,
        mention=_flag(values.get("mention", "")),
        admin=_flag(values.get("admin", "")),
        run=_flag(values.get("run", "")),
        conversation=_flag(values.get("conversation", "")),
        history=history_from(values.get("history", "")),
        event=str(values.get("event", "")).strip(),
        data=str(values.get("data", "")),
    )


def history_from(raw: Any) -> list[dict[str, Any]]:
    """The exchanges so far, from the hidden field (JSON sent back by the browser: only
    well-formed entries are kept, cut to size; everything is escaped when shown)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else []
        except ValueError:
            return []
    if not isinstance(raw, list):
        return []
    out = []
    for entry in raw[-HISTORY:]:
        if not isinstance(entry, dict):
            continue
        out.append({
            "text": preview(str(entry.get("text", "")), HISTORY_CHARS),
            "reply": preview(str(entry.get("reply", "")), HISTORY_CHARS),
            "rule": str(entry["rule"]) if entry.get("rule") else None,
            "error": preview(str(entry["error"]), HISTORY_CHARS) if entry.get("error") else None,
            "run": bool(entry.get("run")),
        })  # fmt: skip
    return out


class FormError(ValueError):
    """The form cannot be sent as it is (the words go back to the operator)."""


def event_of(form: Form, user: str, chat: str) -> Event | None:
    """The platform event the form describes (None: a text message), as ``explain --event
    KIND --data JSON`` builds it: EVENT_DATA's ``user`` and ``chat`` are the sender's."""
    if not form.event:
        return None
    if form.event not in EVENT_KINDS:
        raise FormError(f"event {form.event!r} is not one of {', '.join(EVENT_KINDS)}")
    try:
        data = json.loads(form.data) if form.data.strip() else {}
    except ValueError as exc:
        raise FormError(f"the event data is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FormError('the event data is a JSON map, like {"comment": "hi"}')
    return Event(form.event, "console", {**data, "user": user, "chat": chat})


async def play(engine: Any, form: Form) -> dict[str, Any]:
    """``explain`` of the form's message or event (dry unless ``form.run``): its ``--json``
    data, with the headline, where the rule that ran is written and the text view
    (FormError for a bad event)."""
    message = message_for(
        form.text,
        user=form.user,
        chat=form.chat,
        platform=form.platform,
        user_name=form.user_name,
        private=form.private,
        mention=form.mention,
        admin=form.admin,
    )
    message.event = event_of(form, message.user, message.chat)
    if message.event is not None:
        message.text = ""
    ex = await explain(engine, message, run=form.run)
    data = ex.as_dict()
    data["headline"] = ex.headline
    data["rule_at"] = f"{ex.rule.file}:{ex.rule.line}" if ex.rule is not None else None
    data["rendered"] = ex.render()
    return data


def after(form: Form, result: dict[str, Any]) -> Form:
    """The form shown after a send: in conversation mode the same sender and chat, the text
    cleared and the exchange added to the history; else the form as sent."""
    if not form.conversation:
        return form
    entry = {
        "text": form.text or f"(event {form.event})",
        "reply": result["reply"].get("text") or "",
        "rule": result.get("matched"),
        "error": result["reply"].get("error"),
        "run": form.run,
    }
    kept = history_from([*form.history, entry])
    return Form(**{**form.as_dict(), "text": "", "history": kept})


# -- the pages -----------------------------------------------------------------------------------


def _data(form: Form, result: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    return {
        "form": form.as_dict(),
        "result": result,
        "error": error,
        "history": form.history,
        "fields": list(FIELDS),
        "event_kinds": list(EVENT_KINDS),
    }


async def playground_page(req: ConsoleRequest) -> web.StreamResponse:
    """GET playground[?text=…&user=…&chat=…&platform=…]: the form, prefilled."""
    query = req.request.query
    given = any(k in query for k in (*FIELDS, "conversation", "event"))
    form = form_from(query) if given else Form()
    form.run = False  # a link never runs for real: the operator ticks it
    return await page(req, "playground.html", _data(form, None, None), title="Playground")


async def playground_send(req: ConsoleRequest) -> web.StreamResponse:
    """POST playground: explain the message (dry, or for real with ``run``)."""
    values = await req.form()
    form = form_from(values, submitted="sent" in values)
    if form.run and not req.is_admin:  # a change: the guard checked the CSRF token already
        raise Refused(403, "run for real changes the store and sends: log in as admin")
    result, error, status = None, None, 200
    try:
        if not form.text.strip() and not form.event:
            raise FormError("type a message to send (or choose an event)")
        event_of(form, form.user, form.chat)  # a bad event is refused before anything runs
        if form.run:
            what = f"event {form.event}" if form.event else preview(form.text, 80)
            changed(req, "playground.run", user=form.user, chat=form.chat,
                    platform=form.platform, text=what)  # fmt: skip
        result = await play(req.app.engine, form)
    except FormError as exc:
        error, status = str(exc), 400
    shown = after(form, result) if result is not None else form
    data = _data(shown, result, error)
    return await page(req, "playground.html", data, title="Playground", status=status)


ROUTES: tuple[Route, ...] = (
    Route("GET", "playground", playground_page),
    Route("POST", "playground", playground_send),
)
