"""The console's live feed: the runs the engine reports, kept, counted and fanned out.

The engine calls its ``observer`` with every ``run.done`` / ``message.unmatched``
dict (:mod:`tmy.engine.tracing`). The feed's observer (:meth:`Feed.observe`) takes the
fields it needs as a tuple (:mod:`tmy.console.records`: one C call; the dict itself is
freed at once) and, every :data:`BATCH` runs or :data:`EVERY` seconds, drains them:

* counts them (:class:`~tmy.console.stats.Stats`: the overview's figures),
* keeps the newest :data:`RECENT` (the live page without JavaScript, and a run's
  trace when the log is off),
* offers them to each live view (:class:`Subscriber`), whose queue is bounded: a
  view that falls behind loses the oldest runs and is told how many
  (``"N runs skipped"``) instead of queueing without bound.

The work per run is a few C loops over each batch; the stream writers run at their
own pace (``tmy.console.live``). ``bench/console.py`` measures what it costs.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from tmy.console.records import (
    CHAT,
    LOGGED_FIELDS,
    MISS_KEYS,
    PLATFORM,
    RULE,
    RUN_FIELDS,
    RUN_KEYS,
    TRACE,
    USER,
    Record,
    error_of,
    record_of,
)
from tmy.console.stats import Stats
from tmy.logs import get_logger

log = get_logger("tmy.console")

_RUN, _MISS = itemgetter(*RUN_KEYS), itemgetter(*MISS_KEYS)

RECENT = 1000  # runs kept for the live page and traces
QUEUE = 500  # runs a live view may have waiting; older ones are skipped
EVERY = 0.1  # seconds between two drains
BATCH = 512  # runs reported that are drained at once, without waiting for the next tick

Event = dict[str, Any]
Seen = tuple[float, Record]  # (epoch seconds it was drained at, the run's record)
Batch = tuple[float, list[Record]]


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

    def __call__(self, r: Record) -> bool:
        """Whether the record ``r`` (:mod:`tmy.console.records`) is wanted."""
        if self.errors and not error_of(r):
            return False
        if self.rule and r[RULE] != self.rule:
            return False
        if self.user and r[USER] != self.user:
            return False
        if self.chat and r[CHAT] != self.chat:
            return False
        return not (self.platform and r[PLATFORM] != self.platform)

    def query(self) -> dict[str, str]:
        """The filter as query parameters (those set)."""
        out = {k: getattr(self, k) for k in ("rule", "user", "chat", "platform")}
        out = {k: v for k, v in out.items() if v}
        if self.errors:
            out["errors"] = "1"
        return out


class Subscriber:
    """One live view: the runs its filter admits, at most ``size`` waiting (in batches)."""

    def __init__(self, wanted: Filter, size: int = QUEUE) -> None:
        self.filter = wanted
        self.size = size
        self.queue: deque[Batch] = deque()
        self.waiting = 0  # runs in the queue
        self.offered = 0  # runs admitted so far
        self.handed = 0  # runs taken or skipped so far
        self.ready = asyncio.Event()

    def offer(self, batch: list[Record], now: float) -> None:
        items = batch if self.filter.empty else [r for r in batch if self.filter(r)]
        if not items:
            return
        self.queue.append((now, items))
        self.waiting += len(items)
        self.offered += len(items)
        while self.waiting > self.size:  # the oldest go
            at, oldest = self.queue[0]
            excess = self.waiting - self.size
            if len(oldest) <= excess:
                self.queue.popleft()
                self.waiting -= len(oldest)
            else:
                self.queue[0] = (at, oldest[excess:])
                self.waiting -= excess
        self.ready.set()

    def take(self) -> tuple[int, list[Seen]]:
        """(runs skipped since the last take, the runs waiting, oldest first)."""
        items = [(at, r) for at, batch in self.queue for r in batch]
        self.queue.clear()
        self.waiting = 0
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
        self._pending: list[Record] = []
        self.recent: deque[Batch] = deque()  # the newest ``recent`` runs, in batches
        self.keep = recent
        self.kept = 0
        self.stats = stats or Stats()
        self.subscribers: set[Subscriber] = set()
        self.drained = 0  # runs drained so far
        self.started = time.time()  # counting since
        self._timer: asyncio.TimerHandle | None = None
        self.observe: Callable[[Event], None] = self._observer()

    def _observer(self) -> Callable[[Event], None]:
        """The engine's observer: keep ``event``'s record (:mod:`tmy.console.records`; the
        dict itself goes at once); every :data:`BATCH` runs, drain them (a small batch is
        still in the caches). A closure over locals: it runs for every message."""
        pending = self._pending
        add, drain, run, miss = pending.append, self.drain, _RUN, _MISS

        def observe(event: Event) -> None:
            try:  # free in 3.11 until it catches: a console bug never fails a message
                if "steps" not in event:
                    add(miss(event))
                elif len(event) == (LOGGED_FIELDS if "level" in event else RUN_FIELDS):
                    add(run(event))
                else:  # a flagged run: its whole dict too
                    add(record_of(event))
                if len(pending) >= BATCH:
                    drain()
            except Exception as exc:
                pending.clear()
                log.error("console.feed_failed", error=f"{type(exc).__name__}: {exc}")

        return observe

    def drain(self, now: float | None = None) -> int:
        """Count, keep and fan out what the engine reported since the last drain."""
        pending = self._pending
        if not pending:
            return 0
        batch = pending[:]
        pending.clear()
        now = time.time() if now is None else now
        self.stats.add(batch, now)
        self._keep(batch, now)
        for sub in tuple(self.subscribers):
            sub.offer(batch, now)
        self.drained += len(batch)
        return len(batch)

    def _keep(self, batch: list[Record], now: float) -> None:
        recent = self.recent
        recent.append((now, batch))
        self.kept += len(batch)
        while self.kept - len(recent[0][1]) >= self.keep:
            self.kept -= len(recent.popleft()[1])

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
        for at, batch in reversed(self.recent):
            for r in reversed(batch):
                if wanted is None or wanted(r):
                    out.append((at, r))
                    if len(out) >= limit:
                        return out
        return out

    def find(self, trace_id: str) -> list[Seen]:
        """The kept runs of one trace (a run and the runs nested in it), oldest first."""
        self.drain()
        return [(at, r) for at, batch in self.recent for r in batch if r[TRACE] == trace_id]


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
