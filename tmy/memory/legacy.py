"""Entries kept the old way — one list per owner key, rewritten whole by every REMEMBER —
moved to the per-entry layout (:mod:`tmy.memory.layout`) the first time they are touched.

A store written by an older tmy (or a backup of one restored) holds
``mem/user/<platform>/<user>`` = ``[entry, …]``. The first write path that
reaches that owner — REMEMBER, FORGET, a delete, a recall that counts its uses —
reads the list, writes each entry to its own key, indexes it and then deletes
the list (entries already moved are put again, identically, so an interrupted
migration simply runs again). Reads that must not write (the console's recall
preview, listings) see the list's entries as they are (:func:`entries_of`).
Every recall reads the owner keys anyway (with the dialogue keys, in the same
``get_many``), so finding an old list costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tmy.logs import get_logger
from tmy.memory import layout
from tmy.store.base import MISSING, Store

log = get_logger("tmy.memory")


def is_entry(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and "text" in value


def entries_of(value: Any) -> list[dict[str, Any]]:
    """The well-formed entries of an old list (anything else is ignored)."""
    return [e for e in value if is_entry(e)] if isinstance(value, list) else []


def _usable(entry: dict[str, Any]) -> bool:
    entry_id = entry["id"]
    return bool(entry_id) and "/" not in entry_id and entry_id.split() == [entry_id]


async def migrate(store: Store, owner: str, value: Any = MISSING, *, read: bool = True) -> int:
    """Move the old list at ``owner`` (``value``, or read it when ``read``) to one key per
    entry and the index, then delete the list; the number of entries moved."""
    if value is MISSING and read:
        value = await store.get(owner)
    if not isinstance(value, list):
        return 0
    items = [e for e in entries_of(value) if _usable(e)]
    for entry in items:
        await store.set(layout.doc_key(owner, entry["id"]), entry)
    if items:
        await store.index_put(owner, [layout.index_doc(e) for e in items])
    await store.delete(owner)
    log.info("memory.migrated", owner=owner, entries=len(items))
    return len(items)


async def migrate_many(store: Store, owners: Sequence[str]) -> None:
    """:func:`migrate` every owner of ``owners`` holding an old list (one ``get_many``)."""
    owners = list(dict.fromkeys(owners))
    for owner, value in zip(owners, await store.get_many(owners), strict=True):
        if isinstance(value, list):
            await migrate(store, owner, value)
