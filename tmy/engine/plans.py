"""Runs that only hand out constants (FAQ rules), and their ``run.done`` line, precomputed.

A rule whose every step is an ADJUST of a constant (``plugin: ADJUST, input: "…"``;
the rulebook marks such a step's ``constant``) reads no variable and writes none,
so its run needs no locals, no :class:`~tmy.engine.variables.Variables`, no
coroutine: :func:`constant_plan` recognises such a rule once (the engine keeps the
verdict per rule) and :func:`constant_reply` runs it — the same records (uri,
executor, input, result, ms), the same step-duration metric, the same reply as
the general run (:meth:`tmy.engine.running.Running._run`).

Most of its ``run.done`` line is the same every time too (the rule, the trigger,
each step but its ``ms``): :meth:`ConstantPlan.log` renders only what the message
brings (text, question, who and where, the times) and splices it between the
parts rendered once, byte for byte the line :func:`tmy.engine.tracing.log_run`
writes (``tests/engine/test_plans.py`` holds the two side by side).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from operator import attrgetter
from typing import Any

import orjson

from tmy import logs, metrics
from tmy.engine.tracing import step_fields
from tmy.logs import PREVIEW, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.model import Rule, Step
from tmy.rulebook.triggers import Match

_perf_counter = time.perf_counter
_ms_of = attrgetter("ms")
_STEP_END = b',"skipped":false}'
_RUN_END = b'],"event":"run.done","trace_id":"'


def constant_plan(rule: Rule, max_reply_chars: int) -> ConstantPlan | None:
    """The plan of ``rule`` when running it is only handing out its steps' constants.

    Every step an ADJUST of a constant (no INPUT, ``save``, options or ``stop``: the
    rulebook sets ``step.constant`` only then) without ``when``, locks, leaderboards
    or extension keys; the last one a text short enough to be the reply; the rule
    without a session, an atomic span or variables to prefetch. Else None.
    """
    steps = rule.steps
    if not steps or rule.atomic_vars or rule.prefetch or rule.session > 0:
        return None
    for step in steps:
        if (
            step.constant is None
            or step.when is not None
            or step.lock_roots
            or step.boards
            or step.hooks
            or step.stop is not None
        ):
            return None
    last = steps[-1].constant.value
    if type(last) is not str or len(last) > max_reply_chars:
        return None
    return ConstantPlan(rule, steps, last)


class ConstantPlan:
    """A constant rule's steps, and the parts of its ``run.done`` line every run repeats."""

    __slots__ = ("answer", "heads", "rule", "shown", "step_heads", "steps")

    def __init__(self, rule: Rule, steps: tuple[Step, ...], answer: str) -> None:
        self.rule = rule
        self.steps = steps
        self.answer = answer
        self.shown = answer if len(answer) <= PREVIEW else preview(answer)
        self.heads: dict[str, bytes] = {}  # per trigger: '{"rule":…,"trigger":…,'
        # per step: its fields as step_fields renders them, up to '"ms":'
        self.step_heads = tuple(_step_head(step) for step in steps)

    def reply(self, trace_id: str) -> Reply:
        """Run the steps: the reply (and records) the general run would return."""
        records: list[StepRecord] = []
        clock = _perf_counter
        started = clock()
        value: Any = None
        for step in self.steps:
            constant = step.constant
            value = constant.value
            if type(value) is not str:  # a list or map is copied for each run
                value = constant.evaluate(None)
            record = StepRecord(step.uri, step.spec.name, value, value)
            records.append(record)
            now = clock()
            seconds = now - started
            started = now
            record.ms = int(seconds * 1e6 + 0.5) / 1000
            meter = step.meter  # the histogram child (tmy.metrics.instruments), inline
            if meter is None:
                meter = step.meter = metrics.step_meter(step.spec.name)
            meter.counts[bisect_left(meter.bounds, seconds)] += 1
            meter.sum += seconds
        return Reply(value, self.rule.id, trace_id, None, records, False)

    def log(self, match: Match, message: Message, text: str, reply: Reply, seconds: float) -> bool:
        """Write this run's ``run.done`` line; False when :func:`log_run` must (nothing
        written): a run without a trigger, a reply not this plan's, values orjson refuses."""
        trigger = match.trigger
        if trigger is None or reply.text is not self.answer or reply.error is not None:
            return False
        head = self.heads.get(trigger.source)
        if head is None:
            head = self.heads[trigger.source] = (
                orjson.dumps({"rule": self.rule.id, "trigger": trigger.source})[:-1] + b","
            )
        q = match.question
        try:
            body = orjson.dumps(
                {
                    "text": text if len(text) <= PREVIEW else preview(text),
                    "question": q if type(q) is str and len(q) <= PREVIEW else preview(q),
                    "user": message.user,
                    "chat": message.chat,
                    "platform": message.platform,
                    "answer": self.shown,
                    "error": None,
                }
            )
            times = orjson.dumps([int(seconds * 1e6 + 0.5) / 1000, *map(_ms_of, reply.steps)])
        except TypeError:
            return False
        ms = times[1:-1].split(b",")
        if len(ms) != len(self.step_heads) + 1:
            return False
        heads = self.step_heads
        if len(heads) == 1:  # one step, nearly always
            steps = heads[0] + ms[1] + _STEP_END
        else:
            steps = b",".join([h + m + _STEP_END for h, m in zip(heads, ms[1:], strict=True)])
        line = b"".join((head, body[1:-1], b',"ms":', ms[0], b',"steps":[', steps, _RUN_END))
        return logs.emit_info_head(line, logs.TRACE.get() or "")


def _step_head(step: Step) -> bytes:
    """A constant step's fields in run.done, rendered up to its ``"ms":`` (included)."""
    value = step.constant.evaluate(None)
    record = StepRecord(step.uri, step.spec.name, value, value)
    fields = step_fields(record)
    del fields["ms"], fields["skipped"]
    return orjson.dumps(fields, option=orjson.OPT_NON_STR_KEYS, default=str)[:-1] + b',"ms":'
