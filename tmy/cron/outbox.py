"""The outbox: replies of scheduled runs waiting to be posted, and resent when a post fails.

A reply is committed as an outbox entry (state ``sending``) together with the
occurrence's done mark, posted under the occurrence's claim, and deleted once
sent. A failed post stays as ``retry`` (indexed in ``cron/pending``) and is
resent with backoff by whichever daemon claims it first, until the schedule's
``send_retry`` window ends; nobody resends an entry left in ``sending`` (its
holder may have posted it): a post goes out at most once.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from tmy import metrics
from tmy.cron.occurrence import (
    OUTBOX_INDEX,
    OUTBOX_PREFIX,
    SKIPPED_OFF,
    _log_chat_off,
    done_key,
    fire_time_text,
    outbox_key,
    target_key,
)
from tmy.cron.schedule import Schedule
from tmy.engine.structured import outgoing_from_dict
from tmy.errors import LeaseLost, StoreError, TmyError
from tmy.logs import get_logger
from tmy.message import Message, Outgoing, Reply, Target
from tmy.store.base import MISSING, Store
from tmy.store.leases import Lease

log = get_logger("tmy.cron")

RETRY_FIRST = 2.0  # s before the first resend of a failed scheduled send; doubles each time
RETRY_MAX = 60.0  # longest pause between resends
RETRY_POLL = 1.0  # how often each daemon looks for due resends in the outbox
MAX_OUTBOX = 1000
"""Failed sends kept for a resend at once (all rules); past it a failed send is given up."""
SendFn = Callable[..., Awaitable[None]]
"""``send(target, text, outgoing=None)``: ``App.send``; ``outgoing`` only when the reply has
images, files, mentions or buttons (:func:`send_reply`)."""


async def send_reply(send: SendFn, target: Target, text: str, outgoing: Any) -> None:
    """Post a run's reply: ``outgoing`` (an Outgoing, or its stored dict) is passed on as
    ``outgoing=`` only when it holds something, so a plain post is ``send(target, text)``."""
    parts = outgoing if isinstance(outgoing, Outgoing) else outgoing_from_dict(outgoing)
    if parts:
        await send(target, text, outgoing=parts)
    else:
        await send(target, text)


def _outbox_item(
    rule_id: str, target: Target, reply: Reply, fire: datetime, schedule: Schedule, token: str
) -> dict[str, Any]:
    return {
        "rule": rule_id,
        "platform": target.platform,
        "chat": target.chat,
        "user": target.user,
        "text": reply.text,
        **({"outgoing": reply.outgoing.as_dict()} if reply.outgoing else {}),
        "fire_time": fire_time_text(fire),
        "deadline": fire.timestamp() + schedule.retry_window,
        "trace_id": reply.trace_id,
        "attempts": 1,
        "state": "sending",  # sending (someone holds its claim and sends) | retry
        "token": token,
        "next_at": None,
        "error": None,
    }


def _outbox_ttl(item: dict[str, Any]) -> float:
    """An entry outlives its retry window by two minutes (then the store drops it)."""
    return max(item["deadline"] - time.time(), 0.0) + 120


async def outbox_entries(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """Every indexed outbox entry (key, entry), oldest fire time first."""
    return (await _outbox_scan(store))[0]


async def _outbox_scan(store: Store) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(entries, occurrences indexed whose entry is gone): one read of the index, one
    ``get_many`` of its entries (never a scan of the store's keys)."""
    index = await store.get(OUTBOX_INDEX)
    occs = list(index) if isinstance(index, dict) else []
    keys = [outbox_key(occ) for occ in occs]
    values = await store.get_many(keys) if keys else []
    found, gone = [], []
    for occ, key, value in zip(occs, keys, values, strict=True):
        if isinstance(value, dict):
            found.append((key, value))
        else:
            gone.append(occ)
    found.sort(key=lambda kv: str(kv[1].get("fire_time", "")))
    return found, gone


