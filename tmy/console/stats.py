"""The console's own counters: what the overview shows, from the runs the engine reports.

No Prometheus needed: the live feed (:mod:`tmy.console.feed`) hands every batch of
``run.done`` / ``message.unmatched`` records to :meth:`Stats.add`, which keeps

* per-minute buckets for 24 hours: messages (a message that ran a rule or none;
  not a cron firing, not a rule run as a tool), runs, failed runs, LLM tokens;
* per 10-minute slots for 24 hours: runs per rule (the busiest rules) and, per
  rule and step, how often it ran, its total and its longest time (the slowest steps);
* the chats seen recently (the Chats page's list), the newest 1,000;
* LLM tokens used today (the steps' ``tokens``, see :func:`tmy.engine.tracing.step_fields`),
  by the daemon's time zone.

A busy bot's feed samples runs out (:mod:`tmy.console.feed`): those come as their
rule ids only, and are counted exactly all the same (messages, runs, busiest rules;
a failed run or one that used tokens is never sampled out). The step times and the
recent chats are taken from the runs kept; step counts are scaled up.

Memory stays bounded whatever the traffic: 1,440 buckets, 144 slots whose
per-rule and per-step tables keep their top :data:`SLOT_KEYS` entries (the current
slot counts every rule, up to :data:`CURRENT_KEYS`), 1,000 chats.
The work is done in batches off the engine's path (the feed drains ~10 times a
second), one pass over each batch.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from tmy.console.records import CHAT, ERROR, EVENT, FULL, PLAIN, PLATFORM, RULE, STEPS, USER, Record

MINUTES = 24 * 60  # per-minute buckets kept
SLOT_MINUTES = 10  # the busiest rules and slowest steps, per slot of this many minutes
SLOTS = MINUTES // SLOT_MINUTES
SLOT_KEYS = 400  # a past slot keeps its top rules; a step table is cut to its top half past it
CURRENT_KEYS = 50_000  # the current slot's rule counts are cut to their top half past this
CHATS = 1000  # recent chats kept
TIMED_PER_SECOND = 500  # runs a second whose step times are taken (past it: a sample)

# a bucket: [minute, messages, runs, errors, tokens]
_MINUTE, _MESSAGES, _RUNS, _ERRORS, _TOKENS = range(5)
_EVENT, _RULE, _ERROR, _STEPS = map(itemgetter, (EVENT, RULE, ERROR, STEPS))
_WHERE = itemgetter(PLATFORM, CHAT)
_STEP_FIELDS = 7  # keys of a step without tokens (tmy.engine.tracing.step_fields)


@dataclass
class _Slot:
    """Ten minutes of runs per rule and of step times per (rule, step uri)."""

    index: int  # minute // SLOT_MINUTES
    rules: Counter[str] = field(default_factory=Counter)
    steps: dict[str, list[Any]] = field(default_factory=dict)  # uri: [rule, n, total, max]


class Stats:
    """Counters over the last 24 hours (see the module docstring). ``tz``: the day of
    "tokens today" (the daemon's time zone; UTC when None)."""

    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz
        self._minutes: list[list[Any]] = [[-1, 0, 0, 0, 0] for _ in range(MINUTES)]
        self._slots: list[_Slot | None] = [None] * SLOTS
        self._chats: dict[tuple[str, str], dict[str, Any]] = {}
        self._day = ""
        self._day_minute = -1
        self._budget, self._budget_at = float(TIMED_PER_SECOND), 0.0
        self._tokens = 0  # counted on self._day (see tokens_on)
        self.total = {"messages": 0, "runs": 0, "errors": 0, "tokens": 0}

    # -- counting ---------------------------------------------------------------------------------

    def _bucket(self, minute: int) -> list[Any]:
        bucket = self._minutes[minute % MINUTES]
        if bucket[_MINUTE] != minute:
            bucket[:] = [minute, 0, 0, 0, 0]
        return bucket

    def _slot(self, minute: int) -> _Slot:
        index = minute // SLOT_MINUTES
        slot = self._slots[index % SLOTS]
        if slot is None or slot.index != index:
            before = self._slots[(index - 1) % SLOTS]
            if before is not None and len(before.rules) > SLOT_KEYS:  # closed: its top only
                before.rules = Counter(dict(before.rules.most_common(SLOT_KEYS)))
            slot = self._slots[index % SLOTS] = _Slot(index)
        return slot

    def add(
        self,
        batch: list[Record],
        now: float,
        sampled: list[str] | None = None,
        missed: list[str | None] | None = None,
    ) -> None:
        """Count ``batch`` (records, :mod:`tmy.console.records`, oldest first) seen at
        ``now`` (epoch seconds), and the runs sampled out (``sampled``: their rule ids,
        plain runs without an error) and messages no rule ran for (``missed``). This runs
        for every run the daemon makes, so the counting is done by C loops (``map``,
        ``count``, ``Counter.update``); step times of at most :data:`TIMED_PER_SECOND`
        runs a second (past it an even sample, counts scaled)."""
        sampled, missed = sampled or [], missed or []
        minute = int(now // 60)
        bucket, slot = self._bucket(minute), self._slot(minute)
        n = len(batch)
        kinds = list(map(_EVENT, batch))
        n_runs = kinds.count("run.done")
        runs = (
            batch
            if n_runs == n
            else [e for e, k in zip(batch, kinds, strict=True) if k == "run.done"]
        )
        errors = n_runs - list(map(_ERROR, runs)).count(None)
        not_messages = 0
        if list(map(len, runs)).count(PLAIN) != n_runs:  # a flagged run (nested, cron …)
            flagged = [r[FULL] for r in runs if len(r) > FULL]
            not_messages = sum(1 for e in flagged if "nested" in e or "scheduled" in e)
        steps = list(chain.from_iterable(map(_STEPS, runs)))
        tokens = 0  # only a model's step has them (one key more: tracing.step_fields)
        if list(map(len, steps)).count(_STEP_FIELDS) != len(steps):
            tokens = sum(map(dict.get, steps, repeat("tokens"), repeat(0)))
        slot.rules.update(map(_RULE, runs))
        if sampled:
            slot.rules.update(sampled)
        self._time_steps(slot, runs, now, len(runs) + len(sampled))
        n += len(sampled) + len(missed)
        n_runs += len(sampled)
        counts = {"messages": n - not_messages, "runs": n_runs, "errors": errors, "tokens": tokens}
        bucket[_MESSAGES] += counts["messages"]
        bucket[_RUNS] += n_runs
        bucket[_ERRORS] += errors
        bucket[_TOKENS] += tokens
        for key, value in counts.items():
            self.total[key] += value
        self._count_tokens(tokens, now)
        if len(slot.rules) > CURRENT_KEYS:
            slot.rules = Counter(dict(slot.rules.most_common(CURRENT_KEYS // 2)))
        if batch:
            self._seen(list(map(_WHERE, batch)), batch, now)

    def _time_steps(self, slot: _Slot, runs: list[Record], now: float, of: int) -> None:
        """Per step uri: runs, total and longest ms — of every run up to
        :data:`TIMED_PER_SECOND`, past that of an even sample (counts scaled up to ``of``
        runs: those kept and those the feed sampled out)."""
        if not runs:
            return
        self._budget = min(
            TIMED_PER_SECOND, self._budget + (now - self._budget_at) * TIMED_PER_SECOND
        )
        self._budget_at = now
        want = max(1, min(len(runs), int(self._budget)))
        self._budget -= want
        sample = runs if want >= len(runs) else runs[:: -(-len(runs) // want)]
        weight = of / len(sample)
        table = slot.steps
        for r in sample:
            rule = r[RULE]
            for s in r[STEPS]:
                if s["skipped"]:
                    continue
                ms = s["ms"]
                seen = table.get(s["uri"])
                if seen is None:
                    table[s["uri"]] = [rule, weight, ms * weight, ms]
                else:
                    seen[1] += weight
                    seen[2] += ms * weight
                    if ms > seen[3]:
                        seen[3] = ms
        if len(table) > SLOT_KEYS:
            best = heapq.nlargest(SLOT_KEYS // 2, table.items(), key=_slowest)
            slot.steps = dict(best)

    def _count_tokens(self, tokens: int, now: float) -> None:
        minute = int(now // 60)
        if minute == self._day_minute:  # the day is looked up once a minute
            self._tokens += tokens
            return
        self._day_minute = minute
        day = self._day_of(now)
        if day != self._day:
            self._day, self._tokens = day, 0
        self._tokens += tokens

    def _day_of(self, now: float) -> str:
        return datetime.fromtimestamp(now, self.tz or UTC).date().isoformat()

    def tokens_on(self, now: float) -> int:
        """LLM tokens used on ``now``'s day: 0 once a day has passed without any (the count
        is of the day its last tokens came, which may be yesterday)."""
        return self._tokens if self._day == self._day_of(now) else 0

    def _seen(self, wheres: list[tuple[str, str]], batch: list[Record], now: float) -> None:
        """The chats of ``batch`` (``wheres``: each one's (platform, chat)) move to the end of
        the recent ones, in the order of their last message, with that message's user."""
        last = dict(zip(wheres, batch, strict=True))  # each chat's last message
        known = self._chats
        for where in reversed(dict.fromkeys(reversed(wheres))):  # by last message, C loops
            r = last[where]
            known.pop(where, None)  # then in again, at the end: newest last
            known[where] = {"platform": where[0], "chat": where[1], "at": now,
                            "user": r[USER], "rule": r[RULE]}  # fmt: skip
        while len(known) > CHATS:
            del known[next(iter(known))]

    # -- reading ----------------------------------------------------------------------------------

    def window(self, now: float, minutes: int) -> dict[str, int]:
        """Messages, runs, errors and tokens over the last ``minutes`` minutes."""
        last = int(now // 60)
        out = {"messages": 0, "runs": 0, "errors": 0, "tokens": 0}
        for bucket in self._minutes:
            if last - minutes < bucket[_MINUTE] <= last:
                out["messages"] += bucket[_MESSAGES]
                out["runs"] += bucket[_RUNS]
                out["errors"] += bucket[_ERRORS]
                out["tokens"] += bucket[_TOKENS]
        return out

    def series(self, now: float, minutes: int, per: int) -> list[dict[str, Any]]:
        """The last ``minutes`` minutes in points of ``per`` minutes each (oldest first):
        ``{"start": epoch seconds, "messages", "runs", "errors"}`` — the overview's chart."""
        last = int(now // 60)
        first = last - minutes + 1
        points = [
            {"start": (first + i * per) * 60, "messages": 0, "runs": 0, "errors": 0}
            for i in range((minutes + per - 1) // per)
        ]
        for bucket in self._minutes:
            minute = bucket[_MINUTE]
            if first <= minute <= last:
                point = points[(minute - first) // per]
                point["messages"] += bucket[_MESSAGES]
                point["runs"] += bucket[_RUNS]
                point["errors"] += bucket[_ERRORS]
        return points

    def _slots_since(self, now: float, minutes: int) -> list[_Slot]:
        last = int(now // 60) // SLOT_MINUTES
        count = (minutes + SLOT_MINUTES - 1) // SLOT_MINUTES
        return [s for s in self._slots if s is not None and last - count < s.index <= last]

    def busiest_rules(self, now: float, minutes: int, top: int = 10) -> list[dict[str, Any]]:
        """The rules that ran most over about the last ``minutes`` (whole 10-minute slots)."""
        runs: dict[str, int] = {}
        for slot in self._slots_since(now, minutes):
            for rule, n in slot.rules.items():
                runs[rule] = runs.get(rule, 0) + n
        best = heapq.nlargest(top, runs.items(), key=_second)
        return [{"rule": rule, "runs": n} for rule, n in best]

    def slowest_steps(self, now: float, minutes: int, top: int = 10) -> list[dict[str, Any]]:
        """The steps with the longest mean time over about the last ``minutes``: rule, step
        uri, runs, mean and longest milliseconds."""
        merged: dict[str, list[Any]] = {}
        for slot in self._slots_since(now, minutes):
            for uri, (rule, n, total, longest) in slot.steps.items():
                seen = merged.get(uri)
                if seen is None:
                    merged[uri] = [rule, n, total, longest]
                else:
                    seen[1] += n
                    seen[2] += total
                    seen[3] = max(seen[3], longest)
        best = heapq.nlargest(top, merged.items(), key=_slowest)
        return [
            {
                "rule": rule,
                "step": uri,
                "runs": round(n),
                "mean_ms": round(total / n, 3),
                "max_ms": round(longest, 3),
            }
            for uri, (rule, n, total, longest) in best
        ]

    def recent_chats(self, limit: int = CHATS) -> list[dict[str, Any]]:
        """The chats seen lately, newest first: platform, chat, ``at`` (epoch seconds) and
        ``last_seen`` (ISO-8601 UTC), the last message's ``user`` and ``rule`` (None: no run)."""
        out = []
        for entry in reversed(self._chats.values()):
            stamp = datetime.fromtimestamp(entry["at"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            out.append({**entry, "last_seen": stamp})
            if len(out) >= limit:
                break
        return out


def _second(kv: tuple[Any, Any]) -> Any:
    return kv[1]


def _slowest(kv: tuple[str, list[Any]]) -> float:
    return kv[1][2] / kv[1][1]
