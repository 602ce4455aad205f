"""The repeat limiter: a log line repeated in a tight loop is written a few times, then counted."""

from __future__ import annotations

import time
from typing import Any

REPEAT_BURST = 10  # identical warning/error lines let through per key and interval
REPEAT_INTERVAL = 60.0  # seconds; then one "suppressed K repeats" line for the rest
REPEAT_KEYS = 4096  # distinct lines tracked at once (the oldest are reported and forgotten)


class RepeatLimiter:
    """The first :data:`REPEAT_BURST` identical lines per interval pass; the rest are counted.

    A failure that repeats in a tight loop — asyncio's ``accept()`` "Too many
    open files" traceback once per attempt, a refused request per attack
    packet — must not grow the log at the attacker's pace (217,000 tracebacks,
    91 MB in 40 s, before this existed). When a key's interval ends with
    suppressed lines, :meth:`due` hands back one summary per key: the log says
    how many lines it left out and shows one of them.
    """

    def __init__(
        self,
        burst: int = REPEAT_BURST,
        interval: float = REPEAT_INTERVAL,
        max_keys: int = REPEAT_KEYS,
    ) -> None:
        self.burst = burst
        self.interval = interval
        self.max_keys = max_keys
        # key -> [window start, lines seen in the window, sample of what was suppressed]
        self._windows: dict[Any, list[Any]] = {}
        self._pending: list[tuple[Any, int, Any]] = []  # (key, suppressed, sample)
        self._checked = 0.0  # when pending() last let a sweep through

    def allow(self, key: Any, sample: Any, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval:
            if window is not None:
                self._close(key, window)
            elif len(self._windows) >= self.max_keys:
                self._evict(now)
            self._windows[key] = [now, 1, None]
            return True
        window[1] += 1
        if window[1] <= self.burst:
            return True
        window[2] = sample
        return False

    def pending(self, now: float | None = None) -> bool:
        """Whether :meth:`due` may have something to say (checked at most once a second)."""
        now = time.monotonic() if now is None else now
        if self._pending:
            return True
        if not self._windows or now - self._checked < 1.0:
            return False
        self._checked = now
        return True

    def due(self, now: float | None = None) -> list[tuple[Any, int, Any]]:
        """(key, suppressed, sample) for every window that ended with lines left out."""
        now = time.monotonic() if now is None else now
        for key, window in list(self._windows.items()):
            if now - window[0] >= self.interval:
                del self._windows[key]
                self._close(key, window)
        out, self._pending = self._pending, []
        return out

    def _close(self, key: Any, window: list[Any]) -> None:
        suppressed = window[1] - self.burst
        if suppressed > 0:
            self._pending.append((key, suppressed, window[2]))

    def _evict(self, now: float) -> None:
        self.due(now)  # ended windows are reported into _pending, not lost
        while len(self._windows) >= self.max_keys:
            key = next(iter(self._windows))
            self._close(key, self._windows.pop(key))
