"""``Bot``: the whole bot without adapters — messages straight into the engine.

    async with Bot({"demo.yaml": RULES}) as bot:
        assert (await bot.ask("joke")).text == "A"

Messages go through the real engine, store, executors and extensions (the
built-ins plus installed ones, as ``run.py`` has them) — nothing is mocked.
The store defaults to a SQLite file in a temporary directory.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path
from typing import Any

from tmy.app import App
from tmy.builtins import extensions as all_extensions
from tmy.config import Settings
from tmy.engine.core import Engine
from tmy.engine.variables import Variables
from tmy.extension import Extension
from tmy.message import Message, Reply
from tmy.values.paths import parse_path


def default_extensions() -> tuple[Extension, ...]:
    """The built-ins plus the installed extensions, as ``run.py`` has them.

    Finding installed ones reads every distribution's entry points (milliseconds, more
    than opening the bot): done once per ``sys.path``, where they are found."""
    return _extensions_on(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _extensions_on(path: tuple[str, ...]) -> tuple[Extension, ...]:
    return all_extensions()


def settings_for(
    rules: dict[str, str] | str | Path,
    base: Path,
    *,
    store: str | None = None,
    plugins: str | Path | None = None,
    **settings: Any,
) -> tuple[Settings, dict[str, str] | None]:
    """Settings for a test bot, and the rule texts when ``rules`` is ``{file name: YAML}``
    (else ``rules`` is a folder or file). ``base`` is a private folder for the SQLite store."""
    texts = rules if isinstance(rules, dict) else None
    made = Settings(
        rules=Path("rules") if texts is not None else Path(rules),
        plugins=Path(plugins) if plugins else base / "no-plugins",
        store=store or f"sqlite:///{base / 'tmy.db'}",
        **settings,
    )
    return made, texts


async def read_var(
    engine: Engine, path: str, *, user: str = "tester", chat: str = "", platform: str = "test"
) -> Any:
    """A declared variable's stored value as a message from ``user`` in ``chat`` would see it
    (its default when never written)."""
    msg = Message("", user=user, chat=chat, platform=platform)
    variables = Variables({}, engine.rulebook.variables, engine.services.store, msg)
    return await variables.read(parse_path(path))


class Bot:
    """The bot under test: ``ask`` sends a message, ``var`` reads a declared variable."""

    def __init__(
        self,
        rules: dict[str, str] | str | Path,
        *,
        store: str | None = None,
        plugins: str | Path | None = None,
        extensions: tuple[Extension, ...] | None = None,
        **settings: Any,
    ) -> None:
        """``rules``: ``{file name: YAML}`` or a folder; ``extensions``: what the app is made
        of (default: the built-ins plus installed ones); ``settings``: any Settings field."""
        self._tmp = tempfile.TemporaryDirectory(prefix="tmy-test-")
        self.settings, texts = settings_for(
            rules, Path(self._tmp.name), store=store, plugins=plugins, **settings
        )
        chosen = default_extensions() if extensions is None else extensions
        self.app = App(self.settings, extensions=chosen, rule_texts=texts)

    async def __aenter__(self) -> Bot:
        await self.app.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.app.__aexit__(*exc)
        finally:
            self._tmp.cleanup()

    @property
    def engine(self) -> Engine:
        assert self.app.engine is not None, "use 'async with Bot(...)'"
        return self.app.engine

    async def ask(self, text: str, *, user: str = "tester", chat: str = "",
                  platform: str = "test", **fields: Any) -> Reply:  # fmt: skip
        assert self.app.engine is not None, "use 'async with Bot(...)'"
        return await self.app.engine.handle(
            Message(text, user=user, chat=chat, platform=platform, **fields)
        )

    async def say(self, text: str, **kw: Any) -> str:
        """The reply text; fails the test with the error when the run failed."""
        reply = await self.ask(text, **kw)
        assert reply.error is None, f"{text!r} failed: {reply.error}"
        return reply.text

    async def var(self, path: str, *, user: str = "tester", chat: str = "",
                  platform: str = "test") -> Any:  # fmt: skip
        """A declared variable's stored value (its default when never written)."""
        return await read_var(self.engine, path, user=user, chat=chat, platform=platform)
