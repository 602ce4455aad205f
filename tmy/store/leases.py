"""Leases: the exclusive, cross-process ``Store.lock`` both backends provide.

Inside one process, waiters for a key queue on an ``asyncio.Lock`` (no polling,
first come first served); across processes a lease row or key is taken with a
token, polled for with short, growing sleeps while someone else holds it, and
given back only by its holder. Each backend supplies how to take, renew and
give back its own lease; the waiting, the renewal, the deadline and the
shielded release live here.

Why leases are short and renewed: a lease must free soon after its holder
dies (a killed daemon, or a Redis that restarts from its AOF with the lease in
it), yet must not expire under a holder that is still working. So a lease
lasts :data:`LEASE_TTL` seconds (5) and a background task renews it every
third of that while the ``async with`` body runs: a dead holder blocks others
for at most one lease length, a live one keeps its lease however long it works
(a step's own timeout bounds that).

Why tokens name their holder: a token is ``<holder>/<random>``, where the
holder identity is this machine's boot id, this process's PID namespace, PID
and start time (Linux ``/proc``; elsewhere it is empty). A contender that finds
a lease held by a process of *its own machine and PID namespace* that no
longer exists (or whose PID now belongs to a newer process) clears it at once
instead of waiting for it to expire: a daemon restarted after ``kill -9`` does
not wait on its previous life's locks. Holders elsewhere (another host,
another container) are never judged; their leases just expire.

Why leases fence writes: a holder paused (SIGSTOP, a long GC, a frozen VM) or
cut off from the store for longer than the lease loses it — another process
may take it and do the same work — yet the paused holder, once resumed, does
not know. So ``lock`` yields a :class:`Lease` carrying its token, and writes
made under it go through ``Store.commit(writes, fence=[lease])``, which checks
*in the store, in the same transaction/script as the writes* that the lease
still holds this token and has not expired; otherwise nothing is written and
:class:`~tmy.errors.LeaseLost` is raised. The holder also counts the lease lost
on its own, with a monotonic clock, once ``ttl`` has passed since the last
take/renew that succeeded (measured from when that call was *sent*): a
resumed process refuses to write before even asking the store.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tmy.errors import LeaseLost, StoreError

log = logging.getLogger("tmy.store")

LEASE_TTL = 5.0
"""Seconds a lease lives without renewal: how long a dead holder can block others."""

RENEW_EVERY = 1 / 3
"""A held lease is renewed after this fraction of its length has passed."""


def _proc_stat(pid: int | str) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of a process from ``/proc``; None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces and ")"
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _machine() -> tuple[str, str] | None:
    """(boot id, PID namespace) of this process, or None where ``/proc`` cannot tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    pidns = "".join(c for c in pidns if c.isdigit())
    if not boot or not pidns or ":" in boot:
        return None
    return boot, pidns


_identity: tuple[int, tuple[str, str] | None, str] | None = None  # (pid, machine, identity)


def _this_process() -> tuple[tuple[str, str] | None, str]:
    """(machine, identity) of this process, read once per PID (a fork recomputes it)."""
    global _identity
    pid = os.getpid()
    if _identity is None or _identity[0] != pid:
        machine, stat = _machine(), _proc_stat("self")
        ident = "" if machine is None or stat is None else ":".join((*machine, str(pid), stat[1]))
        _identity = (pid, machine, ident)
    return _identity[1], _identity[2]


def holder_identity() -> str:
    """``boot:pidns:pid:start`` of this process ("" where it cannot be known)."""
    return _this_process()[1]


def new_token() -> str:
    """A fresh lease token naming this process as its holder."""
    return f"{holder_identity()}/{uuid.uuid4().hex}"


