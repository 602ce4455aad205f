"""``serving()``: the daemon as ``run.py serve`` runs it, inside a test.

    async with serving({"r.yaml": RULES}) as daemon:
        reply = await daemon.push("ping", user="ann")       # a user writes
        post = await daemon.pop()                            # what the bot sent on its own
        r = httpx.post(f"{daemon.url}/v1/messages", ...)    # the HTTP listener, on a free port

It opens the real lifespan (:class:`tmy.app.App` with ``serve=True``: store,
extensions, engine, web server, adapters, cron, watcher) with a
:class:`~tmy.testing.loopback.LoopbackAdapter` among the adapters, and closes it
all in reverse on leaving. Signals and the console are left to :func:`tmy.app.serve`.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tmy.app import App
from tmy.config import Settings
from tmy.engine.core import Engine
from tmy.extension import Extension
from tmy.message import Reply, Target
from tmy.reload import ReloadResult
from tmy.testing.bot import default_extensions, read_var, settings_for
from tmy.testing.loopback import LoopbackAdapter, Sent
from tmy.types import Adapter

# What a test daemon differs in from ``run.py serve``'s defaults: no console reading the
# test's stdin, the listener on a free port, no file watcher unless asked for.
TEST_DEFAULTS: dict[str, Any] = {"console": False, "http_listen": "127.0.0.1:0", "watch": False}


class Daemon:
    """A served bot: the open :class:`App`, its loopback adapter and its HTTP listener."""

    def __init__(self, app: App, loopback: LoopbackAdapter) -> None:
        self.app = app
        self.loopback = loopback

    @property
    def settings(self) -> Settings:
        return self.app.settings

    @property
    def engine(self) -> Engine:
        assert self.app.engine is not None
        return self.app.engine

    @property
    def http(self) -> Any:
        """The HTTP listener (``None`` when ``http_enabled`` is false)."""
        return self.app.http

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` of the listener."""
        assert self.http is not None, "the HTTP listener is off (http_enabled=False)"
        return f"http://127.0.0.1:{self.http.port}"

    @property
    def sent(self) -> list[Sent]:
        """Messages the daemon sent through the loopback adapter on its own, oldest first."""
        return self.loopback.sent

    async def push(
        self, text: str, *, user: str = "tester", chat: str = "", **fields: Any
    ) -> Reply:
        """A user of the loopback platform writes ``text``; the engine's reply."""
        return await self.loopback.push(text, user=user, chat=chat, **fields)

    async def pop(self, timeout: float = 10.0) -> Sent:
        """The next message the daemon sent on its own (waits up to ``timeout`` seconds)."""
        return await self.loopback.pop(timeout)

    async def send(self, target: Target, text: str) -> None:
        """``app.send``: post through the adapter of ``target.platform``."""
        await self.app.send(target, text)

    async def health(self) -> dict[str, Any]:
        return await self.app.health()

    async def reload(self, reason: str = "test") -> ReloadResult:
        return await self.app.reload(reason)

    async def var(self, path: str, *, user: str = "tester", chat: str = "") -> Any:
        """A declared variable as a loopback user in ``chat`` sees it."""
        platform = self.loopback.name
        return await read_var(self.engine, path, user=user, chat=chat, platform=platform)


@asynccontextmanager
async def serving(
    rules: dict[str, str] | str | Path | None = None,
    *,
    settings: Settings | None = None,
    store: str | None = None,
    plugins: str | Path | None = None,
    extensions: Sequence[Extension] | None = None,
    adapters: Sequence[Adapter] = (),
    platform: str = "test",
    **fields: Any,
) -> AsyncIterator[Daemon]:
    """Serve a bot until the block ends; yields the :class:`Daemon`.

    Either ``rules`` (``{file name: YAML}`` or a folder, with ``store``, ``plugins``
    and any Settings ``fields`` as for :class:`~tmy.testing.Bot`, on top of
    :data:`TEST_DEFAULTS`) or a ready ``settings`` (used as it is). ``extensions``
    default to the built-ins plus installed ones; ``adapters`` are more adapters to
    start beside the loopback one (named ``platform``).
    """
    if (rules is None) == (settings is None):
        raise TypeError("serving() takes rules or settings=, not both")
    loopback = LoopbackAdapter(platform)
    with tempfile.TemporaryDirectory(prefix="tmy-serve-") as tmp:
        texts = None
        if settings is None:
            assert rules is not None
            chosen = {**TEST_DEFAULTS, **fields}
            settings, texts = settings_for(rules, Path(tmp), store=store, plugins=plugins, **chosen)
        app = App(
            settings,
            extensions=default_extensions() if extensions is None else tuple(extensions),
            rule_texts=texts,
            adapters=(loopback, *adapters),
            serve=True,
        )
        async with app:
            yield Daemon(app, loopback)
