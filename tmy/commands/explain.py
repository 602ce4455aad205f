"""``explain TEXT [--private|--group] [--mention] [--admin] [--run] [--json]``; in chat too.

Why the bot answers one message the way it does (:mod:`tmy.explain`). On the
CLI (and HTTP ``args``) the message is built from ``--user``/``--chat``/
``--platform`` and the flags, and the full explanation is printed (exit 1 when
the run failed). In chat the text is explained as if the admin who asks sent it
in that chat, always dry, and the answer is the compact form: a chat message
must stay readable on a phone.
"""

from __future__ import annotations

from tmy.command import Arg, Command, Invocation, Result
from tmy.explain import copy_message, explain, message_for
from tmy.message import Message

_NOT_CHAT = frozenset(("cli", "http"))


def _message(inv: Invocation) -> Message:
    a, who = inv.args, inv.who
    if inv.front == "chat":
        return copy_message(who, a["text"])
    private = True if a.get("private") else (False if a.get("group") else who.private)
    # the sender's own private chat (the CLI without --chat) becomes chat 'group' with --group
    chat = "" if who.private and private is False else who.chat
    return message_for(
        a["text"],
        user=who.user,
        chat=chat,
        platform=who.platform,
        user_name=who.user_name,
        private=private,
        mention=bool(a.get("mention")),
        admin=bool(a.get("admin")) or who.is_admin,
    )


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
    help="why the bot answers a message (or not): matches, near misses, each step",
    run=_run,
    usage="TEXT",
    description="explain why the bot answers a message the way it does: matching, near misses, "
    "each step; a dry run unless --run",
    json_help="print the explanation as JSON",
    chat_admin=True,
    args=(
        Arg("text", "the message, as a user would send it", rest=True),
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
    ),
)