def holder_is_gone(token: str) -> bool:
    """True only when ``token``'s holder was a process of this machine and PID
    namespace that has since died (or whose PID a newer process now has).

    Anything uncertain — another machine or container, no ``/proc``, a process
    whose state cannot be read — counts as alive: its lease is left to expire.
    """
    ident, sep, _ = token.rpartition("/")
    parts = ident.split(":")
    if not sep or len(parts) != 4:
        return False
    boot, pidns, pid_text, start = parts
    machine, me = _this_process()
    if machine != (boot, pidns) or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return ident != me  # our PID in an earlier process's token
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # exists, but not ours to signal
    stat = _proc_stat(pid)
    if stat is None:
        return False  # hidden (hidepid) or vanished just now: be conservative
    state, started = stat
    return state in ("Z", "X", "x") or started != start


class Lease:
    """A held lease, as ``async with store.lock(key) as lease`` yields it.

    ``token`` is what the store holds for it (the fence ``Store.commit``
    compares); ``lost`` turns True once a renewal found the lease gone, or once
    its locally computed expiry (``ttl`` after the last take/renew that
    succeeded, on the monotonic clock, counted from when that call was sent)
    has passed — and stays True. ``check()`` raises :class:`LeaseLost` then.
    """

    __slots__ = ("_expires", "_lost", "key", "token", "ttl")

    def __init__(self, key: str, token: str, ttl: float) -> None:
        self.key = key
        self.token = token
        self.ttl = ttl
        self._expires = math.inf  # set by the holder once taken
        self._lost = False

    def __repr__(self) -> str:
        return f"Lease({self.key!r}, lost={self.lost})"

    def _held_from(self, sent_at: float) -> None:
        """A take/renew sent at ``sent_at`` (monotonic) succeeded: it lives ``ttl`` from then."""
        if not self._lost:
            self._expires = sent_at + self.ttl

    def _mark_lost(self) -> None:
        self._lost = True

    @property
    def lost(self) -> bool:
        """True once the lease is known or presumed lost (see the class docstring)."""
        if not self._lost and time.monotonic() >= self._expires:
            self._lost = True
        return self._lost

    def check(self) -> None:
        """Raise :class:`LeaseLost` when :attr:`lost`."""
        if self.lost:
            raise LeaseLost(
                f"lease {self.key!r} was lost (expired after {self.ttl:g}s without renewal, "
                "or taken by another holder): nothing more is written under it",
                self.key,
            )


def check_fence(fence: Any) -> list[Lease]:
    """The leases of a ``commit``'s ``fence``, each checked locally first (LeaseLost)."""
    leases = list(fence)
    for lease in leases:
        if not isinstance(lease, Lease):
            raise StoreError(f"commit fence takes the Lease objects lock() yields, not {lease!r}")
        lease.check()
    return leases


def lost_in_store(lease: Lease, where: str) -> LeaseLost:
    """The error of a fenced commit the store refused: ``lease`` no longer holds."""
    lease._mark_lost()
    return LeaseLost(
        f"{where}: lease {lease.key!r} is no longer held by this holder (expired or taken "
        "by another): the fenced write was refused, nothing was written",
        lease.key,
    )


