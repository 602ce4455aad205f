"""``serve``: the App plus adapters, until SIGINT/SIGTERM; then a graceful stop.

Stopping closes the adapters first (no new messages), waits for runs in flight
(``limits.shutdown_grace``), then closes the store.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import Any

from tmy import logs
from tmy.adapters.console import ConsoleAdapter
from tmy.adapters.http import HttpAdapter
from tmy.app import App, log_rule_warnings
from tmy.config import Settings
from tmy.logs import get_logger

log = get_logger("tmy")

# Callables (settings) -> list[adapter] for chat platforms configured in settings.
ADAPTER_FACTORIES: list[Any] = []


def build_adapters(settings: Settings, *, console: bool | None = None) -> list[Any]:
    adapters: list[Any] = []
    if settings.http_enabled:
        adapters.append(
            HttpAdapter(
                settings.http_listen,
                settings.max_message_chars,
                settings.shutdown_grace,
                settings.max_id_chars,
            )
        )
    want_console = settings.console if console is None else console
    if want_console and sys.stdin is not None and sys.stdin.isatty():
        adapters.append(ConsoleAdapter())
    for factory in ADAPTER_FACTORIES:
        adapters.extend(factory(settings))
    return adapters


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run the daemon until ``stop`` is set or a signal arrives."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    # Signal handlers can only be installed from the main thread (tests may
    # run serve() elsewhere and stop it through ``stop``).
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    async with App(settings) as app:
        assert app.engine is not None
        adapters = build_adapters(settings)
        started = []
        try:
            for adapter in adapters:
                await adapter.start(app.engine.handle)
                started.append(adapter)
                log.info("adapter.started", adapter=adapter.name,
                         listen=f"{getattr(adapter, 'host', '')}:{getattr(adapter, 'port', '')}"
                         if adapter.name == "http" else None)  # fmt: skip
            log_rule_warnings(app)
            console = next((a for a in started if isinstance(a, ConsoleAdapter)), None)
            ticker = asyncio.create_task(_flush_logs())
            waiters = [asyncio.create_task(stop.wait())]
            if console is not None:
                waiters.append(asyncio.create_task(console.done.wait()))
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for w in (*waiters, ticker):
                w.cancel()
            log.info("daemon.stopping", inflight=app.engine.inflight)
        finally:
            for adapter in reversed(started):
                await adapter.stop()
    log.info("daemon.stopped")
    logs.flush()


async def _flush_logs(every: float = 0.2) -> None:
    """Buffered log lines reach the file within ``every`` seconds even when idle."""
    while True:
        await asyncio.sleep(every)
        logs.flush()
