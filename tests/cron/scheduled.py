"""Shared by the cron tests: rules loaded with the cron extension, a counting rule, polling."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from tmy.cron import EXTENSION as cron_extension
from tmy.errors import AdapterError
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.testing import LoopbackAdapter

UTC_ZONE = ZoneInfo("UTC")  # what settings.tz holds for timezone: UTC
GROUP = ", send_to: [{platform: onebot, chat: 'group:5'}]"


def load(text: str) -> Any:
    return load_sources([(Path("c.yaml"), text)], default_registry([cron_extension]))


def rule_with(schedule: str) -> str:
    return (
        "rules:\n  - id: job\n    schedule:\n"
        + "".join(f"      {line}\n" for line in schedule.strip().splitlines())
        + "    steps: [{plugin: ADJUST, input: 'at {FIRE_TIME}'}]\n"
    )


def counted(schedule: str, send_to: str = "") -> str:
    return (
        "variables:\n  ticks: {scope: global, default: 0}\n"
        f"rules:\n  - id: job\n    schedule: {{{schedule}{send_to}}}\n"
        "    steps:\n      - {plugin: ADJUST, input: '?= ticks + 1', save: ticks}\n"
        "      - {plugin: ADJUST, input: 'tick {FIRE_TIME}'}\n"
    )


async def wait_for(check: Any, timeout: float = 5.0) -> Any:
    """Poll ``check()`` (a coroutine function) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.05)


async def history(store: Any, rule: str = "job") -> list[dict[str, Any]]:
    return (await store.get(f"cron/hist/{rule}")) or []


class RefusesFirstSend(LoopbackAdapter):
    """A platform named onebot that refuses its first ``refuse`` sends (every send with
    None), as OneBot does before NapCat connects; ``attempts`` has every text it was given
    (a list two daemons may share)."""

    def __init__(self, refuse: int | None = 1, attempts: list[str] | None = None) -> None:
        super().__init__("onebot")
        self.refuse = refuse
        self.attempts = [] if attempts is None else attempts

    async def send(self, target: Any, text: str) -> None:
        self.attempts.append(text)
        if self.refuse is None or len(self.attempts) <= self.refuse:
            raise AdapterError("onebot: no bot account connected")
        await super().send(target, text)
