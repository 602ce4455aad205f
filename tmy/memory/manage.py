"""Listing, deleting and exporting memory: shared by ``.tmy memory`` / ``.tmy dialog`` and
``python run.py memory list|del|export``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tmy.memory import dialog, entries, layout
from tmy.memory.embeddings import forget_vectors
from tmy.message import Message
from tmy.store.base import MISSING, Store

SHOW_MAX = 30  # entries listed in one chat answer


def _when(ts: Any, tz: Any = None) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def split_user(spec: str, platform: str) -> tuple[str, str]:
    """``USER`` or ``PLATFORM:USER`` → (platform, user)."""
    if ":" in spec:
        head, tail = spec.split(":", 1)
        if head and tail and " " not in head:
            return head, tail
    return platform, spec


async def visible_entries(
    store: Store, message: Message, user: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(owner key, entry) pairs: ``user``'s own entries, or (None) the sender's own + this
    chat's + the global ones."""
    if user is not None:
        platform, name = split_user(user, message.platform)
        keys = [entries.user_key(platform, name)]
    else:
        keys = [entries.scope_key(s, message) for s in ("user", "chat", "global")]
    out = []
    for key in dict.fromkeys(keys):
        out.extend((key, e) for e in await entries.owner_entries(store, key))
    return out


async def all_entries(store: Store) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key in await entries.entry_keys(store):
        out.extend((key, e) for e in await entries.owner_entries(store, key))
    return out


def format_entries(pairs: list[tuple[str, dict[str, Any]]], tz: Any = None, limit: int = 0) -> str:
    """One line an entry: ``id [scope owner] (off) text — date, used N×``."""
    if not pairs:
        return "(no memory entries)"
    lines = []
    shown = pairs[:limit] if limit else pairs
    for _, e in shown:
        scope = e.get("scope", "user")
        where = f"{e.get('platform')}:{e.get('user')}"
        if scope == "chat":
            where += f" in {e.get('chat')}"
        off = " (forgotten)" if not e.get("enabled", True) else ""
        lines.append(
            f"{e['id']} [{scope} {where}]{off} {e.get('text')} — {_when(e.get('created'), tz)}, "
            f"importance {e.get('importance', 3)}, used {int(e.get('uses') or 0)}×"
        )
    if limit and len(pairs) > limit:
        lines.append(f"… and {len(pairs) - limit} more (python run.py memory list --all)")
    return "\n".join(lines)


async def delete(store: Store, entry_id: str, message: Message | None = None) -> dict | None:
    """Delete one entry for good (searching the sender's keys first, then everywhere)."""
    entry_id = entry_id.lstrip("#")
    hint = [entries.scope_key(s, message) for s in ("user", "chat", "global")] if message else []
    found = await entries.find(store, entry_id, hint)
    if found is None:
        return None
    removed = await entries.remove(store, found[0], entry_id)
    if removed is not None:
        await forget_vectors(store, [entry_id])
    return removed


async def summaries(store: Store, platform: str, user: str) -> list[dict[str, Any]]:
    return dialog.summaries_of(await store.get(dialog.dialog_key(platform, user)))


def format_summaries(items: list[dict[str, Any]], tz: Any = None, limit: int = 0) -> str:
    if not items:
        return "(no dialogue summaries)"
    shown = items[-limit:] if limit else items
    lines = [
        f"{_when(s.get('created'), tz)} [{s.get('chat')}] {s.get('text')}"
        + (" (extract)" if s.get("fallback") else "")
        for s in shown
    ]
    if limit and len(items) > limit:
        lines.insert(0, f"(the last {limit} of {len(items)})")
    return "\n".join(lines)


async def export(store: Store) -> dict[str, Any]:
    """Every memory key and its value (summaries, open conversations; no vectors), the
    entries as one list per owner key (oldest first), as an older tmy kept them."""
    out: dict[str, Any] = {}
    keys = [
        k
        for k in await store.keys(entries.PREFIX)
        if not k.startswith(("mem/vec/", layout.DOC_PREFIX)) and not layout.is_owner_key(k)
    ]
    values = await store.get_many(keys) if keys else []
    out.update((k, v) for k, v in zip(keys, values, strict=True) if v is not MISSING)
    for key, pairs in (await _grouped(store)).items():
        out[key] = pairs
    return dict(sorted(out.items()))


async def _grouped(store: Store) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for key, entry in await all_entries(store):
        grouped.setdefault(key, []).append(entry)
    return grouped


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
