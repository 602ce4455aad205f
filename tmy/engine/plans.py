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

import math
import time
from bisect import bisect_left as _bisect
from collections.abc import Callable
from typing import Any

import orjson

from tmy import logs, metrics
from tmy.engine.tracing import log_run, step_fields
from tmy.logs import PREVIEW, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.model import Rule, Step
from tmy.rulebook.triggers import Match

_perf_counter = time.perf_counter
_floor = math.floor  # a non-negative float's int, without int()'s class call
_STEP_END = ',"skipped":false}'
# ".0", ".001" … ".999": the fraction of a float ms (a whole number of µs / 1000) as repr
# and orjson write it, so str(µs // 1000) + _FRAC[µs % 1000] is that float's JSON
_FRAC = tuple(repr(k / 1000)[1:] for k in range(1000))
# "0.0" … "0.999": a step or run under a millisecond (a constant's always is), formatted
# once here — an int's str() and a join per line cost ~1,000 instructions
_SUB_MS = tuple("0" + frac for frac in _FRAC)
_new = object.__new__  # a Reply / StepRecord with every field set here: no __init__ frame
_CLOSE = _STEP_END + '],"event":"run.done","trace_id":"'


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

    __slots__ = ("answer", "heads", "one", "open", "rule", "step_heads", "steps", "tail")

    def __init__(self, rule: Rule, steps: tuple[Step, ...], answer: str) -> None:
        self.rule = rule
        self.steps = steps
        self.answer = answer
        shown = answer if len(answer) <= PREVIEW else preview(answer)
        self.tail = ',"answer":' + _json(shown) + ',"error":null,"ms":'
        self.heads: dict[str, str] = {}  # per trigger: '{"rule":…,"trigger":…'
        # per step: its fields as step_fields renders them, up to '"ms":'
        self.step_heads = tuple(_step_head(step) for step in steps)
        self.one = len(steps) == 1  # nearly always: :meth:`run` takes it whole
        self.open = ',"steps":[' + self.step_heads[0]

    def run(
        self,
        match: Match,
        message: Message,
        text: str,
        trace_id: str,
        started: float,
        ids: str,
    ) -> Reply:
        """A one-step plan's whole run: :meth:`reply`, its step metric and :meth:`log`'s
        line (else :func:`log_run`'s) in one frame — the engine's way for a FAQ answer.

        One clock reading times the step and the run: nothing runs between them. The
        record and reply are made field by field, as their dataclasses' ``__init__``
        would make them (``tests/engine/test_plans.py`` compares them whole).
        ``ids``: the user, chat and platform ids joined (the engine joined them for its
        ASCII check): when they and the text are :func:`_plain`, what the message brings
        is written as it is, the whole line one f-string.
        """
        step = self.steps[0]
        value = self.answer
        seconds = _perf_counter() - started
        micros = _floor(seconds * 1e6 + 0.5)
        record = _new(StepRecord)
        record.uri = step.uri
        record.plugin = step.spec.name
        record.input = record.result = value
        record.error = ""
        record.ms = micros / 1000
        record.skipped = False
        record.extra = {}
        meter = step.meter  # the histogram child (tmy.metrics.instruments)
        if meter is None:
            meter = step.meter = metrics.step_meter(step.spec.name)
        bounds = meter.bounds  # its observe(seconds), inline; a constant is in the first bucket
        meter.counts[0 if seconds <= bounds[0] else _bisect(bounds, seconds)] += 1
        meter.sum += seconds
        reply = _new(Reply)
        reply.text = value
        reply.rule = self.rule.id
        reply.trace_id = trace_id
        reply.error = reply.reason = reply.outgoing = reply.approve = None
        reply.steps = [record]
        reply.stopped = False
        reply.approve_reason = ""
        trigger = match.trigger
        q = match.question
        if trigger is not None and len(text) <= PREVIEW and type(q) is str and len(q) <= PREVIEW:
            try:
                head = self.heads[trigger.source]
            except KeyError:
                head = self._head(trigger.source)
            ms = _SUB_MS[micros] if micros < 1000 else f"{micros // 1000}{_FRAC[micros % 1000]}"
            if _plain(text) and _plain_ids(ids):  # QUESTION, a part of the text, is too
                line = (
                    f'{head},"text":"{text}","question":"{q}","user":"{message.user}",'
                    f'"chat":"{message.chat}","platform":"{message.platform}"'
                    f"{self.tail}{ms}{self.open}{ms}{_CLOSE}"
                )
            else:
                said = _said(text, q, message)
                line = said and f"{head},{said}{self.tail}{ms}{self.open}{ms}{_CLOSE}"
            if line and logs.emit_info_text(line, trace_id):
                return reply
        log_run(match, message, text, reply, seconds, True, False, None, trace=trace_id)
        return reply

    def reply(self, trace_id: str, started: float | None = None) -> Reply:
        """Run the steps: the reply (and records) the general run would return.

        ``started``: the run's start on :func:`time.perf_counter`'s clock (the engine's
        reading, so the first step's time needs no second one); None: now.
        """
        clock = _perf_counter
        if started is None:
            started = clock()
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

    def run_watched(
        self,
        match: Match,
        message: Message,
        text: str,
        trace_id: str,
        started: float,
        observer: Callable[[dict[str, Any]], None] | None,
    ) -> Reply:
        """A run of several steps, or one an observer watches (it gets the general line's
        dict, under the message's trace id), and its line: :meth:`reply` then :meth:`log`,
        or :func:`log_run`."""
        reply = self.reply(trace_id, started)
        if logs.INFO_ENABLED or observer is not None:
            seconds = _perf_counter() - started
            if observer or not self.log(match, message, text, reply, seconds):
                token = logs.TRACE.set(trace_id)
                try:
                    log_run(match, message, text, reply, seconds, True, False, observer)
                finally:
                    logs.TRACE.reset(token)
        return reply

    def log(self, match: Match, message: Message, text: str, reply: Reply, seconds: float) -> bool:
        """Write this run's ``run.done`` line; False when :func:`log_run` must (nothing
        written): a run without a trigger or with another reply, a text the line cuts,
        values orjson refuses, or a logger that cannot take this way.

        The message's ids are text here (the engine refuses other ids before any rule
        runs), so when what the message brings needs no JSON escape (ASCII orjson writes
        as it is: one orjson call on the rendered fields tells) it is written as it is:
        the whole line is one f-string, encoded once. Else orjson escapes it.
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
        if (
            type(user) is str
            and type(chat) is str
            and type(platform) is str
            and _plain(text)  # QUESTION, a part of the text, is too (as in run)
            and _plain_ids(f"{user}{chat}{platform}")
        ):
            said = (
                f'"text":"{text}","question":"{q}","user":"{user}",'
                f'"chat":"{chat}","platform":"{platform}"'
            )
        else:
            said = _said(text, q, message)
            if said is None:
                return False
        head = self.heads.get(trigger.source)
        if head is None:
            head = self._head(trigger.source)
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

    def _head(self, source: str) -> str:
        """The line's start for a run through trigger ``source``, kept per trigger."""
        head = self.heads[source] = orjson.dumps({"rule": self.rule.id, "trigger": source})[
            :-1
        ].decode()
        return head


