"""The ``REMEMBER`` and ``FORGET`` executors: rule-level building blocks of long-term memory.

``REMEMBER`` stores its input (the step input: ``QUESTION`` for ``remember *``)
as an entry and answers a confirmation; ``FORGET`` disables the entries that
best match its input and answers what it disabled. Which words remember and
which steps recall is the rule author's choice::

    - id: remember
      triggers: ["remember *", "记住*"]
      steps: [{plugin: REMEMBER}]          # scope: user | chat | global, importance: 1..5
    - id: forget
      triggers: ["forget *", "忘记*"]
      steps: [{plugin: FORGET}]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tmy.config.memory import SCOPES
from tmy.errors import ExecutorError
from tmy.executors.registry import Option
from tmy.logs import get_logger, preview
from tmy.memory import entries, layout, legacy, scoring, search
from tmy.memory.embeddings import forget_vectors, store_vector
from tmy.memory.legacy import is_entry
from tmy.memory.recall import READ_MAX, RELATIVE_CUT
from tmy.memory.runtime import memory_of
from tmy.message import Message
from tmy.store.base import Store
from tmy.store.textindex import POSTINGS_BUDGET
from tmy.types import StepContext
from tmy.values.compiled import to_text

log = get_logger("tmy.memory")

REMEMBER_OPTIONS = {
    "scope": Option(str, default="user", doc="user | chat | global: who the entry is recalled for"),
    "importance": Option(int, default=3, doc="1..5: a small boost (or penalty) in recall"),
    "result": Option(str, default="text", doc="text (a confirmation) | entry (the stored entry)"),
}
FORGET_OPTIONS = {
    "max": Option(int, default=5, doc="at most this many entries are disabled"),
    "min_score": Option(
        (int, float), doc="how well an entry must match (default llm.memory.min_score)"
    ),
}


def check_remember(cfg: dict[str, Any]) -> None:
    """Load-time check of REMEMBER's constant options."""
    _remember_options(cfg)


def check_forget(cfg: dict[str, Any]) -> None:
    """Load-time check of FORGET's constant options."""
    _forget_options(cfg)


def _remember_options(cfg: dict[str, Any]) -> tuple[str, int, str]:
    scope = cfg.get("scope") or "user"
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r} must be one of {', '.join(SCOPES)}")
    importance = cfg.get("importance", 3)
    if importance is None:
        importance = 3
    if not isinstance(importance, int) or isinstance(importance, bool) or not 1 <= importance <= 5:
        raise ValueError("importance must be a whole number from 1 to 5")
    result = cfg.get("result") or "text"
    if result not in ("text", "entry"):
        raise ValueError(f"result {result!r} must be text or entry")
    return scope, importance, result


def _forget_options(cfg: dict[str, Any]) -> tuple[int, float | None]:
    limit = cfg.get("max", 5)
    if limit is None:
        limit = 5
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError("max must be a whole number >= 1")
    min_score = cfg.get("min_score")
    if min_score is not None and not 0 <= float(min_score) <= 1:
        raise ValueError("min_score must be a number from 0 to 1")
    return limit, None if min_score is None else float(min_score)


def _options(check: Any, cfg: dict[str, Any]) -> Any:
    try:
        return check(cfg)
    except (ValueError, TypeError) as exc:  # a computed option that is wrong: a STEP_ERROR
        raise ExecutorError(str(exc)) from None


