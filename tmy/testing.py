"""A harness that drives the whole bot, for our tests and for rule authors' own.

    async with Bot({"demo.yaml": RULES}) as bot:
        assert (await bot.ask("joke")).text == "A"

Messages go through the real engine, store and executors — nothing is mocked.
The store defaults to a SQLite file in a temporary directory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tmy.app import App
from tmy.config import Settings
from tmy.engine.variables import Variables
from tmy.message import Message, Reply
from tmy.values.paths import parse_path


class Bot:
    """The bot under test: ``ask`` sends a message, ``var`` reads a declared variable."""

    def __init__(
        self,
        rules: dict[str, str] | str | Path,
        *,
        store: str | None = None,
        plugins: str | Path | None = None,
        **settings: Any,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="tmy-test-")
        base = Path(self._tmp.name)
        texts = None
        rules_dir = Path("rules")
        if isinstance(rules, dict):
            texts = rules
        else:
            rules_dir = Path(rules)
        self.settings = Settings(
            rules=rules_dir,
            plugins=Path(plugins) if plugins else base / "no-plugins",
            store=store or f"sqlite:///{base / 'tmy.db'}",
            **settings,
        )
        self.app = App(self.settings, rule_texts=texts)

    async def __aenter__(self) -> Bot:
        await self.app.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.app.__aexit__(*exc)
        finally:
            self._tmp.cleanup()

    @property
    def engine(self) -> Any:
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
        engine = self.app.engine
        msg = Message("", user=user, chat=chat, platform=platform)
        variables = Variables({}, engine.rulebook.variables, engine.services.store, msg)
        return await variables.read(parse_path(path))
