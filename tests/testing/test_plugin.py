"""The pytest plugin (tmy.testing.plugin): ``bot`` and ``daemon`` on a module's ``bot_rules``."""

from __future__ import annotations

from typing import Any

import pytest

from tmy.message import Target
from tmy.testing import Bot, Daemon, Sent

pytest_plugins = ["pytester"]

RULES = """
rules:
  - id: ping
    triggers: [ping]
    steps:
      - {plugin: ADJUST, input: "pong from {PLATFORM}"}
"""


@pytest.fixture
def bot_rules() -> dict[str, str]:
    return {"r.yaml": RULES}


@pytest.fixture
def bot_settings() -> dict[str, Any]:
    return {"admins": frozenset({"test:root"})}


async def test_bot_runs_the_modules_rules(bot: Bot) -> None:
    assert await bot.say("ping") == "pong from test"
    assert bot.settings.admins == frozenset({"test:root"})


async def test_daemon_serves_them(daemon: Daemon) -> None:
    assert (await daemon.push("ping")).text == "pong from test"
    await daemon.send(Target("test", "c"), "hi")
    assert await daemon.pop() == Sent(Target("test", "c"), "hi")


def test_the_plugin_is_registered_once_and_asks_for_rules(pytester: pytest.Pytester) -> None:
    """Through its ``pytest11`` entry point; a test module without ``bot_rules`` is told."""
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(
        """
        def test_needs_rules(bot):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*define a 'bot_rules' fixture*"])
