"""A step the test holds open: ``GATED`` waits until the test releases it (no sleeps, no timing).

gate = Gate()
async with Bot(RULES, extensions=gate.extensions()) as bot:
    run = asyncio.create_task(bot.ask("slow"))
    await gate.wait_entered()      # the run now sits inside its GATED step
    ...
    gate.open()
"""

from __future__ import annotations

import asyncio
from typing import Any

from tmy.builtins import extensions
from tmy.executors.registry import ExecutorSpec
from tmy.extension import Extension


class Gate:
    """The ``GATED`` executor (returns its input) behind an event the test sets."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, value: Any, cfg: dict[str, Any], ctx: Any) -> Any:
        self.entered.set()
        await self.release.wait()
        return value

    def extensions(self) -> tuple[Extension, ...]:
        """The app's usual extensions plus one adding ``GATED``."""
        gate = Extension(name="gate", executors=lambda settings: [ExecutorSpec("GATED", self.run)])
        return (*extensions(), gate)

    async def wait_entered(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.entered.wait(), timeout)

    def open(self) -> None:
        self.release.set()
