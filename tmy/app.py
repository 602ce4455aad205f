"""The one lifespan: everything a run needs, opened in order and closed in reverse.

``async with App(settings, extensions=…) as app:`` opens, in one
:class:`~contextlib.AsyncExitStack`:

1. the registry — built-in executors, each extension's executors and keys
   (:meth:`Registry.install`), the ``plugins/`` folder — and the rulebook
   loaded against it (no I/O: a bad rule stops start-up before anything opens);
2. the store, the shared services, and each extension's own lifespan (what it
   yields is its state, read-only in ``app.state`` / ``services.state``);
3. the chat switch, the ``.tmy`` chat commands and the engine;
4. when serving: the web server and the adapters (the HTTP listener first,
   with the admin API, extensions' routes and, when ``console.enabled``, the web
   console mounted, then every configured chat platform and those passed as
   ``adapters=``), each extension's serving lifespan, the cron scheduler and the
   file watcher.

Leaving the block closes them in reverse: no new files, the scheduler and the
adapters stopped together (posts and replies in flight get one
``limits.shutdown_grace``), runs drained (the same), extensions, clients and the
store closed. The daemon (:func:`serve`), the CLI and the test harness all go
through here. The app is *given* its extensions (the CLI and :mod:`tmy.testing`
pass :func:`tmy.builtins.extensions`) and imports one: with the cron extension,
serving runs :mod:`tmy.cron`'s scheduler, which needs the adapters' ``send`` and
the reloader (an extension's serving lifespan has neither).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tmy import collector, console, cron, logs, metrics, redact
from tmy.adapters.http import HttpAdapter
from tmy.command import Command, command_table
from tmy.commands import http as admin_http
from tmy.commands.chat import ChatCommands
from tmy.commands.lint import rule_warnings
from tmy.config import Settings, with_sections
from tmy.daemon import (
    Adapters,
    build_adapters,
    disabled_for,
    health_report,
    load_what_serving_uses,
)
from tmy.engine.core import Engine
from tmy.engine.services import Services
from tmy.engine.switch import ChatSwitch
from tmy.errors import AdapterError
from tmy.executors import default_registry
from tmy.executors.plugins import load_plugins
from tmy.executors.registry import Registry
from tmy.extension import Extension, add_health, check_unique, extension_routes
from tmy.logs import get_logger
from tmy.message import Outgoing, Target
from tmy.reload import Reloader, ReloadResult, watch
from tmy.rulebook.loader import load_rulebook, load_sources
from tmy.rulebook.model import Rulebook
from tmy.store import open_store
from tmy.store.base import Store
from tmy.store.metered import metered
from tmy.types import Adapter

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

log = get_logger("tmy")


def build_registry(settings: Settings, extensions: Iterable[Extension] = ()) -> Registry:
    """Built-in executors, then each extension's (in order), then the plugins folder's."""
    registry = default_registry(extensions, settings)
    load_plugins(Path(settings.plugins), registry)
    return registry


def check_warnings(app: App, rulebook: Rulebook) -> list[str]:
    """What `check` warns about ``rulebook`` in this app (collisions across files,
    adapters the config leaves off; an adapter given to the app counts as enabled)."""
    return rule_warnings(rulebook, disabled_for(app.settings, app.adapters))


class App:
    """Registry + rules + store + extensions + engine (+ adapters, cron, watcher when serving).

    ``extensions``: what the app is made of besides the core (see the module
    docstring). ``adapters``: extra adapter objects started with the configured
    ones (a test's loopback adapter); giving any means serving. ``serve``: open
    the serving part (web server, adapters, cron, watcher) even without extra
    adapters — :func:`serve` does. ``http``: the client steps send through instead
    of the shared one (rule tests give a canned transport); closed by whoever made it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        extensions: Iterable[Extension] = (),
        rule_texts: dict[str, str] | None = None,
        store: Store | None = None,
        adapters: Sequence[Adapter] = (),
        serve: bool | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.extensions: tuple[Extension, ...] = tuple(extensions)
        check_unique(self.extensions)  # so no command name is claimed twice below
        self.settings = with_sections(settings, self.extensions)  # their config sections too
        self.commands: Mapping[str, Command] = MappingProxyType(command_table(self.extensions))
        self.serving = bool(adapters) if serve is None else serve
        self._rule_texts = rule_texts
        self._given_store = store
        self._extra_adapters = tuple(adapters)
        self._given_http = http
        self._states: dict[str, Any] = {}
        self.state: Mapping[str, Any] = MappingProxyType(self._states)
        self.store: Store | None = None
        self.registry: Registry | None = None
        self.engine: Engine | None = None
        self.reloader: Reloader | None = None
        self.switch: ChatSwitch | None = None  # the chats ``.tmy off`` keeps the bot quiet in
        self.adapters: Adapters | None = None  # serving only
        self.cron: cron.Cron | None = None  # serving with the cron extension only
        self._stack: contextlib.AsyncExitStack | None = None

    # -- what the open app offers ---------------------------------------------------------------

    @property
    def rulebook(self) -> Rulebook:
        """The rules in force (a reload replaces them)."""
        assert self.engine is not None, "use 'async with App(...)'"
        return self.engine.rulebook

    @property
    def http(self) -> HttpAdapter | None:
        """The HTTP listener when serving with one (its ``port`` once started), else None."""
        return self.adapters.http if self.adapters is not None else None

    async def reload(self, reason: str) -> ReloadResult:
        """Load rules and plugins anew and swap them in if all of it loads (see tmy.reload)."""
        assert self.reloader is not None, "use 'async with App(...)'"
        return await self.reloader.reload(reason)

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` (and ``outgoing``) to ``target`` (AdapterError unless serving it)."""
        if self.adapters is None:
            raise AdapterError(f"no running adapter for platform {target.platform!r}")
        await self.adapters.send(target, text, outgoing)

    async def health(self) -> dict[str, Any]:
        """The ``GET /healthz`` report: store, adapters, cron outbox, extensions' parts."""
        assert self.store is not None and self.adapters is not None and self.engine is not None
        report = await health_report(self.store, self.adapters, self.cron)
        return add_health(report, self.extensions, self.engine.services)

    def load_rules(self, registry: Registry | None = None) -> Rulebook:
        """Load every rule against ``registry`` (default: the App's own)."""
        registry = registry or self.registry
        assert registry is not None
        settings = self.settings
        store_args = {"store_url": settings.store, "max_value_bytes": settings.max_value_bytes}
        if self._rule_texts is not None:
            texts = ((Path(name), text) for name, text in self._rule_texts.items())
            return load_sources(texts, registry, **store_args)
        return load_rulebook(settings.rules, registry, **store_args)

    # -- the lifespan ---------------------------------------------------------------------------

    async def __aenter__(self) -> App:
        stack = contextlib.AsyncExitStack()
        try:
            await self._open(stack)
            if self.serving:
                await self._serve(stack)
        except BaseException:  # a bad setting found now must not leave the store open
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def _open(self, stack: contextlib.AsyncExitStack) -> None:
        settings = self.settings
        # log lines reach their file within 0.2 s while the app is open; its last at its end
        flusher = asyncio.get_running_loop().create_task(_flush_logs())
        stack.callback(logs.flush)
        stack.callback(flusher.cancel)
        _register_secrets(settings)
        self.registry = build_registry(settings, self.extensions)
        rulebook = self.load_rules()
        store = self._given_store or metered(
            open_store(settings.store, max_value_bytes=settings.max_value_bytes)
        )
        await store.open()
        if self._given_store is None:
            stack.push_async_callback(store.close)
        self.store = store
        services = Services(settings, store, self.registry, self.state, http=self._given_http)
        stack.push_async_callback(services.aclose)
        for extension in self.extensions:
            state = await stack.enter_async_context(extension.lifespan(services))
            self._states[extension.name] = state
        self.switch = ChatSwitch(store)
        chat = ChatCommands(self.commands, self, settings.admin_prefix)
        self.engine = Engine(rulebook, services, commands=chat, switch=self.switch)
        stack.push_async_callback(self._drain)
        self.reloader = Reloader(
            self._rebuild,
            self._swap,
            on_result=metrics.reload,
            listeners=[self._rules_reloaded],
            warnings=lambda rulebook: check_warnings(self, rulebook),
        )
        collector.settle()  # the rulebook out of the collector's sight (tmy.collector)
        log.info(
            "app.ready",
            rules=len(rulebook.rules),
            files=len(rulebook.files),
            store=_safe_url(settings.store),
        )

    async def _serve(self, stack: contextlib.AsyncExitStack) -> None:
        """Web server and adapters, extensions' serving parts, cron, the file watcher."""
        settings, engine, store = self.settings, self.engine, self.store
        assert engine is not None and store is not None and self.reloader is not None
        adapters = Adapters([*build_adapters(settings, store=store), *self._extra_adapters])
        self.adapters = adapters
        stack.push_async_callback(self._stop_serving)
        routes = [*admin_http.routes(self), *console.mounted(self, listener=adapters.http)]
        routes += extension_routes(self.extensions, engine.services)  # /mcp: checks its keys
        await adapters.start(engine.handle, routes=routes, health=self.health)
        for warning in check_warnings(self, self.rulebook):  # what `check` would warn about
            log.warning("rules.warning", detail=warning)
        for extension in self.extensions:
            await stack.enter_async_context(extension.serving(engine.services))
        if cron.EXTENSION in self.extensions:
            scheduler = cron.Cron(
                engine, store, self.send, default_zone=settings.tz, on_fire=metrics.cron_fire
            )
            self.cron = scheduler  # stopped with the adapters (_stop_serving)
            scheduler.start(engine.rulebook)  # and follows reloads (_rules_reloaded)
        if settings.watch:
            folders = [settings.rules, settings.plugins]
            await stack.enter_async_context(_watching(folders, self.reload))

    async def _stop_serving(self) -> None:
        """The scheduler and the adapters stop together, within one shutdown_grace: a post
        waiting on a hung platform ends with that adapter's grace (apart: twice the grace)."""
        assert self.adapters is not None
        crons = [self.cron.stop(self.settings.shutdown_grace)] if self.cron is not None else []
        await asyncio.gather(self.adapters.stop(), *crons)

    async def _drain(self) -> None:
        assert self.engine is not None
        await self.engine.drain(self.settings.shutdown_grace)

    def _rebuild(self) -> tuple[Registry, Rulebook]:
        """A fresh registry (plugins executed anew) and the rules loaded against it."""
        registry = build_registry(self.settings, self.extensions)
        return registry, self.load_rules(registry)

    def _swap(self, registry: Registry, rulebook: Rulebook) -> None:
        """Put a reload's registry and rules in force, together."""
        assert self.engine is not None
        self.engine.replace_rulebook(rulebook, registry)
        self.registry = registry

    def _rules_reloaded(self, rulebook: Rulebook) -> None:
        """The reloader's listener: the scheduler (when serving one) follows the new rules."""
        if self.cron is not None:
            self.cron.update(rulebook)


def _register_secrets(settings: Settings) -> None:
    """Configured secrets are masked wherever they would be shown, never remembered."""
    redact.add_url(settings.store)  # a store password never reaches an error or the log
    for key in settings.http_api_keys:  # the listener's keys
        redact.add(key)
    # the OneBot token too, even when no adapter is built (`ask`, `chat`, rule tests)
    redact.add(settings.adapters.onebot.access_token)


@contextlib.asynccontextmanager
async def _watching(
    folders: list[Path], reload: Callable[[str], Any]
) -> AsyncIterator[asyncio.Task[None]]:
    """Reload when the rules or plugins change, until the block ends."""
    stop = asyncio.Event()
    task = asyncio.create_task(watch(folders, reload, stop))
    try:
        yield task
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _safe_url(url: str) -> str:
    """A store URL with any password removed, for logs."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


# -- the daemon ---------------------------------------------------------------------------------


async def serve(
    settings: Settings,
    stop: asyncio.Event | None = None,
    *,
    extensions: Iterable[Extension] | None = None,
    on_ready: Callable[[App], Any] | None = None,
    adapters: Sequence[Adapter] = (),
) -> None:
    """Run the daemon until ``stop`` is set or SIGINT/SIGTERM arrives; SIGHUP reloads.

    ``extensions``: what the app is made of (the CLI passes
    :func:`tmy.builtins.extensions`; None: none — the app never picks its own).
    ``adapters``: extra adapters started with the configured ones.

    ``on_ready(app)`` is called once every adapter has been started (tests and
    embedders use it to reach ``app.http.port`` and ``app.send``). A console
    adapter that ends (Ctrl-D) stops the daemon too.
    """
    load_what_serving_uses()
    stop = stop or asyncio.Event()
    app = App(settings, extensions=extensions or (), adapters=adapters, serve=True)
    stop_reloading = _handle_signals(stop, app)
    try:
        async with app:
            assert app.adapters is not None and app.engine is not None
            if on_ready is not None:
                on_ready(app)
            console = app.adapters.console()
            waiters = [asyncio.create_task(stop.wait())]
            if console is not None:
                waiters.append(asyncio.create_task(console.done.wait()))
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            log.info("daemon.stopping", inflight=app.engine.inflight)
            stop_reloading()  # no SIGHUP reload while closing
    finally:
        stop_reloading()
    log.info("daemon.stopped")
    logs.flush()


def _handle_signals(stop: asyncio.Event, app: App) -> Callable[[], None]:
    """SIGINT/SIGTERM set ``stop``, SIGHUP reloads; returns what removes the SIGHUP handler.

    Handlers can only be installed from the main thread (tests may run
    :func:`serve` elsewhere and stop it through ``stop``).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    background: set[asyncio.Task[Any]] = set()

    def reload_now(reason: str) -> None:
        if app.reloader is None:  # not open yet: nothing to reload
            return
        task = asyncio.create_task(app.reload(reason))
        background.add(task)
        task.add_done_callback(background.discard)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload_now, "SIGHUP")
    return lambda: loop.remove_signal_handler(signal.SIGHUP) and None


async def _flush_logs(every: float = 0.2) -> None:
    """Buffered log lines reach the file within ``every`` seconds even when idle."""
    while True:
        await asyncio.sleep(every)
        try:
            logs.flush()
        except OSError:  # a full disk or pipe for a moment: the lines wait in the buffer
            pass
