"""The LLM answerer's operator commands: ``ctx`` (the request inspector) and ``budget``.

* ``ctx [QUERY]`` (``python run.py ctx [--user U --chat C] [--json] [QUERY]``,
  ``.tmy ctx [QUERY]`` for admins, ``POST /admin/commands/ctx``): the request the
  sender's next message would send in this chat — system prompt, memory recalled
  for QUERY, history, tools — without sending it or changing anything
  (:mod:`tmy.llm.inspect`); without QUERY, their last LLM message again. Exit 1
  when no request would be sent.
* ``budget [USER]`` (``.tmy budget [USER]``): today's LLM token counters of the sender,
  or of USER on the sender's platform.

Both run on the app the front end opened (``Invocation.app``).
"""

from __future__ import annotations

import dataclasses
import json

from tmy.command import Arg, Command, Invocation, Result
from tmy.llm.inspect import inspect, render
from tmy.llm.runtime import STATE_KEY, Runtime
from tmy.llm.tally import Tally
from tmy.llm.usage import today, usage_of
from tmy.message import Message

_OFF_CHAT = frozenset(("cli", "http"))


async def run_ctx(inv: Invocation) -> Result:
    """The inspector's header and request; exit 1 (not an error) when none would be sent."""
    message = dataclasses.replace(inv.who, text=inv.args.get("text") or "")
    seen = await inspect(inv.app, message)
    text = render(seen, as_json=bool(inv.args.get("json")), compact=inv.compact)
    return Result(text, seen.as_dict(), exit_code=0 if seen.request is not None else 1)


CTX = Command(
    name="ctx",
    help="what your next LLM request here would send (system, memory, history, tools)",
    run=run_ctx,
    args=(
        Arg(
            "text",
            "your next message (default: your last LLM message in this chat)",
            required=False,
            rest=True,
            metavar="QUERY",
        ),
        Arg(
            "json",
            "print only the request body",
            flag=True,
            takes_value=False,
            required=False,
            fronts=_OFF_CHAT,
        ),
    ),
    usage="[QUERY]",
    description="print the LLM request your next message (QUERY, or your last LLM message in "
    "this chat) would send — system prompt, memory recall, history, tools — without sending "
    "it or changing anything",
    quiet=True,  # the dry run ends the run early on purpose: its run.failed warning is noise
)


def _tally(inv: Invocation) -> Tally | None:
    """This app's usage not written yet (counted in), when the app has an LLM runtime."""
    engine = getattr(inv.app, "engine", None)
    rt = engine.services.state.get(STATE_KEY) if engine is not None else None
    return rt.tally if isinstance(rt, Runtime) else None


async def run_budget(inv: Invocation) -> Result:
    """Today's counters (user, chat, all) for the sender or for USER on the sender's platform."""
    sender, user = inv.who, inv.args.get("other")
    who = sender if not user else Message("", user=user, platform=sender.platform)
    day = today(inv.app.settings.tz)
    usage = await usage_of(inv.app.store, who, day, _tally(inv))
    text = f"LLM usage on {day} for {who.platform}:{who.user}: " + json.dumps(
        usage, ensure_ascii=False, sort_keys=True
    )
    data = {"day": day, "platform": who.platform, "user": who.user, "usage": usage}
    return Result(text, data)


BUDGET = Command(
    name="budget",
    help="today's LLM token use of a user (default: you), their chat and everyone",
    run=run_budget,
    # not "user": the CLI's --user (who runs it) has that name
    args=(
        Arg("other", "another user on your platform", required=False, rest=True, metavar="USER"),
    ),
    usage="[USER]",
)

COMMANDS = (CTX, BUDGET)
