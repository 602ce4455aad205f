"""The console's live feed: the runs the engine reports, kept, counted and fanned out.

The engine calls its ``observer`` with every ``run.done`` / ``message.unmatched``
dict (:mod:`tmy.engine.tracing`). The feed's observer is a bounded deque's
``append``: one C call on the message's path, nothing else. About ten times a
second (and whenever a page reads it) :meth:`Feed.drain` takes the batch and

* counts it (:class:`~tmy.console.stats.Stats`: the overview's figures),
* keeps the newest :data:`RECENT` in a ring (the live page without JavaScript, and a
  run's trace when the log is off),
* offers it to each live view (:class:`Subscriber`), whose queue is bounded: a
  view that falls behind loses the oldest runs and is told how many
  (``"N runs skipped"``) instead of queueing without bound.

Nothing here can slow message handling down beyond that ``append``: a full
pending deque (a loop that never yields for :data:`PENDING` runs) forgets its
oldest runs, and the stream writers run at their own pace.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from tmy.console.stats import Stats

RECENT = 1000  # runs kept for the live page and traces
PENDING = 1 << 16  # runs reported but not yet drained, at most
QUEUE = 500  # runs a live view may have waiting; older ones are skipped
EVERY = 0.1  # seconds between two drains

Event = dict[str, Any]
Seen = tuple[float, Event]  # (epoch seconds it was drained at, the engine's dict)


@dataclass(frozen=True)
class Filter:
    """What a live view wants: empty fields match everything."""

    rule: str = ""
    user: str = ""
    chat: str = ""
    platform: str = ""
    errors: bool = False

    @classmethod
    def of(cls, query: Any) -> Filter:
        """From a query mapping (``rule``, ``user``, ``chat``, ``platform``, ``errors``)."""

        def get(name: str) -> str:
            return str(query.get(name, "") or "").strip()[:256]

        errors = get("errors").lower() in ("1", "on", "true", "yes")
        return cls(get("rule"), get("user"), get("chat"), get("platform"), errors)

    @property
    def empty(self) -> bool:
        return not (self.rule or self.user or self.chat or self.platform or self.errors)

    def __call__(self, e: Event) -> bool:
        if self.errors and not e.get("error"):
            return False
        if self.rule and e.get("rule") != self.rule:
            return False
        if self.user and e.get("user") != self.user:
            return False
        if self.chat and e.get("chat") != self.chat:
            return False
        return not (self.platform and e.get("platform") != self.platform)

    def query(self) -> dict[str, str]:
        """The filter as query parameters (those set)."""
        out = {k: getattr(self, k) for k in ("rule", "user", "chat", "platform")}
        out = {k: v for k, v in out.items() if v}
        if self.errors:
            out["errors"] = "1"
        return out


class Subscriber:
    """One live view: the runs its filter admits, at most ``size`` waiting."""

    def __init__(self, wanted: Filter, size: int = QUEUE) -> None:
        self.filter = wanted
        self.queue: deque[Seen] = deque(maxlen=size)
        self.offered = 0  # runs admitted so far
        self.handed = 0  # runs taken or skipped so far
        self.ready = asyncio.Event()

    def offer(self, batch: list[Event], now: float) -> None:
        items = batch if self.filter.empty else [e for e in batch if self.filter(e)]
        if items:
            self.queue.extend(zip(repeat(now), items))  # the oldest drop out past its size
            self.offered += len(items)
            self.ready.set()

    def take(self) -> tuple[int, list[Seen]]:
        """(runs skipped since the last take, the runs waiting, oldest first)."""
        items = list(self.queue)
        self.queue.clear()
        self.ready.clear()
        skipped = self.offered - self.handed - len(items)
        self.handed = self.offered
        return skipped, items

    async def next(self, timeout: float) -> tuple[int, list[Seen]]:
        """:meth:`take` once something is waiting, or (0, []) after ``timeout`` seconds."""
        if not self.queue:
            try:
                await asyncio.wait_for(self.ready.wait(), timeout)
            except TimeoutError:
                return 0, []
        return self.take()


class Feed:
    """Runs reported by one engine: counted, kept, and offered to the live views."""

    def __init__(self, stats: Stats | None = None, *, recent: int = RECENT) -> None:
        self._pending: deque[Event] = deque(maxlen=PENDING)
        self.observe: Callable[[Event], None] = self._pending.append  # the engine's observer
        self.recent: deque[Seen] = deque(maxlen=recent)
        self.stats = stats or Stats()
        self.subscribers: set[Subscriber] = set()
        self.drained = 0  # runs drained so far
        self.started = time.time()  # counting since
        self._timer: asyncio.TimerHandle | None = None

    def drain(self, now: float | None = None) -> int:
        """Count, keep and fan out what the engine reported since the last drain."""
        pending = self._pending
        if not pending:
            return 0
        batch = list(pending)
        pending.clear()
        now = time.time() if now is None else now
        self.stats.add(batch, now)
        self.recent.extend(zip(repeat(now), batch))
        for sub in tuple(self.subscribers):
            sub.offer(batch, now)
        self.drained += len(batch)
        return len(batch)

    # -- the ticker: a loop callback, not a task (nothing to cancel when the loop ends) -------

    def start(self, every: float = EVERY) -> None:
        """Drain every ``every`` seconds on the running loop (no-op without one, or twice)."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return

        def tick() -> None:
            self._timer = loop.call_later(every, tick)
            self.drain()

        self._timer = loop.call_later(every, tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- reading ------------------------------------------------------------------------------

    def subscribe(self, wanted: Filter, size: int = QUEUE) -> Subscriber:
        sub = Subscriber(wanted, size)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def latest(self, wanted: Filter | None = None, limit: int = 100) -> list[Seen]:
        """The newest ``limit`` kept runs ``wanted`` admits, newest first."""
        self.drain()
        out: list[Seen] = []
        for seen in reversed(self.recent):
            if wanted is None or wanted(seen[1]):
                out.append(seen)
                if len(out) >= limit:
                    break
        return out

    def find(self, trace_id: str) -> list[Seen]:
        """The kept runs of one trace (a run and the runs nested in it), oldest first."""
        self.drain()
        return [seen for seen in self.recent if seen[1].get("trace_id") == trace_id]


# one feed per engine (the app's), made when the console is mounted or first read
_FEEDS: weakref.WeakKeyDictionary[Any, Feed] = weakref.WeakKeyDictionary()


def attach(engine: Any, tz: Any = None) -> Feed:
    """The feed ``engine`` reports to: made (and set as its ``observer``) the first time,
    its ticker started when a loop runs. ``tz``: the day of "tokens today"."""
    feed = _FEEDS.get(engine)
    if feed is None:
        feed = _FEEDS[engine] = Feed(Stats(tz))
        engine.observer = feed.observe
    feed.start()
    return feed


def feed_of(app: Any) -> Feed | None:
    """The feed of ``app``'s engine, if the console made one."""
    engine = getattr(app, "engine", None)
    return _FEEDS.get(engine) if engine is not None else None


def recent_chats(app: Any, limit: int = 1000) -> list[dict[str, Any]]:
    """The chats ``app``'s engine saw lately, newest first ([] before the console counts):
    platform, chat, ``at`` (epoch seconds), the last ``user`` and ``rule``."""
    feed = feed_of(app)
    if feed is None:
        return []
    feed.drain()
    return feed.stats.recent_chats(limit)
