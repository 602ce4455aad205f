"""ADJUST: returns its input unchanged — the transfer tool of seed 004.

With ``input``/``INPUT``/``save`` it copies, combines and stores values:
accumulate ``PRE_ANSWER``, rotate a list with LOOPBACK, write a nested global.
"""

from __future__ import annotations

from typing import Any

from tmy.types import StepContext


async def adjust(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    return value