async def remember(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    """Store the input as a memory entry; a confirmation (or the entry, with result: entry)."""
    scope, importance, result = _options(_remember_options, cfg)
    if ctx.message.ephemeral:
        raise ExecutorError(
            "nothing is remembered for a request without a user: send 'user' (or "
            "X-Tmy-User), or give this client its own API key"
        )
    mrt = memory_of(ctx.services)
    mcfg = mrt.config
    text = entries.check_text(to_text(value), mcfg.max_entry_chars, mcfg.secrets)
    store = ctx.services.store
    await mrt.uses.flush(store, entries.scope_key(scope, ctx.message))  # the cap sees them
    entry, new, evicted = await entries.add(
        store,
        ctx.message,
        text,
        scope=scope,
        importance=importance,
        limit=mcfg.max_entries,
        per_owner=mcfg.max_shared_entries_per_user,
    )
    ctx.record.extra["memory"] = {"remembered": entry, "new": new, "evicted": evicted}
    log.info(
        "memory.remembered",
        id=entry["id"],
        scope=scope,
        user=ctx.message.user,
        chat=ctx.message.chat,
        text=preview(text),
        new=new,
        evicted=evicted or None,
    )
    if mcfg.embeddings.enabled:
        await forget_vectors(store, evicted)
        await store_vector(ctx.services, mcfg.embeddings, entry)
    if result == "entry":
        return entry
    chinese = scoring.has_cjk(text)
    if not new:
        return f"我已经记得：{text}" if chinese else f"I already remember that: {text}"
    return f"好的，我记住了：{text}" if chinese else f"OK, I'll remember: {text}"


async def _own_shared(
    store: Store,
    scopes: list[tuple[str, str]],
    message: Message,
    bound: int,
    allowed: Callable[[dict[str, Any]], bool],
) -> dict[str, list[dict[str, Any]]]:
    """The sender's own entries in the shared scopes (owner key → entries): the postings of
    their owner marker (``#o:``; its newest ``bound`` — the per-user bound — in each), read.

    FORGET ranks these (with the sender's user scope) rather than every scope's best: the
    bounded search of a busy chat ranks the newest of everyone's entries holding a common
    word, and the sender's own could be none of them."""
    mine = layout.owner_term(message.platform, message.user)
    hits = await asyncio.gather(*(store.index_search(k, [mine], budget=bound) for _, k in scopes))
    keys = [(k, doc) for (_, k), hit in zip(scopes, hits, strict=True) for doc in hit.docs]
    values = await store.get_many([layout.doc_key(k, doc) for k, doc in keys])
    own: dict[str, list[dict[str, Any]]] = {}
    for (k, _), v in zip(keys, values, strict=True):
        if is_entry(v) and allowed(v):
            own.setdefault(k, []).append(v)
    return own


async def forget(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    """Disable the entries that best match the input (the sender's own; an admin's: any here)."""
    limit, min_score = _options(_forget_options, cfg)
    mrt = memory_of(ctx.services)
    mcfg = mrt.config
    text = entries.clean_text(to_text(value))
    chinese = scoring.has_cjk(text)
    if not text:
        raise ExecutorError("say what to forget (forget <words>, or forget #<id>)")
    message = ctx.message
    store = ctx.services.store
    scopes = [(s, entries.scope_key(s, message)) for s in ("user", "chat", "global")]
    keys = [k for _, k in scopes]
    await legacy.migrate_many(store, keys)
    for key in keys:  # the uses this daemon noted, written before entries are disabled
        await mrt.uses.flush(store, key)

    def allowed(item: dict[str, Any]) -> bool:
        own = item.get("user") == message.user and item.get("platform") == message.platform
        return bool(item.get("enabled", True)) and (own or message.is_admin)

    wanted = text[1:] if text.startswith("#") else text
    chosen: list[tuple[str, dict[str, Any]]] = []
    if wanted.split() == [wanted] and "/" not in wanted:  # an entry id?
        values = await store.get_many([layout.doc_key(k, wanted) for k in keys])
        chosen = [(k, v) for k, v in zip(keys, values, strict=True) if is_entry(v) and allowed(v)]
    if not chosen and message.is_admin and text.startswith("#"):
        found = await entries.find(store, wanted, keys)
        if found is not None and found[1].get("enabled", True):
            chosen = [found]
    if not chosen and not text.startswith("#"):
        if message.is_admin:
            hits = await search.find(store, scopes, text)
        else:
            bound = mcfg.max_shared_entries_per_user or POSTINGS_BUDGET
            own = await _own_shared(store, scopes[1:], message, bound, allowed)
            hits = await search.find(store, scopes[:1], text, own)
        read = await search.read(store, hits.candidates[:READ_MAX])
        mine = [c for c in read if c.entry is not None and allowed(c.entry)]
        threshold = mcfg.min_score if min_score is None else min_score
        best = max((c.match.relevance for c in mine), default=0.0)
        chosen = [
            (c.owner, c.entry)
            for c in mine
            if c.match.relevance >= threshold and c.match.relevance >= RELATIVE_CUT * best
        ][:limit]
    disabled: list[dict[str, Any]] = []
    by_key: dict[str, set[str]] = {}
    for key, item in chosen:
        by_key.setdefault(key, set()).add(item["id"])
    for key, ids in by_key.items():
        disabled.extend(await entries.set_enabled(store, key, ids, False))
    ctx.record.extra["memory"] = {"forgotten": disabled}
    log.info(
        "memory.forgotten",
        user=message.user,
        chat=message.chat,
        query=preview(text),
        ids=[e["id"] for e in disabled],
    )
    if not disabled:
        if chinese:
            return f"没有找到要忘记的记忆：{text}"
        return f"I had nothing to forget matching: {text}"
    listed = ("；" if chinese else "; ").join(e["text"] for e in disabled)
    return f"好的，已忘记：{listed}" if chinese else f"OK, I forgot: {listed}"
