"""Which value a board entry mirrors: the key ``restore`` re-syncs a board entry from.

The engine keeps one board per ``rank: true`` variable and platform, with the id
``{escaped platform}/{name}`` and the user id as member, in step with the
user-scoped value at ``var/user/{escaped platform}/{escaped user}/{name}``
(``tmy.engine.keys``: ``board_id`` and ``variable_key``, built on the two
functions here; a test checks they agree). A snapshot may hold a board entry
that lagged its value (on a cluster, or in a backup file edited by hand), so
``restore`` sets each entry from the value it restored instead of trusting the
entry's score. The store does not import the engine (the layers go the other
way), so the escaping and the user-variable key live here, below both.
"""

from __future__ import annotations

from tmy.errors import StoreError
from tmy.store.codec import check_key


def escape_key_part(part: str) -> str:
    """An id as one part of a slash-separated key: ``/`` (the separator) and ``%`` escaped,
    so two different (platform, chat, user) triples never share a key."""
    if "%" not in part and "/" not in part:  # the usual id: nothing to escape
        return part
    return part.replace("%", "%25").replace("/", "%2F")


def user_variable_key(platform_part: str, user_part: str, name: str) -> str:
    """The key of a user-scoped variable, from its already escaped platform and user parts
    (the engine's ``variable_key`` and a board entry's value both are this)."""
    return f"var/user/{platform_part}/{user_part}/{name}"


def board_value_key(board: str, member: str) -> str | None:
    """The value key ``member``'s entry on ``board`` mirrors, or None for a board id
    that is not ``{escaped platform}/{name}`` (a board the engine did not make)."""
    platform, slash, name = board.partition("/")
    if not slash or not platform or not name:
        return None
    key = user_variable_key(platform, escape_key_part(member), name)
    try:
        check_key(key)
    except StoreError:
        return None
    return key
