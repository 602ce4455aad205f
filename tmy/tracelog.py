"""``python run.py trace TRACE_ID``: rebuild one past run from the JSON log alone.

The log is the only record a run leaves, so this reads nothing else: no store,
no rules. It accepts both shapes the engine writes or will write — one line
per event (``message.received``, ``rule.matched``, ``step.start``/``step.done``/
``step.skipped``, ``run.failed``, ``run.stopped``, ``reply.sent``,
``message.unmatched``) and a single ``run.done`` line carrying a ``steps`` list —
so old logs stay readable after the engine changes. ``--follow`` tails the log
and prints each run in the same form once it finishes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tmy.config import Settings
from tmy.errors import ConfigError

HELP = "rebuild a past run from the JSON log (--follow tails it)"

# lines that end a run: --follow prints the run when one arrives
FINISHING = {"reply.sent", "run.done", "message.unmatched", "message.refused", "run.cooldown"}
# a cron run has no reply.sent: it ends with cron.done
CRON_START, CRON_END = "cron.fired", "cron.done"
QUIET_SECONDS = 2.0  # --follow prints a run with no finishing line after this much silence
# ... and a finished one after this much: at debug, reply.sent follows run.done
SETTLE_SECONDS = 0.4
WARNING_LEVELS = {"warning", "error", "critical", "exception"}
_META = ("event", "trace_id", "timestamp", "level", "logger")

# What ``.tmy trace ID`` accepts: the engine's ids are 16 hex digits (explain's
# "explain-" + 12); a shorter or odd id is refused before any byte is read.
TRACE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{7,63}")
# ``.tmy trace`` reads the log off the event loop, newest lines first, and stops at the
# first of these bounds (its reply says so): the daemon answers while a large log is read.
CHAT_SCAN_BYTES = 256 * 1024 * 1024
CHAT_SCAN_LINES = 5000  # lines of the trace kept
CHAT_SCAN_SECONDS = 5.0
_WINDOW = 8 * 1024 * 1024  # bytes searched between two looks at the time budget


@dataclass
class StepView:
    """One step as the log saw it; ``done`` is False when it started but never finished."""

    uri: str
    plugin: str | None = None
    input: Any = None
    result: Any = None
    error: str | None = None
    ms: float | None = None
    skipped: bool = False
    reason: str | None = None  # why it was skipped (``when``, an extension key)
    done: bool = False


@dataclass
class TraceView:
    """Everything one trace id's lines say about its run."""

    trace_id: str
    started: str | None = None  # timestamp of the first line
    message: dict[str, Any] = field(default_factory=dict)  # text, user, chat, platform
    rule: str | None = None
    trigger: str | None = None
    question: Any = None
    steps: list[StepView] = field(default_factory=list)
    reply: dict[str, Any] | None = None  # answer, error, ms
    unmatched: str | None = None  # why no rule ran
    failed_at: str | None = None  # the step uri of a failed run
    stopped: str | None = None  # the step uri whose ``stop:`` ended the run
    warnings: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # other lines, in order
    lines: int = 0
    dry_run: bool = False  # an explain dry run: nothing was stored or sent

    @property
    def complete(self) -> bool:
        return self.reply is not None or self.unmatched is not None


# -- reading ---------------------------------------------------------------------------


def log_path(settings: Settings, override: str | None = None) -> Path:
    """The log to read: ``--log``, else ``log.file`` / ``TMY_LOG_FILE``."""
    name = override or settings.log_file
    if not name:
        raise ConfigError(
            "no log file: set log.file in the config or TMY_LOG_FILE, or pass --log FILE"
        )
    return Path(name)


@dataclass(frozen=True, slots=True)
class Bound:
    """How much of the log one search may read: bytes (newest first), lines kept, seconds."""

    max_bytes: int = CHAT_SCAN_BYTES
    max_lines: int = CHAT_SCAN_LINES
    seconds: float = CHAT_SCAN_SECONDS


UNBOUNDED = Bound(max_bytes=1 << 62, max_lines=1 << 62, seconds=float("inf"))


