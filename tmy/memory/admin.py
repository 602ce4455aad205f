"""Admin chat commands ``.tmy memory [USER]``, ``.tmy memory del ID``, ``.tmy dialog [USER|clear]``.

* ``memory`` — the sender's own entries, this chat's and the global ones;
  ``memory USER`` (or ``PLATFORM:USER``) — that user's own entries;
* ``memory del ID`` — delete an entry for good (any owner, any scope);
* ``dialog`` — the sender's dialogue summaries; ``dialog USER`` — that user's;
* ``dialog clear`` — delete every dialogue summary; ``dialog clear USER`` — one user's.
"""

from __future__ import annotations

from typing import Any

from tmy.errors import TmyError
from tmy.memory import dialog, manage
from tmy.message import Message

USAGE = "usage: memory [USER] | memory del ID | dialog [USER] | dialog clear [USER]"


class MemoryCommandError(TmyError):
    """A memory command used wrongly (the text goes back to the admin)."""


async def command(app: Any, message: Message, name: str, rest: str) -> str:
    store = app.store
    tz = getattr(app.engine, "tz", None)
    words = rest.split()
    if name == "memory":
        if words and words[0] == "del":
            if len(words) != 2:
                raise MemoryCommandError("usage: memory del ID")
            removed = await manage.delete(store, words[1], message)
            if removed is None:
                return f"no memory entry {words[1]!r}"
            return f"deleted {removed['id']}: {removed.get('text')}"
        if len(words) > 1:
            raise MemoryCommandError(USAGE)
        pairs = await manage.visible_entries(store, message, words[0] if words else None)
        return manage.format_entries(pairs, tz, manage.SHOW_MAX)
    if words and words[0] == "clear":
        if len(words) > 2:
            raise MemoryCommandError("usage: dialog clear [USER]")
        if len(words) == 2:
            platform, user = manage.split_user(words[1], message.platform)
            gone = await dialog.clear(store, platform, user)
            return f"dialogue summaries of {platform}:{user} cleared ({gone} key)"
        gone = await dialog.clear(store, message.platform, None)
        return f"every dialogue summary cleared ({gone} users)"
    if len(words) > 1:
        raise MemoryCommandError(USAGE)
    platform, user = (
        manage.split_user(words[0], message.platform)
        if words
        else (
            message.platform,
            message.user,
        )
    )
    items = await manage.summaries(store, platform, user)
    return f"dialogue summaries of {platform}:{user}:\n" + manage.format_summaries(
        items, tz, manage.SHOW_MAX
    )
