"""The run's steps and reply folded into the explanation (after a dry or a real run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tmy.explain.model import Explanation
from tmy.message import Reply, StepRecord
from tmy.values.compiled import Constant, Expression, Template

if TYPE_CHECKING:
    from tmy.rulebook.model import Step


def take_reply(ex: Explanation, rulebook: Any, reply: Reply) -> None:
    ex.trace_id = reply.trace_id
    ex.reply = {"text": reply.text, "error": reply.error}
    if reply.stopped:
        ex.reply["stopped"] = True
    if reply.outgoing:
        ex.reply["outgoing"] = reply.outgoing.as_dict()
    if reply.approve is not None:
        ex.reply["approve"] = reply.approve
        ex.reply["approve_reason"] = reply.approve_reason
    if not ex.dry_run:
        _take_decision(ex, rulebook, reply)
    rule = ex.rule
    by_uri = {s.uri: s for s in rule.steps} if rule is not None else {}
    requests: dict[str, list[dict[str, Any]]] = {}
    for req in ex.requests:
        requests.setdefault(req["uri"], []).append(req)
    draws: dict[str, list[dict[str, Any]]] = {}
    for draw in ex.draws:
        draws.setdefault(draw["uri"], []).append(draw)
    ran: set[str] = set()
    for record in reply.steps:
        ran.add(record.uri)
        step = _step(record, by_uri.get(record.uri), requests.pop(record.uri, None))
        drew = draws.pop(record.uri, None) if record.uri else None
        if drew:
            step["drew"] = [{"call": d["call"], "value": d["value"]} for d in drew]
        ex.steps.append(step)
    if rule is not None and reply.steps and not ex.blocked:
        last = reply.steps[-1]
        why = (
            f"the run stopped at {last.uri} (stop:)"
            if reply.stopped
            else f"the run ended at {last.uri}: {last.error}"
        )
        for step in rule.steps:
            if step.uri not in ran:
                ex.steps.append(
                    {
                        "uri": step.uri,
                        "plugin": step.plugin,
                        "ran": False,
                        "skipped": True,
                        "skip_reason": f"not reached: {why}",
                    }
                )


def _take_decision(ex: Explanation, rulebook: Any, reply: Reply) -> None:
    """After ``--run``: the real engine decided, so its word wins over the prediction."""
    if reply.rule is None:
        if ex.matched is not None and not ex.blocked:  # expected a run, there was none
            ex.notes.append(f"explain expected rule {ex.matched!r}, but the engine did not run it")
            ex.reason = reply.reason or reply.error or "the engine ran no rule"
            ex.matched, ex.rule = None, None
        elif ex.reason is None:
            ex.reason = reply.reason or reply.error or "no rule matched"
        ex.blocked = True  # (a rule blocked by the chat switch keeps its name in ``matched``)
        return
    if reply.rule != ex.matched:
        ex.notes.append(f"explain expected rule {ex.matched!r}; the engine ran {reply.rule!r}")
        ex.matched, ex.rule = reply.rule, rulebook.by_id.get(reply.rule)
    if reply.reason is not None:  # matched, but not run (a cooldown)
        ex.reason = ex.reason or reply.reason
        ex.blocked = True
    else:
        ex.reason, ex.blocked = None, False


def _step(record: StepRecord, step: Any, sent: list[dict[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uri": record.uri,
        "plugin": record.plugin,
        "ran": not record.skipped,
        "input": record.input,
        "result": record.result,
        "error": record.error or None,
        "ms": record.ms,
        "skipped": record.skipped,
    }
    if record.skipped:
        out["skip_reason"] = _skip_reason(step)
    if record.extra:
        out["extra"] = dict(record.extra)
    if record.extra.get("stopped"):
        out["stopped"] = True
    if sent:
        out["would_send"] = [{k: v for k, v in s.items() if k != "uri"} for s in sent]
    return out


def _skip_reason(step: Step | None) -> str:
    if step is None:
        return "skipped"
    if step.when is not None:
        return f"when: {_source(step.when)} was false"
    keys = [k for k in step.extras if k.startswith("when")]
    if keys:
        return f"{keys[0]}: the model judged no"
    return "skipped by an extension"


def _source(value: Any) -> str:
    if isinstance(value, Constant):
        return repr(value.value)
    if isinstance(value, Expression):
        return repr(f"?= {value.source}")
    if isinstance(value, Template):
        return repr(value.source)
    return repr(value)  # a list or map literal: no source text kept