@dataclass
class Found:
    """A search's result: the trace's entries (oldest first) and, if a bound stopped it, which."""

    entries: list[dict[str, Any]]
    cut: str | None = None  # "the last 256 MB", "5000 lines", "5 s": what was not searched
    scanned: int = 0  # bytes searched


def check_trace_id(trace_id: str) -> str:
    """``trace_id`` if it has a trace id's shape, else ConfigError saying what one looks like."""
    if not TRACE_ID_RE.fullmatch(trace_id):
        shown = trace_id if len(trace_id) <= 70 else trace_id[:70] + "…"
        raise ConfigError(
            f"{shown!r} is not a trace id: give a whole trace id, 8 to 64 letters, digits "
            "or . _ : - (a reply's trace id looks like 24ea56ec00000001)"
        )
    return trace_id


def _needle(trace_id: str) -> bytes:
    """What a line holding ``trace_id`` as a JSON string contains.

    An id of the usual shape needs no JSON escape, so ``"<id>"`` with its quotes
    is exact: a short id no longer matches (and JSON-parses) every line that
    merely contains it. Any other id (the CLI takes anything) is searched bare.
    """
    if TRACE_ID_RE.fullmatch(trace_id):
        return b'"' + trace_id.encode() + b'"'
    return trace_id.encode()


def _scan_back(mm: Any, needle: bytes, low: int, deadline: float) -> Iterator[tuple[int, bytes]]:
    """(start, line) of the lines of ``mm[low:]`` holding ``needle``, newest first.

    Searches windows of :data:`_WINDOW` bytes from the end so that the time
    budget is looked at between them; yields ``(-1, b"")`` when it runs out.
    """
    end = len(mm)
    start = max(low, end - _WINDOW)
    while True:
        pos = mm.rfind(needle, start, end)
        if pos != -1:
            first = mm.rfind(b"\n", 0, pos) + 1
            stop = mm.find(b"\n", pos)
            yield first, mm[first : len(mm) if stop == -1 else stop]
            end = first
            start = max(low, min(start, end - _WINDOW))
            continue
        if start <= low:
            return
        if time.monotonic() > deadline:
            yield -1, b""
            return
        end = start + len(needle) - 1  # a match across the window's edge is found next
        start = max(low, end - _WINDOW)


def search(path: Path, trace_id: str, bound: Bound = UNBOUNDED) -> Found:
    """Every log entry of ``trace_id`` within ``bound``, oldest first (``FILE.1`` before ``FILE``).

    Reads newest first, so a bound keeps the most recent runs; a byte search
    (no parsing) picks the candidate lines and only those are JSON-parsed.
    Blocking: the daemon calls it in a thread (:func:`trace_reply`). Raises
    ConfigError when the log does not exist or is empty.
    """
    if not path.exists():
        raise ConfigError(f"the log file {path} does not exist (log.file / TMY_LOG_FILE / --log)")
    if path.stat().st_size == 0:
        raise ConfigError(f"the log file {path} is empty: nothing has been logged there yet")
    needle = _needle(trace_id)
    deadline = time.monotonic() + bound.seconds
    budget = bound.max_bytes
    newest_first: list[dict[str, Any]] = []
    cut: str | None = None
    scanned = 0
    for file in (path, path.with_name(path.name + ".1")):
        if cut is not None or not file.is_file():
            continue
        if budget <= 0:
            cut = f"the last {_size(bound.max_bytes)}"
            break
        with file.open("rb") as f:
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                continue
            with mm:
                low = max(0, len(mm) - budget)
                reached = len(mm)
                for n, (at, raw) in enumerate(_scan_back(mm, needle, low, deadline), 1):
                    if at == -1 or (n % 256 == 0 and time.monotonic() > deadline):
                        cut = f"{bound.seconds:g} s of searching"
                        break
                    reached = at
                    entry = _parse(raw)
                    if entry is not None and entry.get("trace_id") == trace_id:
                        newest_first.append(entry)
                        if len(newest_first) >= bound.max_lines:
                            cut = f"{bound.max_lines} lines"
                            break
                else:
                    reached = low
                    if low > 0:
                        cut = f"the last {_size(bound.max_bytes)}"
                scanned += len(mm) - reached
                budget -= len(mm) - reached
    newest_first.reverse()
    return Found(newest_first, cut, scanned)


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):g} MB" if n >= 1024 * 1024 else f"{n} bytes"


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def read_trace(path: Path, trace_id: str) -> list[dict[str, Any]]:
    """Every log entry of ``trace_id``, oldest first (the rotated ``FILE.1`` before ``FILE``).

    Raises ConfigError when the log does not exist or is empty: that is a
    misconfigured path far more often than a run that logged nothing. This
    process's own buffered lines are flushed first.
    """
    from tmy import logs

    logs.flush()
    return search(path, trace_id).entries


