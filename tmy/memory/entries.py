"""Memory entries in the store: one key per entry, found through the lexical index.

The layout (owner keys, entry keys, index documents and their marker terms) is
:mod:`tmy.memory.layout`; entries an older tmy kept as one list per owner are
moved to it on first touch (:mod:`tmy.memory.legacy`). Other memory keys::

    mem/dialog/<platform>/<user>    dialogue summaries of that user (tmy.memory.dialog)
    mem/open/<platform>/<chat>/<user>  the conversation being recorded for a summary
    mem/vec/<id>                    an entry's embedding (only with llm.memory.embeddings)

A change of one entry is one atomic ``store.update`` of its key (two daemons
never lose a use count or a flip), then one index write. REMEMBER costs the
same whatever the owner holds: a lookup of the text's marker term (the same
text again refreshes the entry), the entry's key, one index write — and, at the
``llm.memory.max_entries`` bound (a policy: 200 by default, up to 1,000,000),
the lowest-order entries found by the index and deleted. Two REMEMBERs racing
at the bound may leave it one over for a moment; the next one evicts back to it.

An entry::

    {"id": "18f3a2c4b1e07a9", "text": "my cat is called Mimi", "scope": "user",
     "user": "ann", "chat": "private:ann", "platform": "telegram",
     "created": 1714550400.0, "importance": 3, "enabled": true, "uses": 0, "used": 0}
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
import time
from collections.abc import Iterable
from typing import Any

from tmy import redact
from tmy.errors import ExecutorError
from tmy.memory import layout, legacy
from tmy.memory.layout import (
    GLOBAL_KEY,
    PREFIX,
    chat_key,
    doc_key,
    scope_key,
    user_key,
    vector_key,
)
from tmy.memory.legacy import entries_of, is_entry
from tmy.message import Message
from tmy.store.base import MISSING, Store

__all__ = [
    "GLOBAL_KEY",
    "PREFIX",
    "MemoryFull",
    "add",
    "chat_key",
    "entries_of",
    "is_entry",
    "scope_key",
    "user_key",
    "vector_key",
]

ENTRY_PREFIXES = (*layout.LEGACY_PREFIXES, layout.DOC_PREFIX)

# Strings that look like credentials: refused by REMEMBER whatever the config says.
_KEY_PATTERNS = (
    re.compile(r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic, Stripe
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google API keys
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"),  # GitHub
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),  # GitLab
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),  # a JWT
    re.compile(r"\b(?:bearer|token|api[_-]?key|secret|password|passwd|pwd)\s*[:=]\s*\S{4,}", re.I),
    re.compile(r"(?:密码|口令|密钥|令牌|验证码)\s*[:：=是为]?\s*[!-~]{4,}"),  # 密码是 abc123
    re.compile(r"\b[0-9a-fA-F]{32,}\b"),  # long hex: tokens, hashes of secrets
)
# A long run of letters and digits mixed (base64 / base62 tokens), not a long word.
_TOKENISH = re.compile(r"[A-Za-z0-9+_]{32,}={0,2}")


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_counter = itertools.count()


def _base36(n: int, width: int = 0) -> str:
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = _DIGITS[r] + out
    return out.rjust(width, "0") or "0"


def new_id() -> str:
    """Short (14 characters), unique and roughly time-ordered.

    Milliseconds in base 36, a per-process counter (1,296 ids per millisecond
    cannot repeat in one process) and 20 random bits (other daemons).
    """
    ms = int(time.time() * 1000)
    return _base36(ms, 8) + _base36(next(_counter) % 1296, 2) + _base36(secrets.randbits(20), 4)


def looks_secret(text: str, extra: Iterable[re.Pattern[str]] = ()) -> str | None:
    """Why ``text`` must not be remembered (a configured secret, an API-key-like string)."""
    if redact.redact(text) != text:
        return "it contains a credential this bot is configured with"
    for pattern in (*_KEY_PATTERNS, *extra):
        if pattern.search(text):
            return "it looks like an API key or access token"
    for run in _TOKENISH.findall(text):
        if re.search(r"[0-9]", run) and re.search(r"[A-Za-z]", run) and len(set(run)) > 12:
            return "it looks like an API key or access token"
    return None


def clean_text(text: str) -> str:
    """One line: whitespace runs (newlines too) become one space."""
    return " ".join(str(text).split())


def _new_entry(message: Message, text: str, scope: str, importance: int, now: float) -> dict:
    return {
        "id": new_id(),
        "text": text,
        "scope": scope,
        "user": message.user,
        "user_name": message.user_name,
        "chat": message.chat,
        "platform": message.platform,
        "created": now,
        "importance": importance,
        "enabled": True,
        "uses": 0,
        "used": 0,
    }


async def add(
    store: Store,
    message: Message,
    text: str,
    *,
    scope: str = "user",
    importance: int = 3,
    limit: int = 200,
    per_owner: int = 0,
) -> tuple[dict[str, Any], bool, list[str]]:
    """Store ``text`` as an entry: (the entry, whether it is new, ids evicted to make room).

    The same text remembered again (by the same user in the same scope) is not
    duplicated: the existing entry is refreshed (enabled again, its time renewed);
    it counts as new only when it had been forgotten.

    In a shared scope (``chat``, ``global``) a non-admin sender can only push out
    their own entries, so one user flooding a chat cannot evict everyone else's:
    at ``per_owner`` entries of theirs (0: no such bound) their own first-to-go
    entry makes room; when the whole scope is at ``limit``, again only one of
    their own goes, and with none of their own the entry is refused
    (:class:`MemoryFull`). Admins keep the scope-wide order (anyone's entry).
    """
    now = time.time()
    owner = scope_key(scope, message)
    await legacy.migrate(store, owner)
    dup = layout.dup_term(message.user, text)
    hits = await store.index_search(owner, [dup])
    if hits.docs:
        found = await _refresh(store, owner, list(hits.docs), message.user, text, now, importance)
        if found is not None:
            return found
    limit = max(1, limit)
    count = hits.stats.n
    if scope != "user" and not message.is_admin:
        mine = layout.owner_term(message.platform, message.user)
        own = (await store.index_stats(owner, [mine])).df[mine]
        drop = own - per_owner + 1 if per_owner > 0 else 0
        drop = min(own, max(drop, count - limit + 1))
        victims = await store.index_lowest(owner, drop, term=mine) if drop > 0 else []
        if count - len(victims) >= limit:  # full of other people's entries
            raise MemoryFull(
                f"not remembered: the {scope} memory is full of other people's entries "
                f"(llm.memory.max_entries is {limit}); an admin can delete some"
            )
    else:
        victims = await store.index_lowest(owner, count - limit + 1) if count >= limit else []
    evicted = [doc for doc, _ in victims]
    await _delete(store, owner, evicted)
    entry = _new_entry(message, text, scope, importance, now)
    await store.set(doc_key(owner, entry["id"]), entry)
    await store.index_put(owner, [layout.index_doc(entry)])
    return entry, True, evicted


async def _refresh(
    store: Store, owner: str, ids: list[str], user: str, text: str, now: float, importance: int
) -> tuple[dict[str, Any], bool, list[str]] | None:
    """The existing entry of ``user`` with ``text`` among ``ids``, enabled again and renewed."""
    folded = text.casefold()
    for entry_id in ids:
        was: dict[str, Any] = {}

        def renew(current: Any, was: dict[str, Any] = was) -> tuple[Any, Any]:
            if not is_entry(current) or current.get("user") != user:
                return current, None
            if str(current["text"]).casefold() != folded:
                return current, None
            was["enabled"] = current.get("enabled", True)
            current.update(enabled=True, created=now, importance=importance)
            return current, current

        entry = await store.update(doc_key(owner, entry_id), renew)
        if entry is not None:
            fresh = not was["enabled"]
            await store.index_put(owner, [layout.index_doc(entry)])
            return dict(entry), fresh, []
    return None


async def _delete(store: Store, owner: str, ids: list[str]) -> None:
    if ids:
        await store.index_remove(owner, ids)
        await asyncio.gather(*(store.delete(doc_key(owner, i)) for i in ids))


class MemoryFull(ExecutorError):
    """A shared scope is at its bound with none of the sender's own entries to push out."""


async def set_enabled(store: Store, key: str, ids: set[str], enabled: bool) -> list[dict[str, Any]]:
    """Enable / disable the entries ``ids`` of owner ``key``; the entries changed."""
    await legacy.migrate(store, key)

    def flip(current: Any) -> tuple[Any, dict[str, Any] | None]:
        if not is_entry(current) or bool(current.get("enabled", True)) == enabled:
            return current, None
        current["enabled"] = enabled
        return current, current

    changed = [
        e
        for e in await asyncio.gather(*(store.update(doc_key(key, i), flip) for i in sorted(ids)))
        if e is not None
    ]
    if changed:
        await store.index_put(key, [layout.index_doc(e) for e in changed])
    return changed


async def remove(store: Store, key: str, entry_id: str) -> dict[str, Any] | None:
    """Delete the entry ``entry_id`` of owner ``key`` for good; the entry, or None."""
    await legacy.migrate(store, key)
    gone = await store.update(doc_key(key, entry_id), lambda current: (MISSING, current))
    await store.index_remove(key, [entry_id])
    return gone if is_entry(gone) else None


async def owner_entries(store: Store, key: str) -> list[dict[str, Any]]:
    """Every entry of owner ``key`` (and of an old list there), oldest first."""
    keys = await store.keys(layout.doc_prefix(key))
    values = await store.get_many([key, *keys])
    found = {e["id"]: e for e in entries_of(values[0])}
    found.update((v["id"], v) for v in values[1:] if is_entry(v))
    return sorted(found.values(), key=lambda e: (float(e.get("created") or 0), e["id"]))


async def entry_keys(store: Store) -> list[str]:
    """Every owner key holding entries (user, chat and global, either layout), for admin scans."""
    owners: set[str] = set()
    for key in await store.keys(layout.DOC_PREFIX):
        found = layout.owner_of(key)
        if found is not None:
            owners.add(found[0])
    for prefix in layout.LEGACY_PREFIXES:
        owners.update(k for k in await store.keys(prefix) if layout.is_owner_key(k))
    return sorted(owners)


async def find(store: Store, entry_id: str, hint: Iterable[str] = ()) -> tuple[str, dict] | None:
    """(owner key, entry) of the entry ``entry_id`` anywhere (the owners in ``hint`` first)."""
    if not entry_id or "/" in entry_id or entry_id.split() != [entry_id]:
        return None
    hint = list(dict.fromkeys(hint))
    if hint:
        await legacy.migrate_many(store, hint)
        values = await store.get_many([doc_key(k, entry_id) for k in hint])
        for key, value in zip(hint, values, strict=True):
            if is_entry(value):
                return key, value
    for key in await entry_keys(store):
        if key in hint:
            continue
        value = await store.get(key)
        if any(e["id"] == entry_id for e in entries_of(value)):
            await legacy.migrate(store, key, value)
        value = await store.get(doc_key(key, entry_id))
        if is_entry(value):
            return key, value
    return None


def check_text(text: str, max_chars: int, extra: Iterable[re.Pattern[str]]) -> str:
    """The text to remember, cleaned; ExecutorError when it is empty, too long or a secret."""
    text = clean_text(text)
    if not text:
        raise ExecutorError("there is nothing to remember (the input is empty)")
    if len(text) > max_chars:
        raise ExecutorError(
            f"that is too long to remember: {len(text)} characters "
            f"(llm.memory.max_entry_chars is {max_chars})"
        )
    why = looks_secret(text, extra)
    if why:
        raise ExecutorError(f"not remembered: {why}")
    return text