class KeyedLocks:
    """One ``asyncio.Lock`` per key, created on demand and dropped when idle.

    Both backends serialise same-key work inside a process with these (so local
    contention queues instead of fighting in the database); dropping idle locks
    keeps the map as small as the number of keys in use right now.
    """

    def __init__(self) -> None:
        self._locks: dict[str, list[Any]] = {}  # key -> [Lock, users]

    def __len__(self) -> int:
        return len(self._locks)

    async def acquire(self, key: str, timeout: float | None = None) -> None:
        """Take the lock of ``key``; TimeoutError after ``timeout`` seconds of waiting."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            if timeout is None:
                await entry[0].acquire()
            else:
                async with asyncio.timeout(max(timeout, 0.0)):
                    await entry[0].acquire()
        except BaseException:
            self._forget(key, entry)
            raise

    def release(self, key: str) -> None:
        """Give back the lock of ``key`` taken with :meth:`acquire`."""
        entry = self._locks[key]
        entry[0].release()
        self._forget(key, entry)

    def _forget(self, key: str, entry: list[Any]) -> None:
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[key]


@asynccontextmanager
async def hold_lease(
    local: KeyedLocks,
    key: str,
    *,
    where: str,
    ttl: float,
    wait: float,
    take: Callable[[], Awaitable[float | None]],
    give: Callable[[], Awaitable[None]],
    renew: Callable[[], Awaitable[bool]],
    token: str = "",
) -> AsyncIterator[Lease]:
    """Hold the lease ``key`` for the body of an ``async with``; yields its :class:`Lease`.

    ``take()`` tries once: None when the lease is now ours, else the longest
    sensible pause (in seconds) before trying again. ``renew()`` extends a
    lease we hold by ``ttl`` (False when it is no longer ours); it runs every
    ``ttl / 3`` while the body runs. ``give()`` releases it; it runs shielded,
    so a cancelled holder still gives the lease back. ``token`` is the token
    ``take`` stores (carried by the Lease for fenced commits).
    """
    lease = Lease(key, token, ttl)
    deadline = time.monotonic() + wait
    try:
        await local.acquire(key, timeout=wait)
    except TimeoutError:
        raise _timeout(where, key, wait) from None
    try:
        delay = 0.0005
        while True:
            sent = time.monotonic()
            if (pause := await take()) is None:
                lease._held_from(sent)
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timeout(where, key, wait)
            await asyncio.sleep(min(delay, left, pause))
            delay = min(delay * 2, 0.01)
        # most bodies end long before the first renewal is due: a timer, not a task,
        # until then (cheap to cancel); the renewing task starts when it fires
        loop = asyncio.get_running_loop()
        renewing: list[asyncio.Task[None]] = []
        every = ttl * RENEW_EVERY
        timer = loop.call_later(
            every, lambda: renewing.append(loop.create_task(_keep_renewed(renew, lease, every)))
        )
        try:
            yield lease
        finally:
            # renew and give are both compare-token scripts/statements: a renewal
            # still in flight cannot resurrect the lease once it is given back
            timer.cancel()
            for task in renewing:
                task.cancel()
            try:
                await asyncio.shield(give())
            except StoreError as exc:
                log.warning("lease %r not released (%s); it expires in %ss", key, exc, ttl)
    finally:
        local.release(key)


async def _keep_renewed(renew: Callable[[], Awaitable[bool]], lease: Lease, every: float) -> None:
    """Renew the lease now and every ``every`` seconds until cancelled or lost.

    A failed renewal (store unreachable) is retried at the next tick: the lease
    is only lost if the store stays unreachable for the rest of its length. A
    lease already presumed lost locally is not renewed (it stays lost: a
    renewal that still finds the token in the store must not revive a holder
    that may have been paused while another took its work).
    """
    key = lease.key
    while True:
        if lease.lost:
            log.warning("lease %r expired before it could be renewed (holder paused?)", key)
            return
        try:
            sent = time.monotonic()
            if not await renew():
                lease._mark_lost()
                log.warning("lease %r was lost (expired or taken) while its holder worked", key)
                return
            lease._held_from(sent)
        except StoreError as exc:
            log.warning("lease %r not renewed (%s); trying again in %.3gs", key, exc, every)
        except Exception:  # never let the renewer die silently with the lease held
            log.exception("lease %r: renewal crashed; trying again in %.3gs", key, every)
        await asyncio.sleep(every)


def lease_ttl_option(value: Any, url: str) -> float:
    """The ``?lease_ttl=`` store URL option: the default lease length in seconds."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (0 < number < math.inf):
        raise StoreError(
            f"store {url!r}: lease_ttl must be a number of seconds above 0, not {value!r}"
        )
    return number


def _timeout(where: str, key: str, wait: float) -> StoreError:
    return StoreError(f"{where}: lock {key!r} still held by someone else after {wait:g}s")
