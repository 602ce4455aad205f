"""Long-term memory's operator commands: ``memory`` and ``dialog``.

The CLI form (``python run.py memory list|del|export``) and the chat form
(``.tmy memory …``) of ``memory`` differ since they were written, and both
stay as they are: each form has its own arguments (``Arg.fronts``) and
:func:`run_memory` branches on ``Invocation.compact`` (chat and HTTP ``argv``:
the chat form; the CLI and HTTP ``args``: the CLI form):

* CLI ``memory list`` — the entries the ``--user`` / ``--chat`` / ``--platform``
  identity can see (its own, its chat's, the global ones); ``--all`` every entry
  in the store; ``--dialog`` that user's dialogue summaries instead; ``--json`` as
  JSON. ``memory del ID`` — delete one entry for good (exit 1 when there is none).
  ``memory export`` — every memory key (entries, summaries, open conversations)
  as one JSON object (``--out FILE`` writes a file).
* chat ``memory`` — the sender's own entries, this chat's and the global ones;
  ``memory USER`` (or ``PLATFORM:USER``) — that user's own entries;
  ``memory del ID`` — delete an entry for good (any owner, any scope).

``dialog`` has one form everywhere: ``dialog [USER]`` lists the sender's (or
USER's) dialogue summaries, ``dialog clear [USER]`` deletes every summary (or
one user's).
"""

from __future__ import annotations

from datetime import tzinfo
from pathlib import Path

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.memory import dialog, manage

USAGE = "usage: memory [USER] | memory del ID | dialog [USER] | dialog clear [USER]"
ACTIONS = ("list", "del", "export")
_NOT_CHAT = frozenset(("cli", "http"))
_CLI = frozenset(("cli",))
_CHAT = frozenset(("chat",))


def _tz(inv: Invocation) -> tzinfo | None:
    return inv.app.settings.tz


async def _delete(inv: Invocation, entry_id: str) -> Result:
    removed = await manage.delete(inv.app.store, entry_id, inv.who)
    if removed is None:
        return Result(f"no memory entry {entry_id!r}", None, ok=False)
    return Result(f"deleted {removed['id']}: {removed.get('text')}", removed)


async def _memory_chat(inv: Invocation) -> Result:
    """``memory [USER]`` / ``memory del ID`` as typed in chat."""
    words = (inv.args.get("words") or "").split()
    if words and words[0] == "del":
        if len(words) != 2:
            raise CommandError("usage: memory del ID")
        return await _delete(inv, words[1])
    if len(words) > 1:
        raise CommandError(USAGE)
    pairs = await manage.visible_entries(inv.app.store, inv.who, words[0] if words else None)
    entries = [e for _, e in pairs]
    return Result(manage.format_entries(pairs, _tz(inv), manage.SHOW_MAX), entries)


async def _memory_cli(inv: Invocation) -> Result:
    """``memory list|del|export [ID] [--all] [--dialog] [--json] [--out FILE]``."""
    args, store = inv.args, inv.app.store
    action = args["action"]
    if action not in ACTIONS:
        raise CommandError(f"memory takes {', '.join(ACTIONS)}, not {action!r}")
    if action == "del":
        if not args.get("id"):
            return Result("memory del needs an entry id", None, ok=False, exit_code=2)
        return await _delete(inv, args["id"])
    if action == "export":
        exported = await manage.export(store)
        text = manage.dumps(exported)
        if args.get("out"):
            Path(args["out"]).write_text(text + "\n", encoding="utf-8")
            text = ""
        return Result(text, exported)
    if args.get("dialog"):
        items = await manage.summaries(store, inv.who.platform, inv.who.user)
        if args.get("json"):
            return Result(manage.dumps(items), items)
        return Result(manage.format_summaries(items, _tz(inv)), items)
    if args.get("all"):
        pairs = await manage.all_entries(store)
    else:
        pairs = await manage.visible_entries(store, inv.who)
    entries = [e for _, e in pairs]
    shown = manage.dumps(entries) if args.get("json") else manage.format_entries(pairs, _tz(inv))
    return Result(shown, entries)


async def run_memory(inv: Invocation) -> Result:
    """The chat form or the CLI form (see the module docstring)."""
    return await (_memory_chat(inv) if inv.compact else _memory_cli(inv))


def _switch(name: str, help: str) -> Arg:
    return Arg(name, help, flag=True, takes_value=False, required=False, fronts=_NOT_CHAT)


MEMORY = Command(
    name="memory",
    help="long-term memory: list, delete or export entries (list --dialog: summaries)",
    run=run_memory,
    args=(
        Arg("action", choices=ACTIONS, fronts=_NOT_CHAT),
        Arg("id", "for del: the entry id", required=False, fronts=_NOT_CHAT),
        Arg("words", "USER, or del ID", required=False, rest=True, fronts=_CHAT),
        _switch("all", "list: every entry in the store"),
        _switch("dialog", "list: dialogue summaries"),
        _switch("json", "list: print JSON"),
        Arg(
            "out",
            "export: write to this file instead of stdout",
            flag=True,
            required=False,
            fronts=_CLI,
        ),
    ),
    usage="[USER] | memory del ID",  # `.tmy help` lists "memory [USER] | memory del ID"
    description="list, delete or export long-term memory entries and dialogue summaries",
)


async def run_dialog(inv: Invocation) -> Result:
    """``dialog [USER]`` lists dialogue summaries; ``dialog clear [USER]`` deletes them."""
    store, who = inv.app.store, inv.who
    first, rest = inv.args.get("target"), inv.args.get("other")
    if first == "clear":
        if rest and len(rest.split()) > 1:
            raise CommandError("usage: dialog clear [USER]")
        if rest:
            platform, user = manage.split_user(rest.strip(), who.platform)
            gone = await dialog.clear(store, platform, user)
            data = {"cleared": gone, "platform": platform, "user": user}
            return Result(f"dialogue summaries of {platform}:{user} cleared ({gone} key)", data)
        gone = await dialog.clear(store, who.platform, None)
        data = {"cleared": gone, "platform": who.platform, "user": None}
        return Result(f"every dialogue summary cleared ({gone} users)", data)
    if rest:
        raise CommandError(USAGE)
    platform, user = manage.split_user(first, who.platform) if first else (who.platform, who.user)
    items = await manage.summaries(store, platform, user)
    limit = manage.SHOW_MAX if inv.compact else 0
    text = f"dialogue summaries of {platform}:{user}:\n" + manage.format_summaries(
        items, _tz(inv), limit
    )
    return Result(text, {"platform": platform, "user": user, "summaries": items})


DIALOG = Command(
    name="dialog",
    help="dialogue summaries of a user (default: you); clear deletes them",
    run=run_dialog,
    args=(
        Arg("target", "clear, or a USER (default: you)", required=False, metavar="USER|clear"),
        # not "user": the CLI's --user (who runs it) has that name
        Arg("other", "for clear: only this USER's", required=False, rest=True, metavar="USER"),
    ),
    usage="[USER|clear]",
)

COMMANDS = (MEMORY, DIALOG)