def _plain(text: str) -> bool:
    """Does orjson write ``text`` as it is (nothing to escape)? It escapes only quotes,
    backslashes and control characters, none of them printable but the first two (what
    else is not printable — DEL, a line separator, a lone surrogate — takes the escaping
    way, as it may); a printable character beyond ASCII it writes as its UTF-8."""
    return text.isprintable() and '"' not in text and "\\" not in text


_PLAIN_IDS: dict[str, bool] = {}  # joined ids -> _plain: a chat's ids come again and again
_PLAIN_IDS_KEPT = 10_000  # ~100 B each: bounded however many users write


def _plain_ids(ids: str) -> bool:
    """:func:`_plain` of a message's joined ids, kept: it looks at every character (~30
    instructions each), a dict finds the answer for the next message of the same chat in
    a tenth of that."""
    try:
        return _PLAIN_IDS[ids]
    except KeyError:
        if len(_PLAIN_IDS) >= _PLAIN_IDS_KEPT:
            _PLAIN_IDS.clear()
        plain = _PLAIN_IDS[ids] = _plain(ids)
        return plain


def _said(text: str, q: str, message: Message) -> str | None:
    """What the message brings, escaped as the general line escapes it (None: orjson
    refuses a value, the general line's way writes it)."""
    try:
        fields = {
            "text": text,
            "question": q,
            "user": message.user,
            "chat": message.chat,
            "platform": message.platform,
        }
        return orjson.dumps(fields)[1:-1].decode()
    except TypeError:
        return None


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
