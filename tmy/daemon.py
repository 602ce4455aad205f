"""``serve``: the App plus adapters, cron and the file watcher, until SIGINT/SIGTERM.

The :class:`Daemon` owns the adapters: it mounts the routes of those that need
HTTP on the one web server, starts each on its own (a chat platform that fails
to start is logged and shown in ``/healthz``; the others keep serving), offers
``send(target, text)`` to whatever wants to post on the bot's own initiative
(cron rules, admin commands), and reports health.

Once adapters are up, scheduled rules start firing (:mod:`tmy.cron`) and the
rules and plugin folders are watched (:mod:`tmy.reload`); SIGHUP reloads too.
Stopping ends the watcher and the schedules (firings already started finish),
closes the adapters (no new messages), waits for runs in flight
(``limits.shutdown_grace``), then closes the store.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from tmy import logs, metrics
from tmy.adapters.console import ConsoleAdapter
from tmy.adapters.http import HttpAdapter
from tmy.adapters.origin import allowed_hosts_of
from tmy.app import SERVE_NOTICES, App, log_rule_warnings
from tmy.config import Settings
from tmy.cron import Cron
from tmy.errors import AdapterError, TmyError
from tmy.logs import get_logger
from tmy.message import Target
from tmy.reload import watch

log = get_logger("tmy")

# Callables (settings) -> list[adapter] for chat platforms configured in settings.
ADAPTER_FACTORIES: list[Any] = []

# platform -> module with ``from_settings(settings[, store=…])``; imported only when enabled
PLATFORM_MODULES = {
    "openai": "tmy.adapters.openai",
    "onebot": "tmy.adapters.onebot",
    "discord": "tmy.adapters.discord_adapter",
    "telegram": "tmy.adapters.telegram",
}


def _enabled(settings: Settings, platform: str) -> bool:
    if platform == "openai":
        return settings.http_enabled
    return bool(settings.adapters.get(platform, {}).get("enabled"))


def build_adapters(
    settings: Settings, *, console: bool | None = None, store: Any = None
) -> list[Any]:
    """Every adapter the settings enable; the HTTP listener first (others mount on it)."""
    adapters: list[Any] = []
    if settings.http_enabled:
        adapters.append(
            HttpAdapter(
                settings.http_listen,
                settings.max_message_chars,
                settings.shutdown_grace,
                settings.max_id_chars,
                api_keys=settings.http_api_keys,
                header_timeout=settings.http_header_timeout,
                body_timeout=settings.http_body_timeout,
                keepalive_timeout=settings.http_keepalive_timeout,
                max_connections=settings.http_max_connections,
                max_requests_in_flight=settings.http_max_requests_in_flight,
                allowed_hosts=allowed_hosts_of(settings),
            )
        )
    want_console = settings.console if console is None else console
    if want_console and sys.stdin is not None and sys.stdin.isatty():
        adapters.append(ConsoleAdapter())
    for platform, module_name in PLATFORM_MODULES.items():
        if not _enabled(settings, platform):
            continue
        factory = importlib.import_module(module_name).from_settings
        if "store" in inspect.signature(factory).parameters:
            adapter = factory(settings, store=store)
        else:
            adapter = factory(settings)
        if adapter is not None:
            adapters.append(adapter)
    for factory in ADAPTER_FACTORIES:
        adapters.extend(factory(settings))
    return adapters


class Daemon:
    """The running adapters around one App: start, stop, send, health."""

    def __init__(self, app: App, adapters: list[Any]) -> None:
        self.app = app
        self.adapters = adapters
        self.started: list[Any] = []
        self.failed: dict[str, str] = {}  # adapter name -> why it did not start
        self.http = next((a for a in adapters if isinstance(a, HttpAdapter)), None)
        self.cron: Cron | None = None

    async def start(self) -> None:
        """Start every adapter; only the HTTP listener's failure is fatal (a bad port)."""
        assert self.app.engine is not None
        handle = self.app.engine.handle
        for adapter in self.adapters:
            routes = getattr(adapter, "routes", None)
            mounted = routes() if routes is not None else []
            if not mounted:
                continue
            if self.http is None:
                raise AdapterError(
                    f"{adapter.name}: needs the HTTP listener (adapters.http.enabled: true)"
                )
            self.http.mount(mounted)
        if self.http is not None:
            self.http.health_source = self.health
        for adapter in self.adapters:
            try:
                await adapter.start(handle)
            except Exception as exc:
                if adapter is self.http:
                    raise
                self.failed[adapter.name] = str(exc) or type(exc).__name__
                log.error("adapter.failed", adapter=adapter.name, error=self.failed[adapter.name])
                continue
            self.started.append(adapter)
            listen = f"{adapter.host}:{adapter.port}" if adapter is self.http else None
            log.info("adapter.started", adapter=adapter.name, listen=listen)

    async def stop(self) -> None:
        """Stop adapters in reverse order; one failing to stop does not keep others open."""
        for adapter in reversed(self.started):
            try:
                await adapter.stop()
            except Exception as exc:
                log.warning("adapter.stop_failed", adapter=adapter.name, error=str(exc))
        self.started.clear()

    def adapter(self, platform: str) -> Any:
        return next((a for a in self.started if a.name == platform), None)

    async def send(self, target: Target, text: str) -> None:
        """Post ``text`` to ``target`` through its platform's adapter (AdapterError if it can't)."""
        adapter = self.adapter(target.platform)
        if adapter is None:
            why = self.failed.get(target.platform)
            raise AdapterError(
                f"no running adapter for platform {target.platform!r}"
                + (f" (it failed to start: {why})" if why else "")
            )
        await adapter.send(target, text)

    async def health(self) -> dict[str, Any]:
        """The store's and every adapter's state, for ``GET /healthz``."""
        report: dict[str, Any] = {"status": "ok"}
        store: dict[str, Any] = {"state": "ok"}
        try:
            assert self.app.store is not None
            async with asyncio.timeout(2):
                await self.app.store.ping()
        except (TmyError, TimeoutError) as exc:
            store = {"state": "error", "error": str(exc) or "no answer within 2 s"}
            report["status"] = "error"
        report["store"] = store
        adapters: dict[str, Any] = {}
        for adapter in self.started:
            state = adapter.health() if hasattr(adapter, "health") else {"state": "connected"}
            adapters[adapter.name] = state
            if state.get("state") not in ("connected", "starting") and report["status"] == "ok":
                report["status"] = "degraded"
        for name, why in self.failed.items():
            adapters[name] = {"state": "failed", "error": why}
            if report["status"] == "ok":
                report["status"] = "degraded"
        report["adapters"] = adapters
        if self.cron is not None:  # scheduled sends waiting in the outbox (failed, retried)
            try:
                async with asyncio.timeout(2):
                    report["cron"] = {"outbox": await self.cron.outbox_health()}
            except (TmyError, TimeoutError) as exc:
                report["cron"] = {"outbox": {"error": str(exc) or "no answer within 2 s"}}
        return report