def outbox_summary(entries: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``{"pending": n, "oldest": fire time or None, "sending": n}`` for health reports."""
    items = [v for _, v in entries]
    oldest = min((str(v.get("fire_time")) for v in items), default=None)
    return {
        "pending": len(items),
        "sending": sum(1 for v in items if v.get("state") == "sending"),
        "oldest": oldest,
    }


def _without(index: Any, occs: list[str]) -> tuple[Any, None]:
    drop = set(occs)
    kept = {k: v for k, v in index.items() if k not in drop} if isinstance(index, dict) else {}
    return (kept or MISSING), None


class Outbox:
    """The sending half of :class:`tmy.cron.service.Cron`: post, keep, resend, give up.

    A mixin: it uses the scheduler's store, ``send``, claim bookkeeping and its
    ``_commit`` (fenced), ``_entry``, ``_remember``, ``_chat_off``, ``_spawn`` and
    ``_lease_lost``.
    """

    store: Store
    send: SendFn | None
    _retrying: set[str]

    async def _send_claimed(self, lease: Lease, occ: str, item: dict[str, Any]) -> str:
        """Post an outbox entry (state ``sending``) under its claim; what the history says.

        The lease is checked right before the send: a holder that lost it sends
        nothing and puts the entry back to ``retry`` (it knows it did not send),
        so a live daemon sends it. Nobody ever resends an entry left in
        ``sending``: its holder may have sent it (a holder paused between that
        check and the send still sends once, late) — at most once, never twice.
        """
        assert self.send is not None
        target = Target(item["platform"], item["chat"], item["user"])
        # indexed before the post: if this daemon dies mid-send, the entry stays visible
        # (run.py cron, /healthz) and is given up, logged and counted when its window ends
        item["indexed"] = await self._index_before_send(occ, item)
        try:
            lease.check()
        except LeaseLost:
            await self._unclaim(occ, item)
            raise
        try:
            await send_reply(self.send, target, item["text"], item.get("outgoing"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an adapter's failure must not stop the scheduler
            return await self._send_failed(lease, occ, item, exc)
        # sent: nothing may resend it, so the entry goes whoever holds the lease now
        try:
            await self.store.delete(outbox_key(occ))
            if item["indexed"]:
                await self._index(occ, item, add=False)
        except StoreError as exc:
            log.warning("cron.outbox_failed", rule=item["rule"], error=str(exc))
        return "ok" if item["attempts"] == 1 else f"ok (attempt {item['attempts']})"

    async def _unclaim(self, occ: str, item: dict[str, Any]) -> None:
        """Put our own ``sending`` entry back to ``retry`` (only if it is still ours)."""

        def back(current: Any) -> tuple[Any, None]:
            if (
                isinstance(current, dict)
                and current.get("state") == "sending"
                and current.get("token") == item["token"]
            ):
                current.update(state="retry", next_at=time.time(), token=None)
            return current, None

        try:
            await self.store.update(outbox_key(occ), back)
        except StoreError as exc:
            log.warning("cron.outbox_failed", rule=item["rule"], error=str(exc))

    async def _index(self, occ: str, item: dict[str, Any], *, add: bool) -> bool:
        """Add ``occ`` to (or drop it from) the outbox index; False when the index is full.

        The index is a hint, written after the entry's own fenced commit: the
        entry is the truth (a missing entry is dropped from the index by the
        retry loop; an entry missing from the index is never retried and expires).
        """

        def change(current: Any) -> tuple[Any, bool]:
            index = current if isinstance(current, dict) else {}
            if not add:
                index.pop(occ, None)
            elif occ not in index:
                if len(index) >= MAX_OUTBOX:
                    return current, False
                index[occ] = item["fire_time"]
            return (index or MISSING), True

        return bool(await self.store.update(OUTBOX_INDEX, change))

    async def _index_before_send(self, occ: str, item: dict[str, Any]) -> bool:
        """Index the entry about to be posted; False (logged) when it cannot be kept."""
        try:
            if await self._index(occ, item, add=True):
                return True
            item["unkept"] = f"the outbox is full: {MAX_OUTBOX} posts wait already"
        except StoreError as exc:
            item["unkept"] = f"the outbox index could not be written: {exc}"
        log.warning("cron.outbox_failed", rule=item["rule"], error=item["unkept"])
        return False

    async def _send_failed(
        self, lease: Lease, occ: str, item: dict[str, Any], exc: Exception
    ) -> str:
        """Keep a failed send in the outbox for a retry with backoff, or give it up."""
        error = str(exc) or type(exc).__name__
        attempt = item["attempts"]
        now = time.time()
        pause = min(RETRY_FIRST * 2 ** (attempt - 1), RETRY_MAX)
        if not item["indexed"]:  # a resend nobody could find: give it up now
            error += f" (not kept for a resend: {item['unkept']})"
        if not item["indexed"] or now + pause > item["deadline"]:
            await self._give_up(lease, occ, item, error)
            if item["indexed"]:
                await self._index(occ, item, add=False)
            return f"error: {error} (gave up after {attempt} attempt{'s' * (attempt > 1)})"
        item.update(state="retry", next_at=now + pause, error=error, token=None)
        await self._commit([(outbox_key(occ), item, _outbox_ttl(item))], lease)
        self._send_failure(item, error, "retry", retry_in_s=pause)
        return f"error: {error} (retrying in {pause:g}s)"

    async def _give_up(self, lease: Lease, occ: str, item: dict[str, Any], error: str) -> None:
        """Drop a send from the outbox (fenced by its claim), logged and counted as given up."""
        await self._commit([(outbox_key(occ), MISSING, None)], lease)
        self._send_failure(item, error, "gave_up")

    def _send_failure(self, item: dict[str, Any], error: str, outcome: str, **more: Any) -> None:
        log.warning(
            "cron.send_failed",
            rule=item["rule"],
            fire_time=item["fire_time"],
            target=f"{item['platform']}:{item['chat']}:{item['user']}",
            attempt=item["attempts"],
            outcome=outcome,
            error=error,
            **more,
        )
        metrics.cron_send_failed(item["rule"], outcome)

    async def _retry_loop(self) -> None:
        """Every :data:`RETRY_POLL` s, resend due outbox entries (each under its claim)."""
        while True:
            await asyncio.sleep(RETRY_POLL)
            try:
                entries, gone = await _outbox_scan(self.store)
                if gone:  # sent or given up (or expired): drop the hints in one write
                    await self.store.update(OUTBOX_INDEX, functools.partial(_without, occs=gone))
            except TmyError as exc:
                log.warning("cron.outbox_failed", error=str(exc))
                continue
            now = time.time()
            for key, item in entries:
                if key in self._retrying:
                    continue
                due = item.get("state") == "retry" and (item.get("next_at") or 0) <= now
                stale = item.get("state") == "sending" and now > item.get("deadline", 0)
                if due or stale:
                    self._retrying.add(key)
                    self._spawn(self._retry(key))

    async def _retry(self, key: str) -> None:
        occ = key[len(OUTBOX_PREFIX) :]
        item: dict[str, Any] | None = None
        try:
            async with self.store.lock(done_key(occ), wait=0.0) as lease:
                item = await self.store.get(key)
                if not isinstance(item, dict):
                    return
                entry = await self._retry_claimed(lease, occ, item)
        except LeaseLost as exc:
            if item is not None:
                self._lease_lost(item.get("rule", "?"), item.get("fire_time", "?"), None, exc)
            return
        except StoreError:
            return  # another daemon holds the claim (or the store is down): next poll
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cron.crashed", rule=item.get("rule") if item else None)
            return
        finally:
            self._retrying.discard(key)
        if entry is not None:
            await self._remember(item["rule"], entry)

    async def _retry_claimed(
        self, lease: Lease, occ: str, item: dict[str, Any]
    ) -> dict[str, Any] | None:
        now = time.time()
        target = Target(item["platform"], item["chat"], item["user"])
        entry = self._entry(item["fire_time"], target, item.get("trace_id"), "retry", None, "")
        entry["attempt"] = item["attempts"] + 1
        if item.get("manual"):  # a resend of a fired-now reply (``cron fire``) says so too
            entry.update(manual=True, by=item.get("by", ""))
        if item.get("state") == "sending":
            if now <= item["deadline"]:
                return None
            # its sender stopped mid-send (crashed or paused): it may have been sent
            error = "its sender stopped mid-send; not resent (it may have gone out)"
            await self._give_up(lease, occ, item, error)
            entry.update(attempt=item["attempts"], sent=f"unknown: {error}")
            return entry
        if item.get("state") != "retry" or (item.get("next_at") or 0) > now:
            return None
        if now > item["deadline"]:
            await self._give_up(lease, occ, item, item.get("error") or "?")
            entry.update(attempt=item["attempts"], sent=f"error: {item.get('error')} (gave up)")
            return entry
        message = Message("", user="cron", chat=target.chat, platform=target.platform)
        if await self._chat_off(message):
            await self._commit([(outbox_key(occ), MISSING, None)], lease)
            _log_chat_off(item["rule"], item["fire_time"], target)
            entry.update(outcome=SKIPPED_OFF, sent="not sent")
            return entry
        if self.send is None:
            return None
        item.update(state="sending", attempts=item["attempts"] + 1, token=lease.token)
        await self._commit([(outbox_key(occ), item, _outbox_ttl(item))], lease)
        entry["sent"] = await self._send_claimed(lease, occ, item)
        entry["outcome"] = "ok"
        log.info(
            "cron.resent",
            rule=item["rule"],
            fire_time=item["fire_time"],
            target=target_key(target),
            attempt=item["attempts"],
            sent=entry["sent"],
        )
        return entry

    async def outbox_health(self) -> dict[str, Any]:
        """The outbox for ``/healthz``: pending sends and the oldest one's fire time."""
        return outbox_summary(await outbox_entries(self.store))
