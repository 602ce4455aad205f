"""The store keys of a run's state: declared variables, conversations, leaderboards.

Ids from platforms may contain ``/`` (a key separator) and ``%``: each part is
escaped so two different (platform, chat, user) triples never share a key.
"""

from __future__ import annotations

from tmy.message import Message
from tmy.rulebook.model import VariableDecl
from tmy.store.board_keys import escape_key_part, user_variable_key

_escape = escape_key_part  # ids as key parts (tmy.store.board_keys, which restore shares)


def variable_key(decl: VariableDecl, message: Message) -> str:
    """Store key of a declared variable for the conversation of ``message``."""
    if decl.scope == "global":
        return f"var/global/{decl.name}"
    if decl.scope == "chat":
        return f"var/chat/{_escape(message.platform)}/{_escape(message.chat)}/{decl.name}"
    return user_variable_key(_escape(message.platform), _escape(message.user), decl.name)


def conversation_key(kind: str, message: Message) -> str:
    """Key of per-conversation state (history, summary, session) for ``message``."""
    return f"{kind}/{_escape(message.platform)}/{_escape(message.chat)}/{_escape(message.user)}"


def board_id(platform: str, name: str) -> str:
    """The leaderboard of the ``rank: true`` variable ``name`` on ``platform``."""
    return f"{_escape(platform)}/{name}"
