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
from typing import Any

import orjson

from tmy import logs, metrics
from tmy.engine.tracing import step_fields
from tmy.logs import PREVIEW, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.model import Rule, Step
from tmy.rulebook.triggers import Match

_perf_counter = time.perf_counter
_STEP_END = ',"skipped":false}'
# ".0", ".001" … ".999": the fraction of a float ms (a whole number of µs / 1000) as repr
# and orjson write it, so str(µs // 1000) + _FRAC[µs % 1000] is that float's JSON
_FRAC = tuple(repr(k / 1000)[1:] for k in range(1000))


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

    __slots__ = ("answer", "heads", "rule", "step_heads", "steps", "tail")

    def __init__(self, rule: Rule, steps: tuple[Step, ...], answer: str) -> None:
        self.rule = rule
        self.steps = steps
        self.answer = answer
        shown = answer if len(answer) <= PREVIEW else preview(answer)
        self.tail = ',"answer":' + _json(shown) + ',"error":null,"ms":'
        self.heads: dict[str, str] = {}  # per trigger: '{"rule":…,"trigger":…'
        # per step: its fields as step_fields renders them, up to '"ms":'
        self.step_heads = tuple(_step_head(step) for step in steps)

    def reply(self, trace_id: str, started: float | None = None) -> Reply:
        """Run the steps: the reply (and records) the general run would return.

        ``started``: the run's start on :func:`time.perf_counter`'s clock (the engine's
        reading, so the first step's time needs no second one); None: now.
        """
        clock = _perf_counter
        if started is None:
            started = clock()
        if len(self.steps) == 1:  # nearly always: the step's constant is the answer (a str)
            step = self.steps[0]
            value = self.answer
            record = StepRecord(step.uri, step.spec.name, value, value)
            seconds = clock() - started
            record.ms = int(seconds * 1e6 + 0.5) / 1000
            meter = step.meter  # the histogram child (tmy.metrics.instruments)
            if meter is None:
                meter = step.meter = metrics.step_meter(step.spec.name)
            meter.observe(seconds)
            return Reply(value, self.rule.id, trace_id, None, [record], False)
        records: list[StepRecord] = []
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
            meter = step.meter  # the histogram child (tmy.metrics.instruments)
            if meter is None:
                meter = step.meter = metrics.step_meter(step.spec.name)
            meter.observe(seconds)
        return Reply(value, self.rule.id, trace_id, None, records, False)

    def log(self, match: Match, message: Message, text: str, reply: Reply, seconds: float) -> bool:
        """Write this run's ``run.done`` line; False when :func:`log_run` must (nothing
        written): a run without a trigger or with another reply, a text the line cuts,
        values orjson refuses, or a logger that cannot take this way.

        The message's ids are text here (the engine refuses other ids before any rule
        runs), so when what the message brings needs no JSON escape (ASCII orjson writes
        as it is: one call for all five joined; escaping is per character) it is written
        as it is: the whole line is one f-string, encoded once. Else orjson escapes it.
        """
        trigger = match.trigger
        q = match.question
        records = reply.steps
        if (
            trigger is None
            or reply.text is not self.answer
            or len(text) > PREVIEW
            or type(q) is not str
            or len(q) > PREVIEW
            or len(records) != len(self.step_heads)
        ):
            return False
        user, chat, platform = message.user, message.chat, message.platform
        plain = f"{text}{q}{user}{chat}{platform}"
        if plain.isascii() and len(orjson.dumps(plain)) == len(plain) + 2:  # nothing escaped
            said = (
                f'"text":"{text}","question":"{q}","user":"{user}",'
                f'"chat":"{chat}","platform":"{platform}"'
            )
        else:
            try:  # what the message brings, escaped as the general line escapes it
                said = orjson.dumps(
                    {"text": text, "question": q, "user": user, "chat": chat, "platform": platform}
                )[1:-1].decode()
            except TypeError:
                return False
        head = self.heads.get(trigger.source)
        if head is None:
            head = self.heads[trigger.source] = orjson.dumps(
                {"rule": self.rule.id, "trigger": trigger.source}
            )[:-1].decode()
        if len(records) == 1:  # nearly always
            m = int(records[0].ms * 1000 + 0.5)  # the step's whole µs (its ms is µs / 1000)
            steps = f"{self.step_heads[0]}{m // 1000}{_FRAC[m % 1000]}{_STEP_END}"
        else:
            steps = ",".join([_step(h, r) for h, r in zip(self.step_heads, records, strict=True)])
        micros = int(seconds * 1e6 + 0.5)
        return logs.emit_info_text(
            f"{head},{said}{self.tail}{micros // 1000}{_FRAC[micros % 1000]},"
            f'"steps":[{steps}],"event":"run.done","trace_id":"',
            reply.trace_id,
        )


def _step(head: str, record: StepRecord) -> str:
    """One step's part of the line: its head, then its ms as orjson writes the float."""
    m = int(record.ms * 1000 + 0.5)
    return f"{head}{m // 1000}{_FRAC[m % 1000]}{_STEP_END}"


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def _step_head(step: Step) -> str:
    """A constant step's fields in run.done, rendered up to its ``"ms":`` (included)."""
    value = step.constant.value
    if type(value) is str and len(value) <= PREVIEW:  # the usual constant: one call
        text = _json(value)
        uri, plugin = _json(step.uri), _json(step.spec.name)
        return f'{{"uri":{uri},"plugin":{plugin},"input":{text},"result":{text},"error":null,"ms":'
    value = step.constant.evaluate(None)
    fields = step_fields(StepRecord(step.uri, step.spec.name, value, value))
    del fields["ms"], fields["skipped"]
    return _json(fields)[:-1] + ',"ms":'
