"""Where memory entries live in the store: one key per entry, found through the lexical index.

Each *owner* — the entries of one scope visible to a sender — has an owner key
(the key that held its whole list before, and the name of its index namespace)::

    mem/user/<platform>/<user>      scope user   (that user, any chat)
    mem/chat/<platform>/<chat>      scope chat   (everyone in that chat)
    mem/global                      scope global (everyone)

and its entries are kept one per key, ``mem/e/<owner key without mem/>/<id>``
(``mem/e/user/telegram/ann/18f3a2c4b1e07a9``), read with ``get_many`` for the
few a recall chooses. The owner key names the entries' index namespace
(:mod:`tmy.store.textindex`): each entry is a document whose term counts are
its text's tokens (:func:`tmy.memory.scoring.counts`, computed once when it is
written) plus two marker terms that never match a query (tokens have no ``#``):

* ``#d:<hash of user + case-folded text>`` — the same text remembered again by
  the same user is found in one lookup, whatever the owner holds;
* ``#o:<hash of platform + user>`` — who noted it (the per-user bound of a
  shared scope counts and evicts only the sender's own entries).

A forgotten (disabled) entry keeps only the markers, so no query finds it but
REMEMBER of the same text brings it back. The document's order is the eviction
order (:func:`evict_order`): disabled first, then least used, then least
recently used (or created).
"""

from __future__ import annotations

import hashlib
from typing import Any

from tmy.engine.keys import escape_key_part as esc
from tmy.memory import scoring
from tmy.message import Message
from tmy.store.textindex import IndexDoc

PREFIX = "mem/"
DOC_PREFIX = "mem/e/"
GLOBAL_KEY = "mem/global"
LEGACY_PREFIXES = ("mem/user/", "mem/chat/", "mem/global")
"""Owner keys: they held a whole list of entries before (read and migrated, never written)."""


def user_key(platform: str, user: str) -> str:
    return f"mem/user/{esc(platform)}/{esc(user)}"


def chat_key(platform: str, chat: str) -> str:
    return f"mem/chat/{esc(platform)}/{esc(chat)}"


def scope_key(scope: str, message: Message) -> str:
    """The owner key of the ``scope`` entries visible to ``message``'s sender."""
    if scope == "user":
        return user_key(message.platform, message.user)
    if scope == "chat":
        return chat_key(message.platform, message.chat)
    return GLOBAL_KEY


def vector_key(entry_id: str) -> str:
    return f"mem/vec/{esc(entry_id)}"


def doc_prefix(owner: str) -> str:
    """The prefix of every entry key of ``owner`` (ends in ``/``)."""
    return f"{DOC_PREFIX}{owner[len(PREFIX) :]}/"


def doc_key(owner: str, entry_id: str) -> str:
    return doc_prefix(owner) + entry_id


def owner_of(key: str) -> tuple[str, str] | None:
    """(owner key, entry id) of an entry key, or None for another key."""
    if not key.startswith(DOC_PREFIX):
        return None
    head, _, entry_id = key[len(DOC_PREFIX) :].rpartition("/")
    return (PREFIX + head, entry_id) if head and entry_id else None


def is_owner_key(key: str) -> bool:
    """Is ``key`` an owner key (``mem/user/p/u``, ``mem/chat/p/c``, ``mem/global``)?"""
    if key == GLOBAL_KEY:
        return True
    parts = key.split("/")
    return len(parts) == 4 and parts[1] in ("user", "chat")


def _hash(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=10).hexdigest()


def dup_term(user: str, text: str) -> str:
    """The marker term of ``text`` remembered by ``user`` (case folded)."""
    return "#d:" + _hash(str(user), text.casefold())


def owner_term(platform: str, user: str) -> str:
    """The marker term of the entries noted by ``platform:user``."""
    return "#o:" + _hash(str(platform), str(user))


def evict_order(entry: dict[str, Any]) -> float:
    """The eviction order as one number: disabled first, then least used, then oldest.

    enabled × 10¹⁵ + min(uses, 99,999) × 10¹⁰ + (last use or creation, in seconds):
    exact to a quarter second, which is all the old tuple order told apart.
    """
    enabled = 1 if entry.get("enabled", True) else 0
    uses = min(max(int(entry.get("uses") or 0), 0), 99_999)
    when = min(max(float(entry.get("used") or entry.get("created") or 0), 0.0), 9.99e9)
    return enabled * 1e15 + uses * 1e10 + when


def index_doc(entry: dict[str, Any]) -> IndexDoc:
    """The entry as an index document: its text's term counts (none when disabled), the
    markers, its length (the text's tokens) and eviction order."""
    text = str(entry.get("text", ""))
    tf: dict[str, int] = dict(scoring.counts(text))
    length = sum(tf.values())
    if not entry.get("enabled", True):
        tf = {}
    tf[dup_term(str(entry.get("user")), text)] = 1
    tf[owner_term(str(entry.get("platform")), str(entry.get("user")))] = 1
    return IndexDoc(str(entry["id"]), tf, length, evict_order(entry))