async def serve(
    settings: Settings,
    stop: asyncio.Event | None = None,
    *,
    on_ready: Callable[[Daemon], Any] | None = None,
) -> None:
    """Run the daemon until ``stop`` is set or SIGINT/SIGTERM arrives; SIGHUP reloads.

    ``on_ready(daemon)`` is called once every adapter has been started (tests
    and embedders use it to reach the daemon's port and ``send``).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    async with App(settings) as app:
        assert app.engine is not None and app.reloader is not None and app.store is not None
        reloader = app.reloader
        background: set[asyncio.Task[Any]] = set()

        def reload_now(reason: str) -> None:
            task = asyncio.create_task(reloader.reload(reason))
            background.add(task)
            task.add_done_callback(background.discard)

        # Signal handlers can only be installed from the main thread (tests may
        # run serve() elsewhere and stop it through ``stop``).
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            loop.add_signal_handler(signal.SIGHUP, reload_now, "SIGHUP")
        daemon = Daemon(app, build_adapters(settings, store=app.store))
        app.daemon = daemon
        app.engine.services.extra["daemon"] = daemon
        cron = Cron(
            app.engine,
            app.store,
            daemon.send,
            default_zone=settings.timezone,
            on_fire=metrics.cron_fire,
        )
        daemon.cron = cron
        watching = asyncio.Event()
        watcher: asyncio.Task[None] | None = None
        try:
            await daemon.start()
            if daemon.http is not None:
                daemon.http.reload_source = reloader.reload
            log_rule_warnings(app)
            for notice in SERVE_NOTICES:
                notice(app.engine.services)
            cron.start(app.engine.rulebook)
            reloader.listeners.append(cron.update)
            if settings.watch:
                watcher = asyncio.create_task(
                    watch([settings.rules, settings.plugins], reloader.reload, watching)
                )
            if on_ready is not None:
                on_ready(daemon)
            console = next((a for a in daemon.started if isinstance(a, ConsoleAdapter)), None)
            ticker = asyncio.create_task(_flush_logs())
            waiters = [asyncio.create_task(stop.wait())]
            if console is not None:
                waiters.append(asyncio.create_task(console.done.wait()))
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for w in (*waiters, ticker):
                w.cancel()
            log.info("daemon.stopping", inflight=app.engine.inflight)
        finally:
            watching.set()
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            if threading.current_thread() is threading.main_thread():
                loop.remove_signal_handler(signal.SIGHUP)
            await cron.stop(settings.shutdown_grace)  # no new firings; started ones finish
            await daemon.stop()
    log.info("daemon.stopped")
    logs.flush()


async def _flush_logs(every: float = 0.2) -> None:
    """Buffered log lines reach the file within ``every`` seconds even when idle."""
    while True:
        await asyncio.sleep(every)
        logs.flush()
