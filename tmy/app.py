"""The one lifespan that opens and closes everything a run needs.

``async with App(settings) as app:`` opens the store, registers the built-in
and plugin executors, loads the rules and builds the engine; leaving the block
waits for runs in flight, then closes clients and the store. The daemon, the
CLI commands and the test harness all go through here, so they behave alike.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from tmy import metrics, redact
from tmy.admin import AdminCommands
from tmy.config import Settings
from tmy.engine.core import Engine, Services
from tmy.executors import default_registry
from tmy.executors.plugins import load_plugins
from tmy.executors.registry import Registry
from tmy.logs import get_logger
from tmy.reload import Reloader
from tmy.rulebook.loader import load_rulebook, load_sources
from tmy.rulebook.model import Rulebook
from tmy.store import codec, open_store
from tmy.store.base import Store
from tmy.store.metered import metered

log = get_logger("tmy")


def build_registry(settings: Settings) -> Registry:
    """Built-in executors plus the plugins folder's."""
    registry = default_registry()
    for extension in EXTENSIONS:
        extension(registry, settings)
    load_plugins(Path(settings.plugins), registry)
    return registry


# Callables (registry, settings) -> None that add executors/hooks (the LLM answerer registers here).
EXTENSIONS: list[Any] = []
# Callables (services) -> None run when services are built (e.g. to attach an LLM client).
SERVICE_HOOKS: list[Any] = []
# Callables (services) -> None that ``serve`` runs once started (e.g. "the mock answers").
SERVE_NOTICES: list[Any] = []


def log_rule_warnings(app: App) -> None:
    """Log what `check` would warn about (the daemon does this once it is serving)."""
    assert app.engine is not None
    for warning in app.engine.rulebook.warnings:
        log.warning("rules.warning", detail=warning)


class App:
    """Store + executors + rules + engine, opened and closed together."""

    def __init__(
        self,
        settings: Settings,
        *,
        rule_texts: dict[str, str] | None = None,
        store: Store | None = None,
    ) -> None:
        self.settings = settings
        self._rule_texts = rule_texts
        self._given_store = store
        self.store: Store | None = None
        self.engine: Engine | None = None
        self.registry: Registry | None = None
        self.daemon: Any = None  # the serving Daemon (adapters, send), when there is one
        self.reloader: Reloader | None = None
        self.commands: AdminCommands | None = None

    def load_rules(self, registry: Registry | None = None) -> Rulebook:
        """Load every rule against ``registry`` (default: the App's own)."""
        registry = registry or self.registry
        assert registry is not None
        if self._rule_texts is not None:
            return load_sources(
                ((Path(name), text) for name, text in self._rule_texts.items()),
                registry,
                store_url=self.settings.store,
            )
        return load_rulebook(self.settings.rules, registry, store_url=self.settings.store)

    async def __aenter__(self) -> App:
        self.registry = build_registry(self.settings)
        rulebook = self.load_rules()
        redact.add_url(self.settings.store)  # a store password never reaches an error or the log
        for key in self.settings.http_api_keys:  # the listener's keys: masked, never remembered
            redact.add(key)
        # the OneBot token too, even when no adapter is built (`ask`, `chat`, rule tests)
        redact.add((self.settings.adapters.get("onebot") or {}).get("access_token"))
        codec.MAX_VALUE_BYTES = self.settings.max_value_bytes
        self.store = self._given_store or metered(open_store(self.settings.store))
        await self.store.open()
        try:
            services = Services(self.settings, self.store, self.registry)
            for hook in SERVICE_HOOKS:
                hook(services)
            self.engine = Engine(rulebook, services)
            self.reloader = Reloader(self, on_result=metrics.reload)
            self.commands = AdminCommands(self, self.settings.admin_prefix)
            self.commands.reload = self.reloader.reload
            self.engine.commands = self.commands
            self.engine.switch = self.commands.switch
        except BaseException:  # a bad setting found now must not leave the store open
            await self.__aexit__()
            raise
        # The rulebook lives as long as the daemon: move it out of the collector's
        # sight, or every full collection walks all rules (measurable at 10,000 rules).
        # No gc.collect() first: loading frees its garbage by reference counting,
        # and a full collection over 100,000 rules costs most of a second.
        gc.freeze()
        log.info(
            "app.ready",
            rules=len(rulebook.rules),
            files=len(rulebook.files),
            store=_safe_url(self.settings.store),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.engine is not None:
            await self.engine.drain(self.settings.shutdown_grace)
            await self.engine.services.aclose()
        if self.store is not None and self._given_store is None:
            await self.store.close()


def _safe_url(url: str) -> str:
    """A store URL with any password removed, for logs."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


import tmy.llm.autoinstall  # noqa: E402, F401  (the LLM answerer: runs tmy.llm.install())
from tmy.memory import autoinstall as _memory  # noqa: E402, F401  (REMEMBER, FORGET, memory:)
