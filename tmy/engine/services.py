"""What every run and executor can reach: settings, store, registry, extension state, HTTP.

One :class:`Services` is built per app, before the engine, and handed to it;
the engine records itself on it (tool calls run other rules through it).
Extensions reach their own state through ``state`` — what each extension's
lifespan yielded, by extension name — with a typed accessor of their own
(``tmy.llm.runtime_of(services)``); nothing is assigned onto it from outside.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tmy.config import Settings
from tmy.executors.registry import Registry
from tmy.http_client import new_http_client
from tmy.store.base import Store

if TYPE_CHECKING:  # httpx: deferred, it is ~50 ms of every CLI start
    import httpx

    from tmy.engine.core import Engine

_NO_STATE: Mapping[str, Any] = MappingProxyType({})


class Services:
    """Settings, store, registry and extension state of one app, and its shared HTTP client.

    ``state`` is kept as given, not copied: the app passes a read-only view of
    the dict its extension lifespans fill, and the view stays current.
    """

    __slots__ = ("_http", "_owns_http", "engine", "registry", "settings", "state", "store")

    def __init__(
        self,
        settings: Settings,
        store: Store,
        registry: Registry,
        state: Mapping[str, Any] = _NO_STATE,
        *,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.state = state
        self.engine: Engine | None = None  # set by the Engine built on these services
        self._http = http
        self._owns_http = http is None  # a client given is closed by whoever made it

    @property
    def owns_http(self) -> bool:
        """Whether these services make (and close) their own HTTP client: True unless a
        client was given; a caller choosing another transport than that client may."""
        return self._owns_http

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared client (:mod:`tmy.http_client`), created on first use unless given."""
        if self._http is None:
            self._http = new_http_client()
        return self._http

    def derive(
        self,
        store: Store,
        *,
        http: httpx.AsyncClient | None = None,
        state: Mapping[str, Callable[[Services], Any]] | None = None,
    ) -> Services:
        """The same services over another store, for a second engine (a dry run, a
        buffered scheduled run): settings, registry, state and — unless ``http`` is
        given — the same HTTP client; no engine until one is built on them.

        ``state``: extension name -> what makes that extension's state for the
        derived services (an extension's state may hold the services it runs on:
        explain's dry run gives the LLM runtime its recorded network this way);
        the other extensions' states are shared, and this object's are untouched.
        """
        if not state:
            return Services(self.settings, store, self.registry, self.state, http=http or self.http)
        states = dict(self.state)
        derived = Services(
            self.settings, store, self.registry, MappingProxyType(states), http=http or self.http
        )
        for name, make in state.items():
            states[name] = make(derived)
        return derived

    def replace_registry(self, registry: Registry) -> None:
        """Put a reload's executors in force (the engine does, with the new rules)."""
        self.registry = registry

    async def aclose(self) -> None:
        """Close the HTTP client if these services created it."""
        if self._http is not None and self._owns_http:
            await self._http.aclose()
            self._http = None
