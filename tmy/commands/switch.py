"""``on`` / ``off``: the bot answers (or stays silent) in one chat, for every daemon on the store.

In chat it acts on the chat it is said in; on the CLI and over HTTP on the chat
``--chat`` / ``--platform`` (or the body's ``chat``/``platform``) name.
"""

from __future__ import annotations

from tmy.command import Command, Invocation, Result
from tmy.logs import get_logger

log = get_logger("tmy.admin")


def _switch(off: bool) -> Command:
    state = "off" if off else "on"

    async def run(inv: Invocation) -> Result:
        who = inv.who
        await inv.app.switch.set(who, off)
        log.info("chat.switched", chat=who.chat, platform=who.platform, state=state)
        prefix = inv.settings.admin_prefix
        text = (
            f"the bot is off in this chat ({who.chat}); '{prefix} on' turns it back on"
            if off
            else f"the bot is on in this chat ({who.chat})"
        )
        return Result(text, {"chat": who.chat, "platform": who.platform, "off": off})

    what = "stays silent" if off else "answers again"
    return Command(
        name=state,
        help=f"the bot {what} in this chat (--chat, --platform)",
        run=run,
        chat_admin=True,  # a chat's own admins may silence the bot there
    )


ON = _switch(False)
OFF = _switch(True)
