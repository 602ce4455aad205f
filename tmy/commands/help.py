"""``help``: the commands chat offers, one ``name usage`` each (``.tmy`` alone says it too)."""

from __future__ import annotations

from collections.abc import Mapping

from tmy.command import Command, Invocation, Result

# The order ``.tmy help`` has always listed these in (admins know the line by sight);
# commands added since, and those of installed extensions, follow in registry order.
_KNOWN_ORDER = (
    "reload", "rules", "vars", "on", "off", "cron", "budget", "trace", "explain", "memory",
    "dialog",
)  # fmt: skip


def help_text(commands: Mapping[str, Command]) -> str:
    """``commands: reload | rules [ID] | vars …``: every command chat can run but help."""
    chat = [c for c in commands.values() if "chat" in c.fronts and c.name != "help"]
    rank = {name: i for i, name in enumerate(_KNOWN_ORDER)}
    chat.sort(key=lambda c: rank.get(c.name, len(rank)))  # stable: the rest keep their order
    return "commands: " + " | ".join(c.synopsis for c in chat)


async def _run(inv: Invocation) -> Result:
    data = {
        name: {"help": c.help, "usage": c.synopsis, "fronts": sorted(c.fronts)}
        for name, c in inv.commands.items()
    }
    return Result(help_text(inv.commands), data)


HELP = Command(
    name="help",
    help="the operator commands and their usage",
    run=_run,
    needs="settings",
    chat_admin=True,
)
