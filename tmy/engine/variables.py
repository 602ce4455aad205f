"""A run's variables: locals in a dict, declared variables in the store.

Declared variables are fetched from the store the first time a run needs them
(one ``get_many`` round-trip for all the names a value uses) and written
through at once. A run keeps what it read — a snapshot, updated by its own
writes — so a five-step chain does not re-read the same variable five times.
Where freshness matters it is guaranteed: list modes and nested saves are
atomic updates in the store, and a step that reads the variable it saves to
re-reads it after taking the variable's lock.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from typing import Any

from tmy.engine.paths import Path, get_in, set_in
from tmy.engine.values import LIST_MODES
from tmy.errors import EvalError, PathError
from tmy.message import Message
from tmy.rulebook.model import VariableDecl
from tmy.store.base import MISSING, Store
from tmy.store.leases import LEASE_TTL


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


escape_key_part = _escape  # for other modules' keys built from ids (admin's chat switch)


def variable_key(decl: VariableDecl, message: Message) -> str:
    """Store key of a declared variable for the conversation of ``message``."""
    if decl.scope == "global":
        return f"var/global/{decl.name}"
    if decl.scope == "chat":
        return f"var/chat/{_escape(message.platform)}/{_escape(message.chat)}/{decl.name}"
    return f"var/user/{_escape(message.platform)}/{_escape(message.user)}/{decl.name}"


def conversation_key(kind: str, message: Message) -> str:
    """Key of per-conversation state (history, summary, session) for ``message``."""
    return f"{kind}/{_escape(message.platform)}/{_escape(message.chat)}/{_escape(message.user)}"


def list_take(value: Any, mode: str, where: str) -> tuple[Any, Any]:
    """Apply a list mode to ``value`` in place; returns (value, member)."""
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
    else:  # pragma: no cover - callers check LIST_MODES
        raise EvalError(f"unknown list mode {mode!r}; use one of {', '.join(LIST_MODES)}")
    return value, member


class Variables(Mapping[str, Any]):
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
        self.cache: dict[str, Any] = {}
        self._keys: dict[str, str] = {}

    @asynccontextmanager
    async def holding(self, names: Iterable[str], ttl: float = LEASE_TTL) -> AsyncIterator[None]:
        """Hold the store locks of ``names`` (in the order given) for a block.

        ``ttl`` is the lease length; the store renews it while the block runs.
        """
        async with AsyncExitStack() as stack:
            for name in names:
                if name not in self.held:
                    await stack.enter_async_context(self.store.lock(self.key(name), ttl=ttl))
                    self.held.add(name)
                    stack.callback(self.held.discard, name)
            yield

    def _guard(self, name: str) -> AbstractAsyncContextManager[None]:
        """The lock a write to ``name`` needs, if a locked step may be mid-way on it."""
        if name in self.locked and name not in self.held:
            return self.holding((name,))
        return nullcontext()

    # -- Mapping (sync: values must have been fetched) ----------------------------------------

    def __getitem__(self, name: str) -> Any:
        if name in self.declared:
            return self.cache[name]
        return self.locals[name]

    def __contains__(self, name: object) -> bool:
        return name in self.declared or name in self.locals

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
        """Drop cached persistent values (all, or ``names``): re-read after taking a lock."""
        if names is None:
            self.cache.clear()
            return
        for name in names:
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
                self.locals[name] = set_in(copy.deepcopy(self.locals.get(name)), path, value)
            else:
                self.locals[name] = value
            return
        if not path.segments:
            async with self._guard(name):
                await self.store.set(self.key(name), value)
            self.cache[name] = value
            return

        def apply(current: Any) -> tuple[Any, Any]:
            root = self.default(name) if current is MISSING else current
            root = set_in(root, path, value)
            return root, root

        async with self._guard(name):
            self.cache[name] = await self.store.update(self.key(name), apply)

    async def take(self, path: Path, mode: str) -> Any:
        """SHIFT/POPUP/LOOPBACK/LOOPFRONT on the list at ``path`` (atomic when persistent)."""
        name = path.root
        if name not in self.declared:
            if name not in self.locals:
                raise EvalError(f"undefined variable {name!r}")
            # change a copy: the list may be shared with another variable (a template
            # like "{jokes}" passes a global's list itself); this run sees the change
            root = self.locals[name] = copy.deepcopy(self.locals[name])
            target = get_in(root, path) if path.segments else root
            return list_take(target, mode, str(path))[1]

        def apply(current: Any) -> tuple[Any, Any]:
            root = self.default(name) if current is MISSING else current
            try:
                target = get_in(root, path) if path.segments else root
            except PathError as exc:
                raise EvalError(str(exc)) from None
            _, member = list_take(target, mode, str(path))
            return root, (root, member)

        async with self._guard(name):
            root, member = await self.store.update(self.key(name), apply)
        self.cache[name] = root
        return member
