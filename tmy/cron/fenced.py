"""One claimed occurrence, run and committed fenced by its lease, then posted.

The half of :class:`~tmy.cron.service.Cron` that runs an occurrence it holds: the
steps on a buffer (:mod:`tmy.cron.buffered`), one ``Store.commit`` fenced by the
claim lease for their writes, the done mark and the outbox entry, the
leaderboards synced after, the reply posted (:mod:`tmy.cron.outbox`), the
history kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

from tmy import metrics
from tmy.cron.buffered import Sync, Write, run_buffered, variable_keys
from tmy.cron.occurrence import (
    DONE_TTL,
    SKIPPED_OFF,
    _log_chat_off,
    _mark,
    cron_message,
    done_key,
    fire_time_text,
    history_key,
    outbox_key,
    target_key,
)
from tmy.cron.outbox import Outbox, _outbox_item, _outbox_ttl
from tmy.cron.schedule import Schedule
from tmy.engine.core import Engine
from tmy.errors import TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message, Reply, Target
from tmy.rulebook.model import Rule
from tmy.store.index_log import replay
from tmy.store.leases import Lease

log = get_logger("tmy.cron")

HISTORY = 20  # runs kept per job


class FencedRuns(Outbox):
    """Runs, commits, posts and records one claimed occurrence (``Cron`` sets the
    attributes: ``engine``, ``store``, ``send``, ``daemon``, ``on_fire``, ``_one_slot``)."""

    engine: Engine
    daemon: str
    on_fire: Callable[[str, str], None] | None
    _one_slot: bool

    async def _run_fenced(
        self,
        lease: Lease,
        occ: str,
        rule: Rule,
        schedule: Schedule,
        fire: datetime,
        target: Target | None,
        *,
        manual_by: str | None = None,
        unsent: str | None = None,
    ) -> tuple[dict[str, Any], Reply | None]:
        """Run one claimed occurrence; its writes, done mark and outbox entry land together.

        The steps run on a buffer (:mod:`tmy.cron.buffered`); one ``commit`` fenced by
        the claim lease applies their writes, the done mark and (when there is a
        reply to post) the outbox entry in state ``sending`` — or, when the lease
        was lost meanwhile, nothing at all (``LeaseLost``: the new holder runs it).
        Returns the history entry and the reply (None when the chat is off).

        ``manual_by``: a fired-now run (``cron fire``), by whom; its history entry says
        ``manual``. ``unsent``: why this process cannot post to ``target`` (``cron fire``
        run where no daemon serves the platform): the reply is kept in the history
        only, not in the outbox.
        """
        fire_text = fire_time_text(fire)
        message = cron_message(schedule, target)
        manual = {} if manual_by is None else {"manual": True, "by": manual_by}
        if target is not None and await self._chat_off(message):
            # not run at all: a rotating tip does not advance while the chat is off
            entry = self._entry(fire_text, target, None, SKIPPED_OFF, None, "not sent")
            entry.update(manual)
            await self._commit([(done_key(occ), _mark(entry), DONE_TTL)], lease)
            _log_chat_off(rule.id, fire_text, target)
            self._count(rule.id, "skipped")
            return entry, None
        # the variables the rule may write stay locked from the run's first read to its
        # commit (name order, after the claim: no deadlock), so a chat run or another
        # occurrence writing them waits instead of being overwritten by this commit
        keys = variable_keys(self.engine.rulebook, rule.scheduled_locks, message)
        async with AsyncExitStack() as stack:
            held = [await stack.enter_async_context(self.store.lock(key)) for key in keys]
            reply, writes, syncs, indexed = await run_buffered(
                self.engine, rule, message, schedule.input, {"FIRE_TIME": fire_text}
            )
            outcome = "error" if reply.error else "ok"
            item = None
            has_reply = bool(reply.text or reply.outgoing)
            if target is not None and has_reply and self.send is not None and unsent is None:
                item = _outbox_item(rule.id, target, reply, fire, schedule, lease.token)
                item.update(manual)
            entry = self._entry(fire_text, target, reply.trace_id, outcome, reply.error, "")
            entry.update(manual)
            commit: list[Write] = [*writes, (done_key(occ), _mark(entry), DONE_TTL)]
            if item is not None:
                commit.append((outbox_key(occ), item, _outbox_ttl(item)))
            await self._commit(commit, lease, held)
            await self._sync_boards(syncs)
            # the run's index writes (a REMEMBER's entry, a FORGET), once its values are in;
            # one that fails is logged: the entry is stored and listed, not recalled
            await replay(self.store, indexed, _index_failed)
        entry["sent"] = sent = await self._post(lease, occ, target, reply, unsent, item)
        log.info(
            "cron.done",
            trace_id=reply.trace_id,
            rule=rule.id,
            fire_time=fire_text,
            target=target_key(target),
            outcome=outcome,
            sent=sent,
            answer=preview(reply.text),
            **manual,
        )
        self._count(rule.id, outcome)
        return entry, reply

    async def _post(
        self,
        lease: Lease,
        occ: str,
        target: Target | None,
        reply: Reply,
        unsent: str | None,
        item: dict[str, Any] | None,
    ) -> str:
        """Post a committed run's reply (its outbox entry ``item``); what the history says."""
        if target is None:
            return "logged only"
        if not (reply.text or reply.outgoing):
            return "nothing to send"
        if unsent is not None:
            return f"not sent: {unsent}"
        if item is None:
            return "error: no adapters running"
        return await self._send_claimed(lease, occ, item)

    async def _sync_boards(self, syncs: Sequence[Sync]) -> None:
        """Make the leaderboards of the ``rank: true`` variables the run committed follow
        them (the run synced its buffer's boards only). Each sync re-reads the committed
        value; one that fails is logged, and the board catches up at the next write."""
        for board, member, key, name in syncs:
            try:
                await self.store.rank_sync(board, member, key, name)
            except TmyError as exc:
                log.warning("rank.sync_failed", key=key, user=member, error=str(exc))

    async def _commit(self, writes: list[Write], lease: Lease, held: Sequence[Lease] = ()) -> None:
        """``store.commit`` fenced by ``lease``; on a Redis Cluster, one slot at a time.

        A cluster runs a script on one node, so a commit there may only touch the
        lease's own slot: the done mark goes first, fenced; every other write
        then goes alone after a local check of the lease (not fenced in the store).
        """
        if not self._one_slot:
            await self.store.commit(writes, fence=[lease, *held])
            return
        first = [w for w in writes if w[0] == lease.key]
        await self.store.commit(first, fence=[lease])
        fences = {x.key: x for x in held}
        for write in writes:
            if write[0] != lease.key:
                lease.check()
                own = fences.get(write[0])  # a variable's key and its lease share a slot
                await self.store.commit([write], fence=[own] if own is not None else [])

    def _lease_lost(
        self, rule_id: str, fire_text: str, target: Target | None, exc: Exception
    ) -> None:
        log.error(
            "cron.lease_lost",
            rule=rule_id,
            fire_time=fire_text,
            target=target_key(target),
            error=str(exc),
            detail="this daemon lost the occurrence's lease (paused or cut off from the store): "
            "it wrote and sent nothing more; the daemon that took the lease runs or sends it",
        )
        metrics.lease_lost("cron")

    async def _chat_off(self, message: Message) -> bool:
        """Whether ``.tmy off`` silenced the target chat (the engine's chat switch)."""
        switch = self.engine.switch
        return switch is not None and bool(await switch.is_off(message))

    async def _remember(self, rule_id: str, entry: dict[str, Any]) -> None:
        try:
            await self.store.update(history_key(rule_id), lambda h: _append(h, entry))
        except TmyError as exc:
            log.warning("cron.history_failed", rule=rule_id, error=str(exc))

    def _entry(
        self,
        fire_text: str,
        target: Target | None,
        trace_id: str | None,
        outcome: str,
        error: str | None,
        sent: str,
    ) -> dict[str, Any]:
        return {
            "fire_time": fire_text,
            "daemon": self.daemon,
            "target": target_key(target),
            "trace_id": trace_id,
            "outcome": outcome,
            "error": error,
            "sent": sent,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def _count(self, rule_id: str, outcome: str) -> None:
        if self.on_fire is not None:
            self.on_fire(rule_id, outcome)


def _append(history: Any, entry: dict[str, Any]) -> tuple[list[Any], None]:
    runs = history if isinstance(history, list) else []
    runs.append(entry)
    return runs[-HISTORY:], None


def _index_failed(name: str, args: tuple[Any, ...], exc: TmyError) -> None:
    log.warning("cron.index_failed", op=name, namespace=args[0], error=str(exc))
