"""``reload``: load the rules and plugins again in the running daemon.

Chat answers with one summary line (``reloaded: N rules from F files, plugins
reloaded (12 ms)``); the CLI, which asks the daemon over HTTP, prints
``reloaded: N rules from F files (12.3 ms)`` and each warning on its own line —
both as they always did (a chat answer is short, a terminal shows warnings).
"""

from __future__ import annotations

from typing import Any

from tmy.command import Command, Invocation, Result


def cli_text(data: dict[str, Any]) -> str:
    """The CLI's lines for a reload outcome (``ReloadResult.as_dict()``)."""
    if data.get("ok"):
        lines = [f"reloaded: {data['rules']} rules from {data['files']} files ({data['ms']} ms)"]
        lines += [f"warning: {w}" for w in data.get("warnings", [])]
        return "\n".join(lines)
    errors = data.get("errors") or [data.get("error", "unknown error")]
    return "\n".join(["reload failed, the running rules are unchanged:", *errors])


async def _run(inv: Invocation) -> Result:
    who = inv.who
    origin = "admin" if inv.front == "chat" else inv.front
    result = await inv.app.reload(f"{origin} {who.platform}:{who.user}")
    data = result.as_dict()
    text = result.summary() if inv.compact else cli_text(data)
    return Result(text, data, ok=result.ok)


RELOAD = Command(
    name="reload",
    help="make the running daemon reload its rules",
    run=_run,
    needs="daemon",
)
