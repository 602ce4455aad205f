"""Folding one trace's log lines, of either shape the engine writes, into a :class:`TraceView`.

The engine writes one line per event (``message.received``, ``rule.matched``,
``step.start``/``step.done``/``step.skipped``, ``run.failed``, ``run.stopped``,
``reply.sent``, ``message.unmatched``) or a single ``run.done`` line carrying a
``steps`` list; both (and a mix) fold into the same view, so old logs stay readable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

# a cron run has no reply.sent: it ends with cron.done
CRON_START, CRON_END = "cron.fired", "cron.done"
WARNING_LEVELS = {"warning", "error", "critical", "exception"}
_META = ("event", "trace_id", "timestamp", "level", "logger")


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
