"""``trace TRACE_ID [--log FILE] [--json] [--follow]``; in chat ``.tmy trace ID``.

One past run rebuilt from the JSON log (:mod:`tmy.tracelog`). The CLI is a
process of its own: it reads the whole log, shows values up to 200 characters,
prints "no log lines …" to stderr (exit 1) and takes any id. In a daemon (chat,
HTTP) the id must look like a trace id, the log is read in a thread within a
:class:`~tmy.tracelog.Bound` (the reply says when the bound stopped the search),
so chats keep being answered; chat shows values up to 120 characters.
"""

from __future__ import annotations

import asyncio
import json
import threading

from tmy import logs
from tmy.command import CLI_ONLY, Arg, Command, CommandError, Invocation, Result
from tmy.errors import ConfigError
from tmy.tracelog import (
    UNBOUNDED,
    Bound,
    TraceView,
    as_dict,
    follow,
    log_path,
    look_up,
    look_up_async,
    render,
)

LIMIT, CHAT_LIMIT = 200, 120  # characters of a value shown


async def _follow(inv: Invocation) -> Result:
    """``--follow``: every run as it ends, until Ctrl-C (the CLI only).

    The tail runs in a thread: Ctrl-C cancels this coroutine, which stops the tail.
    """
    if inv.args["trace_id"]:
        raise ConfigError("--follow shows every run: give no TRACE_ID with it")
    path = log_path(inv.settings, inv.args.get("log"))
    emit = inv.emit
    assert emit is not None

    def show(view: TraceView) -> None:
        if inv.args.get("json"):
            emit(json.dumps(as_dict(view), ensure_ascii=False))
        else:
            emit(render(view, LIMIT) + "\n")

    emit(f"following {path} (Ctrl-C to stop)", stderr=True)
    stop = threading.Event()
    try:
        await asyncio.to_thread(follow, path, show, stop=stop.is_set)
    finally:
        stop.set()
    return Result("")


async def _run(inv: Invocation) -> Result:
    trace_id = inv.args["trace_id"]
    if inv.front == "cli":
        logs.configure("warning")  # this process only reads the log: its own lines to stderr
        if inv.args.get("follow"):
            return await _follow(inv)
        if not trace_id:
            raise ConfigError("give a TRACE_ID (a reply's trace id), or --follow")
        path = log_path(inv.settings, inv.args.get("log"))
        logs.flush()
        text, view = look_up(str(path), trace_id, LIMIT, UNBOUNDED)
    else:
        if not trace_id:
            raise CommandError("usage: trace TRACE_ID")
        limit = CHAT_LIMIT if inv.compact else LIMIT
        text, view = await look_up_async(inv.settings.log_file, trace_id, limit, Bound())
    if view is None:
        return Result(text, None, ok=False)
    return Result(text, as_dict(view))


TRACE = Command(
    name="trace",
    help="rebuild a past run from the JSON log (--follow tails it)",
    run=_run,
    needs="settings",
    usage="ID",
    json_help="print the run(s) as JSON",
    args=(
        Arg("trace_id", "a reply's trace id", required=False, metavar="TRACE_ID"),
        Arg("log", "the JSON log (default: log.file)", flag=True, metavar="FILE", fronts=CLI_ONLY),
        Arg(
            "follow",
            "tail the log, printing each run as it ends",
            flag=True,
            takes_value=False,
            short="-f",
            fronts=CLI_ONLY,
        ),
    ),
)
