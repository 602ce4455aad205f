"""Memory entries in the store: one key per owner holding a bounded list.

Keys (every id part escaped like the engine's own keys)::

    mem/user/<platform>/<user>      entries of scope user   (that user, any chat)
    mem/chat/<platform>/<chat>      entries of scope chat   (everyone in that chat)
    mem/global                      entries of scope global (everyone)
    mem/dialog/<platform>/<user>    dialogue summaries of that user (tmy.memory.dialog)
    mem/open/<platform>/<chat>/<user>  the conversation being recorded for a summary
    mem/vec/<id>                    an entry's embedding (only with llm.memory.embeddings)

Every change is one atomic ``store.update`` of one key, so two daemons on one
Redis (or two runs on one SQLite file) never lose an entry; the update
functions are pure, as ``update`` may run them more than once.

An entry::

    {"id": "18f3a2c4b1e07a9", "text": "my cat is called Mimi", "scope": "user",
     "user": "ann", "chat": "private:ann", "platform": "telegram",
     "created": 1714550400.0, "importance": 3, "enabled": true, "uses": 0, "used": 0}
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections.abc import Iterable
from typing import Any

from tmy import redact
from tmy.engine.keys import escape_key_part as esc
from tmy.errors import ExecutorError
from tmy.message import Message
from tmy.store.base import MISSING, Store

PREFIX = "mem/"
ENTRY_PREFIXES = ("mem/user/", "mem/chat/", "mem/global")

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


def user_key(platform: str, user: str) -> str:
    return f"mem/user/{esc(platform)}/{esc(user)}"


def chat_key(platform: str, chat: str) -> str:
    return f"mem/chat/{esc(platform)}/{esc(chat)}"


GLOBAL_KEY = "mem/global"


def scope_key(scope: str, message: Message) -> str:
    """The key holding ``scope`` entries visible to ``message``'s sender."""
    if scope == "user":
        return user_key(message.platform, message.user)
    if scope == "chat":
        return chat_key(message.platform, message.chat)
    return GLOBAL_KEY


def vector_key(entry_id: str) -> str:
    return f"mem/vec/{esc(entry_id)}"


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


def is_entry(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and "text" in value


def entries_of(value: Any) -> list[dict[str, Any]]:
    """The well-formed entries of a stored list (anything else is ignored)."""
    return [e for e in value if is_entry(e)] if isinstance(value, list) else []


def _evict_order(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Which entry goes first when a list is full: disabled, then least used, then oldest."""
    return (
        bool(entry.get("enabled", True)),
        int(entry.get("uses") or 0),
        float(entry.get("used") or entry.get("created") or 0),
    )


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

    The same text remembered again (by the same owner in the same scope) is not
    duplicated: the existing entry is refreshed (enabled again, its time renewed);
    it counts as new only when it had been forgotten.

    In a shared scope (``chat``, ``global``) a non-admin sender can only push out
    their own entries, so one user flooding a chat cannot evict everyone else's:
    at ``per_owner`` entries of theirs (0: no such bound) their own first-to-go
    entry makes room; when the whole list is at ``limit``, again only one of
    their own goes, and with none of their own the entry is refused
    (:class:`MemoryFull`). Admins keep the scope-wide order (anyone's entry).
    """
    now = time.time()
    entry = {
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
    folded = text.casefold()

    def put(current: Any) -> tuple[Any, tuple[dict[str, Any], bool, list[str]]]:
        items = entries_of(current)
        for item in items:
            if item["text"].casefold() == folded and item.get("user") == message.user:
                fresh = not item.get("enabled", True)
                item.update(enabled=True, created=now, importance=importance)
                return items, (dict(item), fresh, [])
        evicted: list[str] = []
        if guarded:
            own = [i for i in items if _owner(i) == owner]
            while own and (len(own) >= per_owner > 0 or len(items) >= max(1, limit)):
                victim = min(own, key=_evict_order)
                own.remove(victim)
                items.remove(victim)
                evicted.append(victim["id"])
            if len(items) >= max(1, limit):  # full of other people's entries
                return current, None
        items.append(dict(entry))
        while len(items) > max(1, limit):
            victim = min(items[:-1] or items, key=_evict_order)
            items.remove(victim)
            evicted.append(victim["id"])
        return items, (dict(entry), True, evicted)

    owner = (message.platform, message.user)
    guarded = scope != "user" and not message.is_admin
    result: tuple[dict[str, Any], bool, list[str]] | None = await store.update(
        scope_key(scope, message), put
    )
    if result is None:
        raise MemoryFull(
            f"not remembered: the {scope} memory is full of other people's entries "
            f"(llm.memory.max_entries is {limit}); an admin can delete some"
        )
    return result


class MemoryFull(ExecutorError):
    """A shared scope is at its bound with none of the sender's own entries to push out."""


def _owner(entry: dict[str, Any]) -> tuple[Any, Any]:
    return entry.get("platform"), entry.get("user")


async def set_enabled(store: Store, key: str, ids: set[str], enabled: bool) -> list[dict[str, Any]]:
    """Enable / disable the entries ``ids`` at ``key``; the entries changed."""

    def flip(current: Any) -> tuple[Any, list[dict[str, Any]]]:
        items = entries_of(current)
        changed = []
        for item in items:
            if item["id"] in ids and bool(item.get("enabled", True)) != enabled:
                item["enabled"] = enabled
                changed.append(dict(item))
        return (items if changed else current), changed

    return await store.update(key, flip)


async def touch(store: Store, key: str, ids: set[str]) -> None:
    """Count one recall of each of ``ids`` (least used entries are evicted first)."""
    now = time.time()

    def bump(current: Any) -> tuple[Any, None]:
        items = entries_of(current)
        hit = False
        for item in items:
            if item["id"] in ids:
                item["uses"] = int(item.get("uses") or 0) + 1
                item["used"] = now
                hit = True
        return (items if hit else current), None

    await store.update(key, bump)


async def remove(store: Store, key: str, entry_id: str) -> dict[str, Any] | None:
    """Delete the entry ``entry_id`` at ``key`` for good; the entry, or None."""

    def drop(current: Any) -> tuple[Any, dict[str, Any] | None]:
        items = entries_of(current)
        for item in items:
            if item["id"] == entry_id:
                items.remove(item)
                return (items if items else MISSING), item
        return current, None

    return await store.update(key, drop)


async def entry_keys(store: Store) -> list[str]:
    """Every key holding entries (user, chat and global), for admin scans."""
    found: list[str] = []
    for prefix in ENTRY_PREFIXES:
        found.extend(await store.keys(prefix))
    return found


async def find(store: Store, entry_id: str, hint: Iterable[str] = ()) -> tuple[str, dict] | None:
    """(key, entry) of the entry ``entry_id`` anywhere (the keys in ``hint`` are tried first)."""
    tried: set[str] = set()
    for group in (list(hint), None):
        keys = group if group is not None else await entry_keys(store)
        keys = [k for k in keys if k not in tried]
        tried.update(keys)
        if not keys:
            continue
        for key, value in zip(keys, await store.get_many(keys), strict=True):
            for item in entries_of(value):
                if item["id"] == entry_id:
                    return key, item
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
