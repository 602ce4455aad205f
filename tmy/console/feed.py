"""The console's live feed: the runs the engine reports, kept, counted and fanned out.

The engine calls its ``observer`` with every ``run.done`` / ``message.unmatched``
dict (:mod:`tmy.engine.tracing`). The feed's observer (:meth:`Feed.observe`) keeps the
first :data:`ROOM` runs between two drains as records (:mod:`tmy.console.records`: a
tuple taken by one C call; the dict itself is freed at once). Past that — a busy bot,
more than ~1,500 runs a second — a plain run is *sampled out*: only its rule id is
noted (a string the rulebook holds anyway), so the counts stay exact while the engine
keeps nothing alive for it. A failed run, an unusual one (nested, scheduled, dry,
stopped, an event's) and one that used LLM tokens is always kept whole. Every
:data:`EVERY` seconds (or :data:`BATCH` kept runs) the feed drains them:

* counts them (:class:`~tmy.console.stats.Stats`: the overview's figures),
* keeps the newest :data:`RECENT` (the live page without JavaScript, and a run's
  trace when the log is off),
* offers them to each live view (:class:`Subscriber`), whose queue is bounded: a
  view that falls behind loses the oldest runs, and is told how many it missed —
  those and the sampled-out ones (``"N runs skipped"``) — instead of queueing
  without bound.

The work per run is an append; per drain a few C loops; the stream writers run at
their own pace (``tmy.console.live``). ``bench/console.py`` measures what it costs
(the engine's dispatch rate with a live view connected stays within 10%).
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
QUEUE = 1000  # runs a live view may have waiting; older ones are skipped
EVERY = 0.1  # seconds between two drains
ROOM = 150  # runs kept whole between two drains (1,500 a second); past it plain runs are sampled
BATCH = 512  # kept runs (errors past ROOM) drained at once, without waiting for the next tick
SAMPLED = 65536  # runs sampled out drained at once (a loop that never yields stays bounded)

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
        self.maybe = 0  # runs sampled out that this filter may have admitted (user, chat …)
        self.ready = asyncio.Event()

    def offer(self, batch: list[Record], now: float, sampled: int = 0, maybe: int = 0) -> None:
        """Queue the runs of ``batch`` the filter admits; ``sampled``: runs it would have
        admitted that were sampled out (reported as skipped by the next :meth:`take`);
        ``maybe``: runs sampled out it may have admitted (:meth:`take_maybe`)."""
        items = batch if self.filter.empty else [r for r in batch if self.filter(r)]
        if sampled or maybe:
            self.offered += sampled
            self.maybe += maybe
            self.ready.set()
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

    def take_maybe(self) -> int:
        """Runs sampled out since the last call that this view's filter (user, chat or
        platform: not known of a sampled-out run) may have admitted."""
        maybe, self.maybe = self.maybe, 0
        return maybe

    async def next(self, timeout: float) -> tuple[int, list[Seen]]:
        """:meth:`take` once something is waiting, or (0, []) after ``timeout`` seconds."""
        if not self.queue and self.offered == self.handed and not self.maybe:
            try:
                await asyncio.wait_for(self.ready.wait(), timeout)
            except TimeoutError:
                return 0, []
        return self.take()


class Feed:
    """Runs reported by one engine: counted, kept, and offered to the live views."""

    def __init__(
        self, stats: Stats | None = None, *, recent: int = RECENT, room: int = ROOM
    ) -> None:
        self._pending: list[Record] = []
        self._sampled: list[str] = []  # rule ids of the runs sampled out since the last drain
        self._missed: list[str | None] = []  # … of the messages no rule ran for (their rule)
        self.room = room
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
        dict itself goes at once) while fewer than ``room`` are waiting for the drain; past
        that note only a plain run's rule id (sampled out; failed and flagged runs are
        always kept). A closure over locals: it runs for every message."""
        pending, room = self._pending, self.room
        add, drain, run, miss = pending.append, self.drain, _RUN, _MISS
        sampled, missed_ = self._sampled, self._missed
        sample, missed = sampled.append, missed_.append

        def observe(event: Event) -> None:
            try:  # free in 3.11 until it catches: a console bug never fails a message
                if len(pending) >= room:  # a busy bot: sample
                    if "steps" not in event:
                        missed(event["rule"])
                        if len(missed_) >= SAMPLED:
                            drain()
                        return
                    if event["error"] is None and len(event) == (
                        LOGGED_FIELDS if "level" in event else RUN_FIELDS
                    ):
                        sample(event["rule"])
                        if len(sampled) >= SAMPLED:
                            drain()
                        return
                    add(record_of(event))  # failed or flagged: never sampled out
                    if len(pending) >= BATCH + room:
                        drain()
                elif "steps" not in event:
                    add(miss(event))
                elif len(event) == (LOGGED_FIELDS if "level" in event else RUN_FIELDS):
                    add(run(event))
                else:  # a flagged run: its whole dict too
                    add(record_of(event))
            except Exception as exc:
                pending.clear()
                log.error("console.feed_failed", error=f"{type(exc).__name__}: {exc}")

        return observe

    def drain(self, now: float | None = None) -> int:
        """Count, keep and fan out what the engine reported since the last drain: the
        number of runs and messages reported (kept or sampled out)."""
        pending, sampled, missed = self._pending, self._sampled, self._missed
        if not pending and not sampled and not missed:
            return 0
        batch, runs, misses = pending[:], sampled[:], missed[:]
        pending.clear()
        sampled.clear()
        missed.clear()
        now = time.time() if now is None else now
        self.stats.add(batch, now, runs, misses)
        if batch:
            self._keep(batch, now)
        for sub in tuple(self.subscribers):
            sub.offer(batch, now, *_sampled_for(sub.filter, runs, misses))
        n = len(batch) + len(runs) + len(misses)
        self.drained += n
        return n

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

    def since(self, wanted: Filter, at: float) -> list[Seen]:
        """The kept runs ``wanted`` admits reported after ``at`` (a batch's time, as a live
        stream's event id says it), oldest first: what a reconnecting view missed."""
        self.drain()
        return [(t, r) for t, batch in self.recent if t > at for r in batch if wanted(r)]

    def find(self, trace_id: str) -> list[Seen]:
        """The kept runs of one trace (a run and the runs nested in it), oldest first."""
        self.drain()
        return [(at, r) for at, batch in self.recent for r in batch if r[TRACE] == trace_id]


def _sampled_for(wanted: Filter, runs: list[str], misses: list[str | None]) -> tuple[int, int]:
    """Of the sampled-out runs (rule ids) and messages: how many ``wanted`` admits, and how
    many more it may admit. None for "errors only" (failed runs are never sampled out); a
    rule's are known; whose user, chat or platform they were is not."""
    if wanted.errors or not (runs or misses):
        return 0, 0
    n = (
        runs.count(wanted.rule) + misses.count(wanted.rule)
        if wanted.rule
        else len(runs) + len(misses)
    )
    if wanted.user or wanted.chat or wanted.platform:
        return 0, n
    return n, 0


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
