"""The console adapter (tmy/adapters/console.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.gate import Gate
from tmy.testing import Bot

# -- from test_bughunt.py (a bug hunt: each failed before its fix)


@pytest.fixture
def gate() -> Gate:
    return Gate()


GATED_RULES = """
rules:
  - id: slow
    triggers: ["slow"]
    steps:
      - plugin: GATED
        input: "done"
"""


async def test_console_stop_lets_the_run_in_flight_finish(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from tmy.adapters.console import ConsoleAdapter

    monkeypatch.setattr(sys, "stdin", io.StringIO("slow\n"))
    out = io.StringIO()
    async with Bot({"g.yaml": GATED_RULES}, extensions=gate.extensions()) as bot:
        console = ConsoleAdapter(user="op", out=out)
        await console.start(bot.engine.handle)
        await gate.wait_entered()
        # SIGTERM: serve() stops its adapters, then drains the engine
        await console.stop()
        gate.open()
        assert await bot.engine.drain(10)
        await asyncio.sleep(0.05)
        assert "done" in out.getvalue(), "the console's run in flight was cancelled"
