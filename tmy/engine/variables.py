"""A run's variables: locals in a dict, declared variables in the store.

Declared variables are fetched from the store the first time a run needs them
(one ``get_many`` round-trip for all the names a value uses) and written
through at once. A run keeps what it read — a snapshot, updated by its own
writes — so a five-step chain does not re-read the same variable five times.
Where freshness matters it is guaranteed: list modes and nested saves are
atomic updates in the store, and a step that reads the variable it saves to
re-reads it after taking the variable's lock.

Writes to a variable the run holds locked are fenced by its lease
(``Store.commit(…, fence=[lease])``): a run paused or cut off past its lease
writes nothing. Inside an atomic span (:meth:`Variables.buffering`) those
writes are not sent at all until the span ends: they are kept in ``pending``
(and in the snapshot, so the run's later steps read its own writes) and
applied together by :meth:`Variables.flush` in one fenced store commit — a
crash in between leaves all of them or none.

A variable declared ``rank: true`` has a leaderboard per platform beside its
values; every write path here tells it (:class:`~tmy.engine.boards.Leaderboards`).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from typing import Any

from tmy.engine.boards import Board, Leaderboards
from tmy.engine.context import context_local
from tmy.engine.keys import variable_key
from tmy.errors import EvalError, PathError
from tmy.logs import get_logger
from tmy.message import Message
from tmy.rulebook.model import CONTEXT_LOCALS, VariableDecl
from tmy.store.base import MISSING, Store
from tmy.store.leases import Lease
from tmy.values import randomness
from tmy.values.compiled import LIST_MODES
from tmy.values.paths import Path, get_in, set_in

log = get_logger("tmy.run")


def list_take(value: Any, mode: str, where: str, r: float = 0.0) -> tuple[Any, Any]:
    """Apply a list mode to ``value`` in place; returns (value, member).

    ``r`` (in [0, 1)) picks PICK's member: drawn by the caller once, so a store
    update that retries its function removes the same position of the list it sees.
    """
    if not isinstance(value, list):
        kind = type(value).__name__ if value is not MISSING else "nothing"
        raise EvalError(f"input {mode} needs a list, but {where} holds {kind}")
    if not value:
        raise EvalError(f"input {mode}: the list {where} is empty")
    if mode == "SHIFT":
        member = value.pop(0)
    elif mode == "POPUP":
        member = value.pop()
    elif mode == "LOOPBACK":
        member = value.pop(0)
        value.append(member)
    elif mode == "LOOPFRONT":
        member = value.pop()
        value.insert(0, member)
    elif mode == "PICK":
        member = value.pop(min(int(r * len(value)), len(value) - 1))
    else:  # pragma: no cover - callers check LIST_MODES
        raise EvalError(f"unknown list mode {mode!r}; use one of {', '.join(LIST_MODES)}")
    return value, member


def _drew(mode: str, path: Path, member: Any) -> Any:
    """``member``, told to ``explain`` (:func:`~tmy.values.randomness.note`) when PICK drew it."""
    if mode == "PICK":
        randomness.note(f"PICK {path}", member)
    return member


class Variables(Leaderboards, Mapping[str, Any]):
    """The names a run's templates and expressions see."""

    def __init__(
        self,
        locals_: dict[str, Any],
        declared: Mapping[str, VariableDecl],
        store: Store,
        message: Message,
        locked: frozenset[str] = frozenset(),
    ) -> None:
        self.locals = locals_
        self.declared = declared
        self.store = store
        self.message = message
        self.locked = locked  # variables whose every write takes their lock
        self.held: set[str] = set()  # locks this run holds now
        self.leases: dict[str, Lease] = {}  # the lease of each held lock
        self.pending: dict[str, Any] | None = None  # an atomic span's buffered writes
        self.span: frozenset[str] = frozenset()  # the variables whose writes are buffered
        self.cache: dict[str, Any] = {}
        self.boards: dict[str, Board] = {}  # leaderboards fetched by this run
        self._keys: dict[str, str] = {}

    @asynccontextmanager
    async def holding(self, names: Iterable[str], ttl: float | None = None) -> AsyncIterator[None]:
        """Hold the store locks of ``names`` (in the order given) for a block.

        ``ttl`` is the lease length (default: the store's ``lease_ttl``); the
        store renews it while the block runs.
        """
        async with AsyncExitStack() as stack:
            for name in names:
                if name not in self.held:
                    key = self.key(name)
                    lock = self.store.lock(key) if ttl is None else self.store.lock(key, ttl=ttl)
                    lease = await stack.enter_async_context(lock)
                    self.held.add(name)
                    self.leases[name] = lease
                    stack.callback(self.leases.pop, name, None)
                    stack.callback(self.held.discard, name)
            yield

    @asynccontextmanager
    async def buffering(self, names: Iterable[str]) -> AsyncIterator[None]:
        """Keep writes to the span's variables ``names`` in ``pending`` for a block.

        The caller applies them with :meth:`flush` before the locks are given
        back; whatever is still pending when the block ends (an error, a
        cancelled run) is dropped: none of the span's writes reach the store.
        Only ``names`` are buffered: another locked variable written inside the
        span (a plugin's ``ctx.set``) holds its own lock just for that write, so
        its write is committed at once, fenced by that lock, before it is given back.
        """
        self.pending = {}
        self.span = frozenset(names)
        try:
            yield
        finally:
            self.pending = None
            self.span = frozenset()

    async def flush(self, names: Iterable[str]) -> int:
        """Apply the buffered writes in ONE store commit fenced by the leases of ``names``.

        Returns the number of keys written. Raises ``LeaseLost`` (nothing
        written) when a lease was lost meanwhile.
        """
        pending = self.pending
        if not pending:
            return 0
        writes = [(self.key(name), value, None) for name, value in pending.items()]
        fence = [self.leases[n] for n in names if n in self.leases]
        await self.store.commit(writes, fence=fence)
        written = list(pending)
        pending.clear()
        for name in written:
            await self.written(name)
        return len(writes)

    def lost_lease(self) -> Lease | None:
        """A held lease found lost (expired or taken), if any."""
        return next((lease for lease in self.leases.values() if lease.lost), None)

    async def _put_held(self, name: str, root: Any) -> None:
        """Write a held variable's new value: buffered in a span, else one fenced commit."""
        if self.pending is not None and name in self.span:
            lease = self.lost_lease()
            if lease is not None:
                lease.check()  # raises LeaseLost: the span ends, nothing is written
            self.pending[name] = root
            self.cache[name] = root
            return  # its board follows when the span's writes are flushed
        await self.store.commit([(self.key(name), root, None)], fence=[self.leases[name]])
        self.cache[name] = root
        await self.written(name)

    def _guard(self, name: str) -> AbstractAsyncContextManager[None]:
        """The lock a write to ``name`` needs, if a locked step may be mid-way on it."""
        if name in self.locked and name not in self.held:
            return self._holding_fresh(name)
        return nullcontext()

    @asynccontextmanager
    async def _holding_fresh(self, name: str) -> AsyncIterator[None]:
        async with self.holding((name,)):
            self.forget((name,))  # what the run read before the lock may be stale now
            yield

    # -- Mapping (sync: values must have been fetched) ----------------------------------------

    def __getitem__(self, name: str) -> Any:
        if name in self.declared:
            return self.cache[name]
        try:
            return self.locals[name]
        except KeyError:
            if name not in CONTEXT_LOCALS:
                raise
        # EVENT, IMAGES, …: made from the message the first time the run names one
        value = self.locals[name] = context_local(self.message, name, self.locals)
        return value

    def __contains__(self, name: object) -> bool:
        return name in self.declared or name in self.locals or name in CONTEXT_LOCALS

    def __iter__(self) -> Iterator[str]:
        yield from self.locals
        yield from self.declared

    def __len__(self) -> int:
        return len(self.locals) + len(self.declared)

    # -- persistence ---------------------------------------------------------------------------

    def key(self, name: str) -> str:
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = variable_key(self.declared[name], self.message)
        return key

    def default(self, name: str) -> Any:
        return copy.deepcopy(self.declared[name].default)

    def is_persistent(self, name: str) -> bool:
        return name in self.declared

    def forget(self, names: Iterable[str] | None = None) -> None:
        """Drop cached persistent values (all, or ``names``): re-read after taking a lock.

        A value with a buffered write is kept: it is newer than the store's.
        """
        pending = self.pending or {}
        for name in list(self.cache) if names is None else names:
            if name not in pending:
                self.cache.pop(name, None)

    async def fetch(self, names: Iterable[str]) -> None:
        """Load the declared variables among ``names`` that are not cached yet."""
        wanted = [n for n in names if n in self.declared and n not in self.cache]
        if not wanted:
            return
        values = await self.store.get_many([self.key(n) for n in wanted])
        for name, value in zip(wanted, values, strict=True):
            self.cache[name] = self.default(name) if value is MISSING else value

    async def read(self, path: Path) -> Any:
        await self.fetch((path.root,))
        return self.peek(path)

    def peek(self, path: Path) -> Any:
        """:meth:`read` for a root already fetched (inside a store update: no awaiting)."""
        try:
            root = self[path.root]
        except KeyError:
            raise EvalError(f"undefined variable {path.root!r}") from None
        return get_in(root, path) if path.segments else root

    async def write(self, path: Path, value: Any) -> None:
        """Store ``value`` at ``path``: write-through for declared variables."""
        name = path.root
        if name not in self.declared:
            if path.segments:  # a copy: the old root may be shared (a global's value)
                self.locals[name] = set_in(copy.deepcopy(self.get(name)), path, value)
            else:
                self.locals[name] = value
            return
        async with self._guard(name):
            if name in self.held:  # ours (held, or just taken by the guard): fenced write
                if path.segments:  # computed on the snapshot the lock keeps fresh
                    await self.fetch((name,))
                    value = set_in(copy.deepcopy(self.cache[name]), path, value)
                await self._put_held(name, value)
            elif path.segments:

                def apply(current: Any) -> tuple[Any, Any]:
                    root = self.default(name) if current is MISSING else current
                    root = set_in(root, path, value)
                    return root, root

                self.cache[name] = await self.store.update(self.key(name), apply)
                await self.written(name)
            else:
                await self.store.set(self.key(name), value)
                self.cache[name] = value
                await self.written(name)

    async def take(self, path: Path, mode: str) -> Any:
        """SHIFT/POPUP/LOOPBACK/LOOPFRONT/PICK on the list at ``path`` (atomic when persistent).

        PICK's random number is drawn once, here, from the run's generator
        (:func:`tmy.values.randomness.current`: seeded in rule tests), before the
        store update whose function may be retried.
        """
        name = path.root
        r = randomness.current().random() if mode == "PICK" else 0.0
        if name not in self.declared:
            if name not in self:
                raise EvalError(f"undefined variable {name!r}")
            # change a copy: the list may be shared with another variable (a template
            # like "{jokes}" passes a global's list itself); this run sees the change
            root = self.locals[name] = copy.deepcopy(self[name])
            target = get_in(root, path) if path.segments else root
            return _drew(mode, path, list_take(target, mode, str(path), r)[1])

        def apply(current: Any) -> tuple[Any, Any]:
            root = self.default(name) if current is MISSING else current
            try:
                target = get_in(root, path) if path.segments else root
            except PathError as exc:
                raise EvalError(str(exc)) from None
            _, member = list_take(target, mode, str(path), r)
            return root, (root, member)

        async with self._guard(name):
            if name in self.held:  # the lock is ours: take from the snapshot, fenced write
                await self.fetch((name,))
                root, member = apply(copy.deepcopy(self.cache[name]))[1]
                await self._put_held(name, root)
                return _drew(mode, path, member)
            root, member = await self.store.update(self.key(name), apply)
        self.cache[name] = root
        await self.written(name)
        return _drew(mode, path, member)
