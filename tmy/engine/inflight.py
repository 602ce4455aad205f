"""Runs in flight, and waiting until none is (a reload, a shutdown's grace period).

The engine counts its runs itself (``_inflight`` is incremented and
decremented inline on the per-message path); :meth:`InFlight.drain` waits for
the count to reach zero without costing the hot path anything: the event it
waits on is made only when someone waits.
"""

from __future__ import annotations

import asyncio


class InFlight:
    """The in-flight count and :meth:`drain`; the engine is one."""

    def __init__(self) -> None:
        self._inflight = 0
        self._idle: asyncio.Event | None = None  # set when the last run in flight ends

    @property
    def inflight(self) -> int:
        return self._inflight

    async def drain(self, timeout: float) -> bool:
        """Wait until no run is in flight; False when ``timeout`` passed first."""
        if self._inflight == 0:
            return True
        if self._idle is None:  # made only when someone waits: the hot path never pays
            self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def _settled(self) -> None:
        """No run is in flight any more: wake :meth:`drain`."""
        idle = self._idle
        if idle is not None:
            self._idle = None
            idle.set()
