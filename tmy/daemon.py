"""What only a serving app needs: building the adapters, running them, and the health report.

:class:`Adapters` owns the adapters of one serving :class:`tmy.app.App`: it
mounts the routes of those that need HTTP (and any extra routes, such as the
admin command API) on the one web server, starts each on its own (a chat
platform that fails to start is logged and shown in ``/healthz``; the others
keep serving), offers ``send(target, text)`` to whatever posts on the bot's own
initiative (cron rules, admin commands) and reports their health.
:func:`health_report` is the ``GET /healthz`` JSON: the store, every adapter
and the cron outbox.

The lifespan that opens and closes these lives in :mod:`tmy.app`.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from importlib import import_module
from typing import Any

from tmy.adapters import http, onebot, openai
from tmy.adapters.console import ConsoleAdapter
from tmy.adapters.http import HttpAdapter
from tmy.config import Settings
from tmy.cron import Cron
from tmy.errors import AdapterError, TmyError
from tmy.logs import get_logger
from tmy.message import Outgoing, Target, adapter_of
from tmy.rulebook.textform import invisible_table
from tmy.store.base import Store
from tmy.types import Adapter, Handler, Route

log = get_logger("tmy")


def _deferred(package: str) -> Callable[[Settings, Store | None], Adapter | None]:
    """``tmy.adapters.<package>.from_settings``, imported only when the platform is enabled:
    its SDK (discord.py, aiogram, slack-bolt, lark-oapi, mautrix …) takes 0.1–2 s to import,
    which a bot not on that platform need not pay."""

    def build(settings: Settings, store: Store | None) -> Adapter | None:
        return import_module(f"tmy.adapters.{package}").from_settings(settings, store)

    return build


# platform -> ``from_settings(settings, store)``, called only when the platform is enabled
PLATFORMS: dict[str, Callable[[Settings, Store | None], Adapter | None]] = {
    "openai": openai.from_settings,
    "onebot": onebot.from_settings,
    "discord": _deferred("discord_adapter"),
    "telegram": _deferred("telegram"),
    "qq": _deferred("qq"),
    "feishu": _deferred("feishu"),
    "slack": _deferred("slack"),
    "matrix": _deferred("matrix"),
    "satori": _deferred("satori"),
}


def _enabled(settings: Settings, platform: str) -> bool:
    if platform == "openai":  # the facade rides on the listener
        return settings.http_enabled
    return bool(getattr(settings.adapters, platform).enabled)  # onebot, discord, telegram …


ENABLED_BY = {
    "console": "adapters.console.enabled",
    "http": "adapters.http.enabled",
    **{name: f"adapters.{'http' if name == 'openai' else name}.enabled" for name in PLATFORMS},
}
"""Each adapter a rule can name (``platforms:``, ``send_to:``) and the config key enabling it."""


def disabled_adapter(settings: Settings, platform: str) -> str | None:
    """The config key that would enable the adapter named ``platform`` when ``settings``
    leave it off; None when it is on, or no adapter has that name (a message through
    the HTTP API may carry any platform name). ``check`` warns with it."""
    platform = adapter_of(platform)
    if platform == "console":
        on = settings.console
    elif platform == "http":
        on = settings.http_enabled
    elif platform in PLATFORMS:
        on = _enabled(settings, platform)
    else:
        return None
    return None if on else ENABLED_BY[platform]


def disabled_for(
    settings: Settings, adapters: Adapters | None = None
) -> Callable[[str], str | None]:
    """:func:`disabled_adapter` as ``check`` asks it of a running app: an adapter the app
    runs (one given to it, not configured: a test's loopback) counts as enabled."""
    running = {a.name for a in adapters.all} if adapters is not None else set()

    def disabled(platform: str) -> str | None:
        return None if adapter_of(platform) in running else disabled_adapter(settings, platform)

    return disabled


def build_adapters(
    settings: Settings, *, console: bool | None = None, store: Store | None = None
) -> list[Adapter]:
    """Every adapter the settings enable; the HTTP listener first (others mount on it)."""
    adapters: list[Adapter] = []
    listener = http.from_settings(settings, store)
    if listener is not None:
        adapters.append(listener)
        exposed = unprotected_listen(settings)
        if exposed is not None:
            log.warning(
                "http.unprotected",
                listen=exposed,
                hint="without adapters.http.api_keys (TMY_HTTP_API_KEYS) anyone reaching this "
                "address can speak as any user and run the admin commands",
            )
    want_console = settings.console if console is None else console
    if want_console and sys.stdin is not None and sys.stdin.isatty():
        adapters.append(ConsoleAdapter())
    for platform, from_settings in PLATFORMS.items():
        if _enabled(settings, platform):
            adapter = from_settings(settings, store)
            if adapter is not None:
                adapters.append(adapter)
    return adapters


def unprotected_listen(settings: Settings) -> str | None:
    """The listen address when the listener leaves loopback without API keys, else None."""
    config = settings.adapters.http
    if not config.enabled or config.api_keys:
        return None
    host = config.host
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # a host name, or "" (every interface)
        pass
    return config.listen


def load_what_serving_uses() -> None:
    """Import aiohttp and httpx (the listeners, the outbound pool) and build the
    invisible-character table now, at start-up, not on the first message: one-shot
    commands, which mostly need none of them, load them only when used (together
    ~180 ms of every CLI start)."""
    import aiohttp.web  # noqa: F401  (deferred out of the modules that use it; see above)
    import httpx  # noqa: F401
    import httpx_aiohttp  # noqa: F401

    invisible_table()


class Adapters:
    """The running adapters of one serving app: start, stop, send, health."""

    def __init__(self, adapters: Iterable[Adapter]) -> None:
        self.all: list[Adapter] = list(adapters)
        self.started: list[Adapter] = []
        self.failed: dict[str, str] = {}  # adapter name -> why it did not start
        self.http: HttpAdapter | None = next(
            (a for a in self.all if isinstance(a, HttpAdapter)), None
        )

    async def start(
        self,
        handle: Handler,
        *,
        routes: Sequence[Route] = (),
        health: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        """Mount every route on the listener, then start each adapter, the listener first.

        Only the HTTP listener's failure is fatal (a bad port); ``routes`` are the
        app's own (the admin command API), mounted only when there is a listener.
        """
        for adapter in self.all:
            mounted = adapter.routes()
            if not mounted:
                continue
            if self.http is None:
                raise AdapterError(
                    f"{adapter.name}: needs the HTTP listener (adapters.http.enabled: true)"
                )
            self.http.mount(mounted)
        if self.http is not None and routes:
            self.http.mount(routes)
        for adapter in self.all:
            try:
                if adapter is self.http:
                    await self.http.start(handle, health=health)
                else:
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
        """Stop the chat platforms together, then the listener (started first, stopped last);
        one failing to stop does not keep others open. Together, because each may wait up to
        ``limits.shutdown_grace`` for its replies in flight: one after another, a daemon with
        two hung platforms took twice the grace to stop."""
        platforms = [a for a in reversed(self.started) if a is not self.http]
        await asyncio.gather(*(_stop(adapter) for adapter in platforms))
        if self.http is not None and self.http in self.started:
            await _stop(self.http)
        self.started.clear()

    def adapter(self, platform: str) -> Adapter | None:
        """The started adapter serving ``platform`` (:func:`adapter_name`), or None."""
        name = adapter_of(platform)
        return next((a for a in self.started if a.name == name), None)

    def console(self) -> ConsoleAdapter | None:
        """The console adapter when one was started (``serve`` stops when it ends)."""
        return next((a for a in self.started if isinstance(a, ConsoleAdapter)), None)

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` to ``target`` through its platform's adapter (AdapterError if it can't).

        ``outgoing``: the reply's images, files, mentions, buttons; passed on (as
        ``outgoing=``) only when there are some and the adapter's ``send`` takes it
        (:func:`takes_outgoing`): an adapter whose ``send`` takes only the text (a
        plugin's, written before) still posts the text, the fallback every platform
        has."""
        adapter = self.adapter(target.platform)
        if adapter is None:
            why = self.failed.get(adapter_of(target.platform))
            raise AdapterError(
                f"no running adapter for platform {target.platform!r}"
                + (f" (it failed to start: {why})" if why else "")
            )
        if outgoing and takes_outgoing(adapter):
            await adapter.send(target, text, outgoing=outgoing)  # type: ignore[call-arg]
        else:
            await adapter.send(target, text)

    def health(self) -> tuple[dict[str, Any], bool]:
        """Every adapter's state, and whether all are connected (or still starting)."""
        states: dict[str, Any] = {}
        healthy = True
        for adapter in self.started:
            state = adapter.health()
            states[adapter.name] = state
            healthy = healthy and state.get("state") in ("connected", "starting")
        for name, why in self.failed.items():
            states[name] = {"state": "failed", "error": why}
            healthy = False
        return states, healthy


async def _stop(adapter: Adapter) -> None:
    try:
        await adapter.stop()
    except Exception as exc:
        log.warning("adapter.stop_failed", adapter=adapter.name, error=str(exc))


def takes_outgoing(adapter: Adapter) -> bool:
    """Whether ``adapter.send`` accepts ``outgoing=`` (a keyword of that name or ``**kw``)."""
    try:
        params = inspect.signature(adapter.send).parameters.values()
    except (TypeError, ValueError):  # no signature to read: try only the text
        return False
    return any(p.name == "outgoing" or p.kind is p.VAR_KEYWORD for p in params)


async def health_report(store: Store, adapters: Adapters, cron: Cron | None) -> dict[str, Any]:
    """The store's and every adapter's state, for ``GET /healthz``."""
    report: dict[str, Any] = {"status": "ok"}
    state: dict[str, Any] = {"state": "ok"}
    try:
        async with asyncio.timeout(2):
            await store.ping()
    except (TmyError, TimeoutError) as exc:
        state = {"state": "error", "error": str(exc) or "no answer within 2 s"}
        report["status"] = "error"
    report["store"] = state
    report["adapters"], healthy = adapters.health()
    if not healthy and report["status"] == "ok":
        report["status"] = "degraded"
    if cron is not None:  # scheduled sends waiting in the outbox (failed, retried)
        try:
            async with asyncio.timeout(2):
                report["cron"] = {"outbox": await cron.outbox_health()}
        except (TmyError, TimeoutError) as exc:
            report["cron"] = {"outbox": {"error": str(exc) or "no answer within 2 s"}}
    return report
