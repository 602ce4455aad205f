"""``help``: the commands chat offers, one ``name usage`` each (``.tmy`` alone says it too)."""

from __future__ import annotations

from collections.abc import Mapping

from tmy.command import Command, Invocation, Result


def help_text(commands: Mapping[str, Command]) -> str:
    """``commands: reload | rules [ID] | vars …``: every command chat can run but help."""
    shown = [c.synopsis for c in commands.values() if "chat" in c.fronts and c.name != "help"]
    return "commands: " + " | ".join(shown)


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
)