# -- rebuilding ------------------------------------------------------------------------


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in _META}


def _seconds(stamp: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


_WHO = ("text", "user", "chat", "platform")


def build_view(trace_id: str, entries: Iterable[dict[str, Any]]) -> TraceView:
    """Fold one trace's log entries (either shape, or both mixed) into a :class:`TraceView`.

    A trace can hold several ``run.done`` lines: a rule the LLM ran as a tool
    logs its own before the outer run's. The last one not marked ``nested``
    is the run; the others are kept as events.
    """
    entries = list(entries)
    main = max(
        (i for i, e in enumerate(entries) if e.get("event") == "run.done" and not e.get("nested")),
        default=-1,
    )
    view = TraceView(trace_id, lines=len(entries))
    first: float | None = None
    for i, entry in enumerate(entries):
        event = entry.get("event", "?")
        if view.started is None:
            view.started = entry.get("timestamp")
            first = _seconds(view.started)
        if event == "message.received":
            view.message = {k: entry.get(k) for k in _WHO}
        elif event in ("message.unmatched", "message.refused", "run.cooldown"):
            view.message = {**view.message, **{k: entry[k] for k in _WHO if k in entry}}
            view.rule = entry.get("rule") or view.rule
            reason = entry.get("reason") or "no rule ran"
            if event == "message.refused":
                reason = f"refused: {reason}"
            elif event == "run.cooldown":
                reason = f"rule {view.rule!r} is cooling down ({entry.get('left')} s left)"
                if entry.get("answer"):
                    view.reply = {"answer": entry["answer"], "error": None, "ms": None}
            view.unmatched = reason
        elif event == "rule.matched":
            view.rule, view.trigger = entry.get("rule"), entry.get("trigger")
            view.question = entry.get("QUESTION")
        elif event == "step.start":
            view.steps.append(StepView(str(entry.get("uri")), entry.get("plugin")))
        elif event == "step.done":
            step = _open_step(view, entry.get("uri"))
            step.plugin = entry.get("plugin", step.plugin)
            step.input, step.result = entry.get("input"), entry.get("result")
            step.error, step.ms, step.done = entry.get("error"), entry.get("ms"), True
        elif event == "step.skipped":
            uri, plugin, reason = str(entry.get("uri")), entry.get("plugin"), entry.get("reason")
            view.steps.append(StepView(uri, plugin, skipped=True, reason=reason, done=True))
        elif event == "run.stopped":
            view.stopped = entry.get("uri") or "?"
        elif event == "reply.sent":
            view.rule = entry.get("rule") or view.rule
            view.reply = {k: entry.get(k) for k in ("answer", "error", "ms")}
        elif event == "run.done" and i == main:
            _run_done(view, entry)
            view.dry_run = bool(entry.get("dry_run"))
        else:
            if event == "run.failed":
                view.failed_at = entry.get("uri")
            elif event == CRON_END and view.reply is None:
                error = None if entry.get("outcome") == "ok" else entry.get("outcome")
                view.reply = {"answer": entry.get("answer"), "error": error, "ms": None}
            seen = _seconds(entry.get("timestamp"))
            at = round((seen - first) * 1000, 3) if seen is not None and first else None
            fields = _fields(entry)
            if event == "run.done":  # a nested run: what it answered, not all its steps again
                fields["steps"] = [s.get("uri") for s in fields.get("steps") or [] if s]
            line = {"event": event, "level": entry.get("level"), "at_ms": at, **fields}
            if entry.get("level") in WARNING_LEVELS:
                view.warnings.append(line)
            elif event != "run.failed":
                view.events.append(line)
    return view


def _open_step(view: TraceView, uri: Any) -> StepView:
    """The started, unfinished step ``uri`` (a repeated step logs several starts)."""
    for step in view.steps:
        if step.uri == str(uri) and not step.done:
            return step
    step = StepView(str(uri))
    view.steps.append(step)
    return step


def _run_done(view: TraceView, entry: dict[str, Any]) -> None:
    """The one-line-per-run shape: everything in one entry, steps as a list of dicts.

    Its ``steps`` list is the run's; per-step lines seen before it (``step.skipped``
    at info, every step at debug) only lend what the list lacks, the skip reason.
    """
    view.message = {**view.message, **{k: entry[k] for k in _WHO if k in entry}}
    view.rule = entry.get("rule", view.rule)
    view.trigger = entry.get("trigger", view.trigger)
    view.question = entry.get("question", entry.get("QUESTION", view.question))
    if "steps" in entry:
        earlier, view.steps = view.steps, []
        for raw in entry.get("steps") or []:
            if not isinstance(raw, dict):
                continue
            uri, skipped = str(raw.get("uri")), raw.get("skipped")
            seen = next((s for s in earlier if s.uri == uri), None)
            if seen is not None:
                earlier.remove(seen)
            reason = raw.get("reason") or (skipped if isinstance(skipped, str) else None)
            view.steps.append(
                StepView(
                    uri,
                    raw.get("plugin"),
                    input=raw.get("input"),
                    result=raw.get("result"),
                    error=raw.get("error"),
                    ms=raw.get("ms"),
                    skipped=bool(skipped),
                    reason=reason or (seen.reason if seen else None),
                    done=True,
                )
            )
    stopped = entry.get("stopped")
    if stopped and view.stopped in (None, "?"):
        ran = [s.uri for s in view.steps if not s.skipped]
        view.stopped = stopped if isinstance(stopped, str) else (ran[-1] if ran else "?")
    if view.failed_at is None and entry.get("error"):
        failed = [s.uri for s in view.steps if s.error]
        view.failed_at = failed[-1] if failed else None
    view.reply = {k: entry.get(k) for k in ("answer", "error", "ms")}


def as_dict(view: TraceView) -> dict[str, Any]:
    """The view as plain JSON-able data (``--json``)."""
    return {**asdict(view), "complete": view.complete}


# -- rendering -------------------------------------------------------------------------


def _show(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "…"


def _kv(line: dict[str, Any], limit: int, *skip: str) -> str:
    """``event  key=value …`` for a line the view has no slot for."""
    skip = ("event", "level", "at_ms", *skip)
    rest = (f"{k}={_show(v, limit)}" for k, v in line.items() if k not in skip and v is not None)
    return f"{line['event']}  " + " ".join(rest)


def _quoted(value: Any, limit: int) -> str:
    """A value with its type visible: strings quoted, numbers and null bare."""
    if isinstance(value, str):
        cut = value if len(value) <= limit else value[:limit] + "…"
        return json.dumps(cut, ensure_ascii=False)
    return _show(value, limit)


def _ms(value: Any) -> str:
    return f"{value:g} ms" if isinstance(value, (int, float)) else ""


def render(view: TraceView, limit: int = 200) -> str:
    """The run as a person reads it: message, rule, each step, warnings, the reply."""
    pad = " " * 10
    out = [f"trace     {view.trace_id}" + (f"  {view.started}" if view.started else "")]
    if view.dry_run:
        out.append("dry run   an explain dry run: nothing was stored or sent")
    msg = view.message
    if msg:
        where = f"{msg.get('user')} in {msg.get('chat') or '-'} ({msg.get('platform')})"
        out.append(f"message   {_quoted(msg.get('text') or '', limit)}  from {where}")
    if view.rule:
        rule = f"rule      {view.rule}"
        if view.trigger is not None:
            rule += f"  trigger {_quoted(view.trigger, limit)}"
        if view.question not in (None, ""):
            rule += f"  question {_quoted(view.question, limit)}"
        out.append(rule)
    if view.unmatched:
        out.append(f"no run    {view.unmatched}")
    by_uri: dict[str, list[dict[str, Any]]] = {}
    loose = []
    uris = {s.uri for s in view.steps}
    for line in view.events:
        (by_uri.setdefault(line["uri"], []) if line.get("uri") in uris else loose).append(line)
    for n, step in enumerate(view.steps, 1):
        head = f"{f'step {n}':<9} {step.uri}  {step.plugin or '?'}"
        if step.skipped:
            out.append(f"{head}  skipped ({step.reason or '?'})")
            continue
        if not step.done:
            out.append(f"{head}  started, no result logged")
        else:
            out.append(f"{head}  {_ms(step.ms)}" + ("  FAILED" if step.error else ""))
            out.append(f"{pad}  input   {_quoted(step.input, limit)}")
            out.append(f"{pad}  result  {_quoted(step.result, limit)}")
            if step.error:
                out.append(f"{pad}  error   {_show(step.error, limit)}")
        for line in by_uri.pop(step.uri, []):
            out.append(f"{pad}  {_kv(line, limit, 'uri')}")
        if view.stopped == step.uri:
            out.append(f"{pad}  stop: held, the run ended after this step")
    for line in loose:
        at = f"+{_ms(line['at_ms'])} " if line.get("at_ms") is not None else ""
        out.append(f"event     {at}{_kv(line, limit)}")
    error = (view.reply or {}).get("error")
    for line in view.warnings:
        if line["event"] == "run.failed" and error:
            continue  # the reply's error line says it, with where
        out.append(f"{line.get('level') or 'warning':<9} {_kv(line, limit)}")
    if view.stopped and view.stopped not in uris:
        out.append(f"stopped   by stop: at {view.stopped}")
    if view.reply is not None:
        answer = _quoted(view.reply.get("answer") or "", limit)
        took = _ms(view.reply.get("ms"))
        out.append(f"reply     {answer}" + (f"  ({took})" if took else ""))
        if error:
            where = f"at {view.failed_at}: " if view.failed_at else ""
            out.append(f"error     {where}{_show(error, limit)}")
    elif not view.complete:
        out.append(f"{pad}(no reply logged: the run is unfinished, or ended in another log file)")
    return "\n".join(out)


def trace_text(log_file: str, trace_id: str, limit: int = 120, bound: Bound = Bound()) -> str:
    """One run, readable, for ``.tmy trace ID`` in chat; ConfigError for a malformed id or no log.

    Blocking (it reads the log): the daemon calls :func:`trace_reply`.
    """
    from tmy import logs

    logs.flush()
    return _trace_text(log_file, trace_id, limit, bound)


def _trace_text(log_file: str, trace_id: str, limit: int, bound: Bound) -> str:
    """:func:`trace_text` without the flush of this process's log (safe in a thread)."""
    check_trace_id(trace_id)
    found = search(log_path(Settings(), log_file), trace_id, bound)
    note = ""
    if found.cut:
        note = f"\n(search stopped at {found.cut}: older lines of the log were not read)"
    if not found.entries:
        return f"no log lines for trace {trace_id} in {log_file}" + note
    return render(build_view(trace_id, found.entries), limit) + note


async def trace_reply(log_file: str, trace_id: str, bound: Bound = Bound()) -> str:
    """``.tmy trace ID``: the id checked, then the log read in a thread, within ``bound``.

    Reading a large log on the event loop froze every chat for seconds; in a
    thread the daemon keeps serving while it is read.
    """
    from tmy import logs

    check_trace_id(trace_id)
    logs.flush()  # this daemon's own buffered lines (on the loop: the sink is not thread-safe)
    return await asyncio.to_thread(_trace_text, log_file, trace_id, 120, bound)


# -- following -------------------------------------------------------------------------


class _Run:
    """A run --follow is still collecting."""

    __slots__ = ("entries", "finished", "seen")

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.finished = False
        self.seen = 0.0


def follow(
    path: Path,
    emit: Callable[[TraceView], None],
    *,
    stop: Callable[[], bool] = lambda: False,
    max_runs: int | None = None,
    offset: int | None = None,
    poll: float = 0.2,
    quiet: float = QUIET_SECONDS,
    settle: float = SETTLE_SECONDS,
) -> int:
    """Tail ``path`` and ``emit`` each run once it finishes; returns how many were emitted.

    Starts at ``offset`` (default: the end of the file, like ``tail -f``) and
    survives rotation (a new file at ``path``) and truncation. A run is emitted
    ``settle`` seconds after its finishing line (a line or two may follow it),
    or after ``quiet`` seconds without any line of its own. Returns when
    ``stop()`` is true or ``max_runs`` runs were emitted; Ctrl-C raises
    KeyboardInterrupt out of the poll sleep.
    """
    pending: dict[str, _Run] = {}
    emitted = 0
    handle = None
    buffer = b""
    try:
        while not stop():
            if handle is None:
                try:
                    handle = path.open("rb")
                except FileNotFoundError:
                    time.sleep(poll)
                    continue
                size = os.fstat(handle.fileno()).st_size
                handle.seek(size if offset is None else min(offset, size))
                offset, buffer = None, b""
            chunk = handle.read(1 << 20)
            if chunk:
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                now = time.monotonic()
                for raw in lines:
                    entry = _parse(raw) if b"trace_id" in raw else None
                    tid = entry.get("trace_id") if entry else None
                    if isinstance(tid, str):
                        run = pending.setdefault(tid, _Run())
                        run.entries.append(entry)
                        run.seen = now
                        run.finished = run.finished or _finishes(run.entries)
            now = time.monotonic()
            for tid, run in list(pending.items()):
                if now - run.seen >= (settle if run.finished else quiet):
                    del pending[tid]
                    emit(build_view(tid, run.entries))
                    emitted += 1
                    if max_runs is not None and emitted >= max_runs:
                        return emitted
            if chunk:
                continue
            if _replaced(path, handle):
                handle.close()
                handle, offset = None, 0  # read the new file from its start
                continue
            time.sleep(poll)
    finally:
        if handle is not None:
            handle.close()
    return emitted


def _finishes(entries: list[dict[str, Any]]) -> bool:
    """Whether the newest entry ends the run (a cron run ends with cron.done)."""
    last = entries[-1]
    if entries[0].get("event") == CRON_START:
        return last.get("event") == CRON_END
    return last.get("event") in FINISHING and not last.get("nested")


def _replaced(path: Path, handle: Any) -> bool:
    """True when ``path`` is now another file (rotated) or shorter than what was read."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False  # mid-rotation: keep the old file until a new one appears
    mine = os.fstat(handle.fileno())
    return (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev) or now.st_size < handle.tell()


# -- the command -----------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``trace`` subcommand's arguments."""
    parser.description = HELP
    parser.add_argument("trace_id", nargs="?", metavar="TRACE_ID", help="a reply's trace id")
    parser.add_argument("--log", metavar="FILE", help="the JSON log (default: log.file)")
    parser.add_argument(
        "--follow", "-f", action="store_true", help="tail the log, printing each run as it ends"
    )
    parser.add_argument("--json", action="store_true", help="print the run(s) as JSON")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``tmy trace``: 0 shown, 1 no line has that trace id, 2 no usable log file."""
    from tmy import logs

    path = log_path(settings, args.log)
    logs.configure("warning")  # this process only reads the log: its own lines go to stderr
    if args.follow:
        if args.trace_id:
            raise ConfigError("--follow shows every run: give no TRACE_ID with it")

        def show(view: TraceView) -> None:
            if args.json:
                print(json.dumps(as_dict(view), ensure_ascii=False), flush=True)
            else:
                print(render(view) + "\n", flush=True)

        print(f"following {path} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        follow(path, show)
        return 0
    if not args.trace_id:
        raise ConfigError("give a TRACE_ID (a reply's trace id), or --follow")
    entries = read_trace(path, args.trace_id)
    if not entries:
        print(f"no log lines for trace {args.trace_id} in {path}", file=sys.stderr)
        return 1
    view = build_view(args.trace_id, entries)
    if args.json:
        print(json.dumps(as_dict(view), ensure_ascii=False, indent=2))
    else:
        print(render(view))
    return 0


def _register() -> None:
    from tmy.cli import COMMANDS

    COMMANDS["trace"] = (configure, run)


_register()
