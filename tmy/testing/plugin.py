"""The pytest plugin: ``bot`` and ``daemon`` fixtures (entry point ``pytest11``).

A test module says what to run with two small fixtures of its own, and asks for
the bot or the daemon::

    @pytest.fixture
    def bot_rules():
        return {"r.yaml": RULES}          # or a folder

    @pytest.fixture
    def bot_settings():                    # optional: Settings fields, store=, plugins=
        return {"admins": ["test:root"]}

    async def test_ping(bot):
        assert (await bot.ask("ping")).text == "pong"

    async def test_cron_posts(daemon):
        assert (await daemon.pop()).text == "tick"

``bot`` is a :class:`tmy.testing.Bot`, ``daemon`` a :class:`tmy.testing.Daemon`
(:func:`tmy.testing.serving`); both open before the test and close after it.
Async fixtures need pytest-asyncio (or another plugin running async fixtures).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

try:  # strict-mode pytest-asyncio needs its own decorator for async fixtures
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover - another async plugin runs them
    async_fixture = pytest.fixture


@pytest.fixture
def bot_rules() -> Any:
    """The rules ``bot`` and ``daemon`` run: override it (``{file name: YAML}`` or a folder)."""
    raise pytest.UsageError("define a 'bot_rules' fixture: the rules for 'bot' / 'daemon'")


@pytest.fixture
def bot_settings() -> dict[str, Any]:
    """Settings fields (and ``store``/``plugins``) for ``bot`` and ``daemon``; override it."""
    return {}


@async_fixture
async def bot(bot_rules: Any, bot_settings: dict[str, Any]) -> AsyncIterator[Any]:
    """An open :class:`tmy.testing.Bot` on ``bot_rules`` with ``bot_settings``."""
    # Imported here, not at the top: pytest loads this plugin in every run where tmy is
    # installed, and only tests that ask for the fixture should pay for importing the app.
    from tmy.testing import Bot

    async with Bot(bot_rules, **bot_settings) as opened:
        yield opened


@async_fixture
async def daemon(bot_rules: Any, bot_settings: dict[str, Any]) -> AsyncIterator[Any]:
    """A :class:`tmy.testing.Daemon` (``serving()``) on ``bot_rules`` with ``bot_settings``."""
    # Deferred for the same reason as in ``bot``.
    from tmy.testing import serving

    async with serving(bot_rules, **bot_settings) as served:
        yield served
