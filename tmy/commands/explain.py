"""``explain TEXT [--private|--group] [--mention] [--admin] [--run] [--json]``; in chat too.

Why the bot answers one message the way it does (:mod:`tmy.explain`). On the
CLI (and HTTP ``args``) the message is built from ``--user``/``--chat``/
``--platform`` and the flags, and the full explanation is printed (exit 1 when
the run failed). In chat the text is explained as if the admin who asks sent it
in that chat, always dry, and the answer is the compact form: a chat message
must stay readable on a phone.

``explain --event KIND [--data JSON]`` explains a platform event instead (no
text): which rule listening for it runs, or why none does. The event comes from
the same user, chat and platform (``--user``/``--chat``/``--platform``, or the
chat it is asked in: ``.tmy explain --event member_join [--user U]``);
``--data`` sets its EVENT_DATA (``user`` and ``chat`` are filled in).
"""

from __future__ import annotations

import json
from typing import Any

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.explain import copy_message, explain, message_for
from tmy.hints import did_you_mean
from tmy.message import EVENT_KINDS, Event, Message

_NOT_CHAT = frozenset(("cli", "http"))
_BOTH = "explain a message or an event, not both: give TEXT or --event KIND"


def _event(kind: Any, data: Any, user: str, chat: str) -> Event:
    """The event ``--event KIND --data JSON`` describes, raw name ``explain``."""
    if kind not in EVENT_KINDS:
        raise CommandError(
            f"--event: {kind!r} is not one of {', '.join(EVENT_KINDS)}"
            + did_you_mean(kind, EVENT_KINDS)
        )
    if isinstance(data, str) and data.strip():
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise CommandError(f"--data is not JSON: {exc}") from None
    if data in (None, ""):
        data = {}
    if not isinstance(data, dict):
        raise CommandError('--data is a JSON map of EVENT_DATA, like {"comment": "hi"}')
    # USER and CHAT come from --user/--chat: EVENT_DATA[user] never names someone else
    return Event(str(kind), "explain", {**data, "user": user, "chat": chat})


def _chat_event(who: Message, line: str) -> Message:
    """``--event KIND [--user U] [--data JSON]`` as typed in chat (the rest of the line is
    the JSON after ``--data``): the event as if it happened in this chat."""
    words = line.split(maxsplit=2)
    if len(words) < 2:
        raise CommandError("usage: explain --event KIND [--user U] [--data JSON]")
    kind, rest = words[1], words[2] if len(words) > 2 else ""
    user = who.user
    if rest.startswith("--user"):
        parts = rest.split(maxsplit=2)
        if len(parts) < 2:
            raise CommandError("--user needs a user id")
        user, rest = parts[1], parts[2] if len(parts) > 2 else ""
    data: Any = None
    if rest.startswith("--data"):
        data = rest[len("--data") :].strip()
    elif rest:
        raise CommandError(f"explain --event takes --user and --data, not {rest.split()[0]!r}")
    message = copy_message(who, "")
    if user != who.user:  # another member: none of the asker's rights
        message.user = message.user_name = user
        message.is_admin = message.chat_admin = False
    message.event = _event(kind, data, user, message.chat)
    return message


def _message(inv: Invocation) -> Message:
    a, who = inv.args, inv.who
    text, kind = a.get("text"), a.get("event")
    if inv.front == "chat":
        if not text:
            raise CommandError(inv.commands["explain"].misuse if inv.commands else _BOTH)
        if text.split(maxsplit=1)[0] == "--event":
            return _chat_event(who, text)
        return copy_message(who, text)
    if text and kind:
        raise CommandError(_BOTH)
    if not text and not kind:
        raise CommandError("usage: explain TEXT, or explain --event KIND")
    private = True if a.get("private") else (False if a.get("group") else who.private)
    # the sender's own private chat (the CLI without --chat) becomes chat 'group' with --group
    chat = "" if who.private and private is False else who.chat
    message = message_for(
        text or "",
        user=who.user,
        chat=chat,
        platform=who.platform,
        user_name=who.user_name,
        private=private,
        mention=bool(a.get("mention")),
        admin=bool(a.get("admin")) or who.is_admin,
    )
    if kind:
        message.event = _event(kind, a.get("data"), message.user, message.chat)
    return message


async def _run(inv: Invocation) -> Result:
    ex = await explain(
        inv.app.engine, _message(inv), run=bool(inv.args.get("run")), seed=inv.args.get("seed")
    )
    text = ex.render(compact=inv.compact)
    return Result(text, ex.as_dict(), exit_code=1 if ex.reply.get("error") else 0)


def _switch(name: str, help: str, group: str | None = None) -> Arg:
    return Arg(name, help, flag=True, takes_value=False, group=group, fronts=_NOT_CHAT)


EXPLAIN = Command(
    name="explain",
    help="why the bot answers a message or an event (or not): matches, near misses, each step",
    run=_run,
    usage="TEXT",
    usage_error="usage: explain TEXT (or explain --event KIND)",
    description="explain why the bot answers a message the way it does: matching, near misses, "
    "each step; a dry run unless --run. With --event KIND (no text): which rule takes that "
    "platform event from --user in --chat, or why none does",
    json_help="print the explanation as JSON",
    args=(
        Arg("text", "the message, as a user would send it", rest=True, required=False),
        _switch("private", "a private chat (default)", "where"),
        _switch("group", "a group chat (chat 'group' unless --chat)", "where"),
        _switch("mention", "the message @-mentions the bot (or replies to it)"),
        _switch("admin", "the sender is an admin"),
        _switch("run", "run the message for real (changes the store, sends)"),
        Arg(
            "seed",
            "pin the random draws (the same seed shows the same draws, as a rule test's seed:)",
            flag=True,
            metavar="SEED",
            fronts=_NOT_CHAT,
        ),
        Arg(
            "event",
            "explain a platform event instead of a text: " + ", ".join(EVENT_KINDS),
            flag=True,
            required=False,
            metavar="KIND",
            fronts=_NOT_CHAT,
        ),
        Arg(
            "data",
            'the event\'s EVENT_DATA as JSON, like \'{"comment": "hi"}\' (user and chat are set)',
            flag=True,
            required=False,
            metavar="JSON",
            fronts=_NOT_CHAT,
        ),
    ),
)
