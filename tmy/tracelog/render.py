"""A trace as a person reads it: message, rule, each step, warnings, the reply."""

from __future__ import annotations

import json
from typing import Any

from tmy.tracelog.view import TraceView


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
