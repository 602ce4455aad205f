"""TODO docstring."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tmy.testing import Bot

# -- from test_bughunt.py (a bug hunt: each failed before its fix)


# A plugin whose step waits on a gate the test controls (no sleeps, no timing).
GATE_PLUGIN = """
import asyncio
import json

async def gated(value, cfg, ctx):
    gates = ctx.services.extra.setdefault("gates", {})
    entered = gates.setdefault("entered", asyncio.Event())
    release = gates.setdefault("release", asyncio.Event())
    entered.set()
    await release.wait()
    return value

def register(registry):
    registry.add("GATED", gated)
"""


@pytest.fixture
def gate_plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "bughunt-plugins"
    folder.mkdir()
    (folder / "bughunt_gate.py").write_text(GATE_PLUGIN, encoding="utf-8")
    return folder


def _gates(bot: Bot) -> dict[str, asyncio.Event]:
    gates = bot.engine.services.extra.setdefault("gates", {})
    gates.setdefault("entered", asyncio.Event())
    gates.setdefault("release", asyncio.Event())
    return gates


GATED_RULES = """
rules:
  - id: slow
    triggers: ["slow"]
    steps:
      - plugin: GATED
        input: "done"
"""


async def test_console_stop_lets_the_run_in_flight_finish(
    gate_plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from tmy.adapters.console import ConsoleAdapter

    monkeypatch.setattr(sys, "stdin", io.StringIO("slow\n"))
    out = io.StringIO()
    async with Bot({"g.yaml": GATED_RULES}, plugins=gate_plugins) as bot:
        gates = _gates(bot)
        console = ConsoleAdapter(user="op", out=out)
        await console.start(bot.engine.handle)
        await asyncio.wait_for(gates["entered"].wait(), 10)
        # SIGTERM: serve() stops its adapters, then drains the engine
        await console.stop()
        gates["release"].set()
        assert await bot.engine.drain(10)
        await asyncio.sleep(0.05)
        assert "done" in out.getvalue(), "the console's run in flight was cancelled"
