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

from tmy import logs, metrics, redact
from tmy.engine.said import SAID_IDS, joined_ids, plain, said_escaped
from tmy.engine.tracing import log_run, step_fields
from tmy.logs import PREVIEW, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.model import Rule, Step
from tmy.rulebook.triggers import Match, Trigger

_perf_counter = time.perf_counter
_IDS_PARTS = SAID_IDS.parts  # one dict, cleared in place
_time = time.time
_STAMP = logs.STAMP  # (millisecond, timestamp): one list, kept current in place
_stamp_ms = logs.stamp_ms
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

    __slots__ = (
        "answer",
        "counts",
        "first_bound",
        "head",
        "head_source",
        "heads",
        "meter",
        "ok",
        "one",
        "rule",
        "step_heads",
        "steps",
        "tail",
    )

    def __init__(self, rule: Rule, steps: tuple[Step, ...], answer: str) -> None:
        self.rule = rule
        self.steps = steps
        self.answer = answer
        self.one = one = len(steps) == 1  # nearly always: :meth:`run` takes it whole
        # The line's parts every run repeats: its start, '{"rule":…,"trigger":…', for its
        # first trigger (a rule nearly always has one; others' in ``heads``, made as they
        # hit); per step, its fields as step_fields renders them up to '"ms":'; the answer.
        # A plan is made at its rule's first hit — at 100,000 rules nearly every message's:
        # the usual one (one step, its short text the answer, nothing orjson would escape:
        # one check of all its strings) is written in three f-strings
        step = steps[0]
        uri, rule_id, plugin = step.uri, rule.id, step.spec.name
        source = rule.triggers[0].source if rule.triggers else ""
        self.heads: dict[str, str] | None = None
        if (
            one
            and len(answer) <= PREVIEW
            and answer is step.constant.value
            and plain(f"{answer}{uri}{rule_id}{plugin}{source}")
        ):
            self.head_source: str | None = source
            self.head = f'{{"rule":"{rule_id}","trigger":"{source}"'
            self.step_heads = (
                f'{{"uri":"{uri}","plugin":"{plugin}","input":"{answer}",'
                f'"result":"{answer}","error":null,"ms":',
            )
            self.tail = f',"answer":"{answer}","error":null,"ms":'
        else:
            self.head_source, self.head = None, ""
            self.step_heads = tuple(_step_head(s) for s in steps)
            text = _json(answer if len(answer) <= PREVIEW else preview(answer))
            self.tail = f',"answer":{text},"error":null,"ms":'
        # its rule's ok-runs counter (metrics.run) and the first step's histogram child, for
        # run's inline counts: made at the first run (a rule only matched in a chat where
        # the bot is off never ran, and shows no series in /metrics)
        self.ok: Any = None
        self.meter: Any = None
        self.counts: list[float] = []
        self.first_bound = 0.0

    def run(
        self,
        trigger: Trigger,
        q: str,
        message: Message,
        text: str,
        trace_id: str,
        started: float,
        ids: str,
    ) -> Reply:
        """A one-step plan's whole run in one frame — the engine's way for a FAQ answer:
        :meth:`reply`, its metrics and :meth:`log`'s line (else :func:`log_run`'s), one
        clock reading for step and run, record and reply made field by field as their
        ``__init__`` would (``tests/engine/test_plans.py`` compares them). ``q``: QUESTION;
        ``ids``: :func:`~tmy.engine.said.joined_ids` (the engine's ASCII check's)."""
        step = self.steps[0]
        value = self.answer
        if self.ok is None:
            self._first_run()
        self.ok.value += 1.0  # metrics.run, without the lookup (the reply is its rule's)
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
        if seconds <= self.first_bound:  # the step histogram's observe(seconds), inline:
            self.counts[0] += 1.0  # a constant's step is in the first bucket
        else:
            self.counts[_bisect(self.meter.bounds, seconds)] += 1.0
        self.meter.sum += seconds
        reply = _new(Reply)
        reply.text = value
        reply.rule = self.rule.id
        reply.trace_id = trace_id
        reply.error = reply.reason = reply.outgoing = reply.approve = None
        reply.steps = [record]
        reply.stopped = False
        reply.approve_reason = ""
        if len(text) <= PREVIEW and len(q) <= PREVIEW:
            head = self.head if trigger.source is self.head_source else self._head(trigger.source)
            ms = _SUB_MS[micros] if micros < 1000 else f"{micros // 1000}{_FRAC[micros % 1000]}"
            try:  # SAID_IDS[ids], inline: the ids' part of the line (None: to escape)
                who = _IDS_PARTS[ids]
            except KeyError:
                who = SAID_IDS.fill(ids)
            sink = logs.SINK  # logs.emit_info_text, inline: the whole line in one f-string
            if sink is not None and not logs.BOUND:
                now = _floor(_time() * 1000)
                if now != _STAMP[0]:
                    _STAMP[1] = _stamp_ms(now)
                    _STAMP[0] = now
                # said.plain(text), inline (QUESTION, a part of the text, is plain too)
                if who is not None and text.isprintable() and '"' not in text and "\\" not in text:
                    line = (
                        f'{head},"text":"{text}","question":"{q}",{who}'
                        f'{self.tail}{ms},"steps":[{self.step_heads[0]}{ms}{_CLOSE}{trace_id}'
                        f'","level":"info","timestamp":"{_STAMP[1]}"}}\n'
                    ).encode()
                else:
                    line = self._escaped(head, text, q, message, ms, trace_id)
                if line is not None:
                    if redact.LINE_SECRETS:
                        line = redact.redact_line(line)
                    try:
                        sink.out(line)
                    except ValueError:  # a file opened anew since (logrotate), or closed
                        sink.write(line)
                    return reply
        match = Match(self.rule, trigger, trigger.magic, q)
        log_run(match, message, text, reply, seconds, True, False, None, trace=trace_id)
        return reply

    def _first_run(self) -> None:
        """The counters :meth:`run` counts in (see ``__init__``)."""
        self.ok = metrics.run_meters(self.rule.id)[0]
        self.meter = metrics.step_meter(self.steps[0].spec.name)
        self.counts = self.meter.counts
        self.first_bound = self.meter.bounds[0]

    def _escaped(
        self, head: str, text: str, q: str, message: Message, ms: str, trace_id: str
    ) -> bytes | None:
        """:meth:`run`'s line when what the message brings needs escaping: orjson's (None:
        it refuses a value — :func:`log_run` writes the line)."""
        said = said_escaped(text, q, message)
        if said is None:
            return None
        return (
            f'{head},{said}{self.tail}{ms},"steps":[{self.step_heads[0]}{ms}{_CLOSE}{trace_id}'
            f'","level":"info","timestamp":"{_STAMP[1]}"}}\n'
        ).encode()

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
        trigger: Trigger,
        q: str,
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
        if self.ok is None:
            self._first_run()
        self.ok.value += 1.0
        if logs.INFO_ENABLED or observer is not None:
            seconds = _perf_counter() - started
            match = Match(self.rule, trigger, trigger.magic, q)
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
            and plain(text)  # QUESTION, a part of the text, is too (as in run)
            and (who := SAID_IDS[joined_ids(user, chat, platform)]) is not None
        ):
            said = f'"text":"{text}","question":"{q}",{who}'
        else:
            said = said_escaped(text, q, message)
            if said is None:
                return False
        head = self.head if trigger.source is self.head_source else self._head(trigger.source)
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
        """The line's start for a run through trigger ``source``, kept per trigger (the
        first one to hit in slots: no dict for a plan's usual one trigger)."""
        heads = self.heads
        if heads is not None and source in heads:
            return heads[source]
        head = f'{{"rule":{_text_json(self.rule.id)},"trigger":{_text_json(source)}'
        if self.head_source is None:
            self.head_source, self.head = source, head
        else:
            if heads is None:
                heads = self.heads = {}
            heads[source] = head
        return head


def _step(head: str, record: StepRecord) -> str:
    """One step's part of the line: its head, then its ms as orjson writes the float."""
    m = int(record.ms * 1000 + 0.5)
    return f"{head}{m // 1000}{_FRAC[m % 1000]}{_STEP_END}"


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def _text_json(text: str) -> str:
    """``text`` as orjson writes it: as it is, quoted, when :func:`plain` (no call)."""
    return f'"{text}"' if plain(text) else orjson.dumps(text).decode()


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
