"""The overlay stores' lexical index: reads through to the real store, writes kept as a list.

:class:`~tmy.store.overlay.OverlayStore` (``explain``, ``ctx``, a scheduled run's
buffer) must not change the real store, and an index write cannot be laid over
the real index the way a value is laid over a key. So index writes are logged
here, in order, and applied nowhere: an explanation's own REMEMBER is not recalled
by its later steps. A caller that commits the overlay's writes to the real store
(a scheduled run) replays the log there after its commit (:meth:`IndexLog.replay_index`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tmy.errors import TmyError
from tmy.store.base import Store


class IndexLog:
    """The ``index_*`` methods of an overlay over ``real`` (see the module doc)."""

    real: Store

    def index_writes(self) -> list[tuple[str, tuple[Any, ...]]]:
        """The index writes made here, in order: (method name, arguments)."""
        return list(self.__dict__.get("_index_log", []))

    async def replay_index(self, store: Store) -> None:
        """Apply :meth:`index_writes` to ``store`` (after committing the overlay's writes)."""
        await replay(store, self.index_writes())

    def _log_index(self, name: str, *args: Any) -> None:
        self.__dict__.setdefault("_index_log", []).append((name, args))

    async def index_put(self, ns: str, docs: Sequence[Any]) -> None:
        self._log_index("index_put", ns, list(docs))

    async def index_remove(self, ns: str, docs: Sequence[str]) -> int:
        self._log_index("index_remove", ns, list(docs))
        return 0

    async def index_order(self, ns: str, orders: Any) -> None:
        self._log_index("index_order", ns, dict(orders))

    async def index_drop(self, ns: str) -> int:
        self._log_index("index_drop", ns)
        return 0

    async def index_stats(self, ns: str, terms: Sequence[str] = ()) -> Any:
        return await self.real.index_stats(ns, terms)

    async def index_search(self, ns: str, terms: Sequence[str], **kw: Any) -> Any:
        return await self.real.index_search(ns, terms, **kw)

    async def index_search_many(
        self, namespaces: Sequence[str], terms: Sequence[str], **kw: Any
    ) -> Any:
        return await self.real.index_search_many(namespaces, terms, **kw)

    async def index_lowest(self, ns: str, n: int, *, term: str | None = None) -> Any:
        return await self.real.index_lowest(ns, n, term=term)


async def replay(
    store: Store,
    writes: Sequence[tuple[str, tuple[Any, ...]]],
    failed: Callable[[str, tuple[Any, ...], TmyError], None] | None = None,
) -> None:
    """Apply logged index ``writes`` to ``store`` in order. Without ``failed`` the first
    failure is raised; with it, each failure is handed to it and the rest still applied."""
    for name, args in writes:
        try:
            await getattr(store, name)(*args)
        except TmyError as exc:
            if failed is None:
                raise
            failed(name, args, exc)
