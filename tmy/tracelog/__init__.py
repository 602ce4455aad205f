"""``trace TRACE_ID``: rebuild one past run from the JSON log alone.

The log is the only record a run leaves, so this reads nothing else: no store,
no rules. :mod:`~tmy.tracelog.search` finds a trace's lines, :mod:`~tmy.tracelog.view`
folds them (either shape the engine writes) into a :class:`TraceView`,
:mod:`~tmy.tracelog.render` shows it, :mod:`~tmy.tracelog.follow` tails the log
(``--follow``). The command itself is :mod:`tmy.commands.trace`.
"""

from __future__ import annotations

import asyncio

from tmy import logs
from tmy.config import Settings
from tmy.tracelog.follow import follow
from tmy.tracelog.render import render
from tmy.tracelog.search import (
    UNBOUNDED,
    Bound,
    Found,
    check_trace_id,
    log_path,
    read_trace,
    search,
)
from tmy.tracelog.view import StepView, TraceView, as_dict, build_view

__all__ = [
    "UNBOUNDED",
    "Bound",
    "Found",
    "StepView",
    "TraceView",
    "as_dict",
    "build_view",
    "check_trace_id",
    "follow",
    "log_path",
    "look_up",
    "look_up_async",
    "read_trace",
    "render",
    "search",
    "trace_reply",
    "trace_text",
]


def look_up(log_file: str, trace_id: str, limit: int, bound: Bound) -> tuple[str, TraceView | None]:
    """The run's text (with a note when a bound cut the search) and its view (None: no lines).

    Does not flush this process's log, so it is safe in a thread.
    """
    check_trace_id(trace_id)
    found = search(log_path(Settings(), log_file), trace_id, bound)
    note = ""
    if found.cut:
        note = f"\n(search stopped at {found.cut}: older lines of the log were not read)"
    if not found.entries:
        return f"no log lines for trace {trace_id} in {log_file}" + note, None
    view = build_view(trace_id, found.entries)
    return render(view, limit) + note, view


def trace_text(log_file: str, trace_id: str, limit: int = 120, bound: Bound = Bound()) -> str:
    """One run, readable, as ``.tmy trace ID`` shows it; ConfigError for a malformed id or no log.

    Blocking (it reads the log): the daemon calls :func:`trace_reply`.
    """
    logs.flush()
    return look_up(log_file, trace_id, limit, bound)[0]


async def look_up_async(
    log_file: str, trace_id: str, limit: int = 120, bound: Bound = Bound()
) -> tuple[str, TraceView | None]:
    """:func:`look_up` in a thread, the id checked first.

    Reading a large log on the event loop froze every chat for seconds; in a
    thread the daemon keeps serving while it is read.
    """
    check_trace_id(trace_id)
    logs.flush()  # this daemon's own buffered lines (on the loop: the sink is not thread-safe)
    return await asyncio.to_thread(look_up, log_file, trace_id, limit, bound)


async def trace_reply(log_file: str, trace_id: str, bound: Bound = Bound()) -> str:
    """``.tmy trace ID``: the run's text, the log read in a thread within ``bound``."""
    return (await look_up_async(log_file, trace_id, 120, bound))[0]
