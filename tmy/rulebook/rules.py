"""Compiling one rule: its keys, triggers, filters, extension keys, chain and cooldown.

The rule keys extensions installed in the registry (``schedule:``, ``tool:``)
are validated here like the built-in ones, with file and line, and may add
run locals (``FIRE_TIME``) that the rule's steps can read. The atomic
analysis of the compiled chain (:mod:`tmy.rulebook.atomic`) is done here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tmy.errors import ConfigError, EvalError, RuleError
from tmy.executors.registry import Registry
from tmy.hints import did_you_mean
from tmy.message import EVENT_KINDS
from tmy.rulebook import atomic
from tmy.rulebook.fields import boards_of, unknown_key
from tmy.rulebook.model import (
    NOTHING,
    OPEN_FILTERS,
    RUN_LOCALS,
    SCOPES,
    Cooldown,
    Filters,
    Rule,
    Step,
)
from tmy.rulebook.steps import ID_RE, STEP_KEYS, StepCompiler
from tmy.rulebook.triggers import Trigger, parse_trigger
from tmy.values.compiled import Value, compile_value
from tmy.yamlfile.source import LineDict, LineList

RULE_KEYS = (
    "id",
    "triggers",
    "steps",
    "priority",
    "case_sensitive",
    "on_error",
    "platforms",
    "chats",
    "private",
    "admin_only",
    "mention",
    "session",
    "events",
    "description",
    "intent",
    "enabled",
    "atomic",
    "cooldown",
)
COOLDOWN_KEYS = ("seconds", "per", "reply")
SESSION_KEYS = ("seconds", "debounce")
_RULE_KEY_SET = frozenset(RULE_KEYS)
_FILTER_KEY_SET = frozenset(("platforms", "chats", "private", "admin_only", "mention"))
_KEY_ERRORS = (RuleError, EvalError, ValueError, TypeError)
PLAIN_RULE_KEYS = frozenset(("id", "triggers", "steps"))  # a rule plain_rule may build
_PLAIN_STEP_KEYS = frozenset(("plugin", "input"))  # a step plain_step may build


def check_key_claims(registry: Registry) -> None:
    """An extension may add rule and step keys, not take over tmy's own (``when``, ``id``)."""
    for kind, claimed, own in (
        ("rule key", registry.rule_keys, _RULE_KEY_SET),
        ("step key", registry.step_keys, frozenset(STEP_KEYS)),
    ):
        taken = sorted(set(claimed) & own)
        if taken:
            raise ConfigError(f"an extension claims the {kind} {taken[0]!r}, which is tmy's own")


class RuleCompiler(StepCompiler):
    """Compiles rules (see the module docstring); the loader builds on it."""

    _known: frozenset[str] | None = None  # declared variables + run locals
    _declared: set[str] | None = None
    _known_for = -1  # how many variables were declared when _known was made

    def plain_rule(self, raw: LineDict, file: str) -> Rule | None:
        """A rule of only ``id``, ``triggers`` (strings) and ``steps`` that are each a plain
        step (:meth:`plain_step`): most rules of a big generated rulebook. Built without the
        general checks, none of which can fail or change it (no declared variable can be
        read, saved or locked, so no atomic span and no prefetch): the Rule the general
        path builds. None: not such a rule, take the general path."""
        rid, raw_triggers, raw_steps = raw.get("id"), raw.get("triggers"), raw.get("steps")
        if type(rid) is not str or not ID_RE.fullmatch(rid):
            return None
        if type(raw_triggers) is not LineList or type(raw_steps) is not LineList or not raw_steps:
            return None
        triggers = []
        tlines = raw_triggers.item_lines
        for i, src in enumerate(raw_triggers):
            if type(src) is not str or i >= len(tlines):
                return None
            try:
                trigger = parse_trigger(src, case_sensitive=False)
            except RuleError:
                return None
            trigger.line = tlines[i]
            triggers.append(trigger)
        steps = []
        for i, raw_step in enumerate(raw_steps):
            if type(raw_step) is not LineDict or not raw_step.keys() <= _PLAIN_STEP_KEYS:
                return None
            step = self.plain_step(raw_step, i, rid, file)
            if step is None:
                return None
            steps.append(step)
        # id, triggers, steps, priority, case_sensitive, on_error, filters, session,
        # description, intent, extras, file, line (the rest: their defaults)
        return Rule(rid, tuple(triggers), tuple(steps), 0, False, None, OPEN_FILTERS, 0.0,
                    "", "", NOTHING, file, raw.line)  # fmt: skip

    def compile_rule(self, raw: LineDict, file: str) -> Rule | None:
        """The rule ``raw`` of ``file``; None (and errors recorded) when it is wrong."""
        if raw.keys() == PLAIN_RULE_KEYS:
            rule = self.plain_rule(raw, file)
            if rule is not None:
                return rule
        before = len(self.errors)
        rule_keys = self.registry.rule_keys
        for key in raw:
            if key not in _RULE_KEY_SET and key not in rule_keys:
                self.error(
                    unknown_key("rule key", key, (*RULE_KEYS, *rule_keys)), file, raw.line_of(key)
                )
        rid = raw.get("id")
        if not isinstance(rid, str) or not ID_RE.fullmatch(rid):
            self.error(
                f"rule needs an 'id:' of letters, digits, '_', '.', '-' (got {rid!r})",
                file,
                raw.line_of("id"),
            )
            rid = f"<rule at line {raw.line}>"
        case_sensitive = (
            self.typed(raw, "case_sensitive", bool, False, file) if "case_sensitive" in raw
            else False
        )  # fmt: skip
        triggers = self.rule_triggers(raw, file, case_sensitive)
        priority = self.typed(raw, "priority", int, 0, file) if "priority" in raw else 0
        session, debounce = self.session(raw, file) if "session" in raw else (0.0, 0.0)
        events = self.rule_events(raw, file) if "events" in raw else ()
        filters = OPEN_FILTERS if _FILTER_KEY_SET.isdisjoint(raw) else self.rule_filters(raw, file)
        if self._known_for != len(self.variables):  # shared by every rule; only declarations
            self._known_for = len(self.variables)  # add to it (a changed one is an error)
            # INPUT is readable only in a step that sets it, and in on_error (below)
            self._known = (frozenset(self.variables) | RUN_LOCALS) - {"INPUT"}
            self._declared = set(self.variables)
        known = set(self._known)
        for t in triggers:
            if t.groups:
                known.update(t.groups)
        extras: Mapping[str, Any] = NOTHING
        if not self.registry.rule_keys.keys().isdisjoint(raw):
            extras = self.rule_extras(raw, file, rid, known)
        steps, dynamic_save = self.rule_steps(raw, file, rid, known)
        on_error = None
        if "on_error" in raw:
            on_error = self.value(raw, "on_error", file, known | {"INPUT"}, dynamic_save, rid)
        cooldown = self.cooldown(raw, file, rid) if "cooldown" in raw else None
        atomic_on = self.typed(raw, "atomic", bool, True, file) if "atomic" in raw else True
        if len(self.errors) > before:
            return None
        declared = self._declared
        assert declared is not None
        atomic_vars, span = atomic.atomic_span(steps, declared) if atomic_on else ((), (0, -1))
        return Rule(
            prefetch=atomic.prefetch(steps, atomic_vars, declared),
            cooldown=cooldown,
            atomic_vars=atomic_vars,
            atomic_span=span,
            id=rid,
            triggers=tuple(triggers),
            steps=tuple(steps),
            priority=priority,
            case_sensitive=case_sensitive,
            on_error=on_error,
            filters=filters,
            session=float(session),
            debounce=debounce,
            events=events,
            description=str(raw.get("description", "")),
            intent=str(raw.get("intent", "")),
            extras=extras or NOTHING,
            file=file,
            line=raw.line,
        )

    def rule_triggers(self, raw: LineDict, file: str, case_sensitive: bool) -> list[Trigger]:
        """``triggers:`` (one string or a list), each parsed and given its line."""
        triggers = []
        raw_triggers = raw.get("triggers", [])
        if isinstance(raw_triggers, str):
            raw_triggers = [raw_triggers]
        if not isinstance(raw_triggers, list):
            self.error(
                "'triggers:' must be a list of trigger strings", file, raw.line_of("triggers")
            )
            raw_triggers = []
        for i, src in enumerate(raw_triggers):
            tline = raw_triggers.line_of(i) if isinstance(raw_triggers, LineList) else raw.line
            try:
                trigger = parse_trigger(src, case_sensitive=case_sensitive)
            except RuleError as exc:
                self.error(exc.message, file, tline)
            else:
                trigger.line = tline
                triggers.append(trigger)
        return triggers

    def rule_events(self, raw: LineDict, file: str) -> tuple[str, ...]:
        """``events:`` — the platform events the rule answers (one kind or a list), each one
        of :data:`tmy.message.EVENT_KINDS`; a misspelt kind says which it resembles."""
        given = raw["events"]
        if isinstance(given, str):
            given = [given]
        line = raw.line_of("events")
        if not isinstance(given, list) or not given:
            self.error(
                f"'events:' must be a list of event kinds: {', '.join(EVENT_KINDS)}", file, line
            )
            return ()
        kinds: list[str] = []
        for i, kind in enumerate(given):
            at = given.line_of(i) if isinstance(given, LineList) else line
            if kind not in EVENT_KINDS:
                self.error(
                    f"unknown event {kind!r}{did_you_mean(kind, EVENT_KINDS)}; "
                    f"the events are {', '.join(EVENT_KINDS)}",
                    file,
                    at,
                )
            elif kind not in kinds:
                kinds.append(kind)
        return tuple(kinds)

    def session(self, raw: LineDict, file: str) -> tuple[float, float]:
        """``session:`` — seconds (a number), or ``{seconds: 60, debounce: 5}``: follow-ups
        inside the session are then answered once per burst, ``debounce`` seconds after
        the last one (seed 003). Returns (seconds, debounce)."""
        spec = raw["session"]
        line = raw.line_of("session")
        shape = "'session:' is a number of seconds >= 0, or {seconds: 60, debounce: 5}"
        if _number(spec):
            if spec < 0:
                self.error(shape, file, line)
                return 0.0, 0.0
            return float(spec), 0.0
        if not isinstance(spec, dict):
            self.error(f"{shape} (got {spec!r})", file, line)
            return 0.0, 0.0
        for key in spec:
            if key not in SESSION_KEYS:
                self.error("session: " + unknown_key("key", key, SESSION_KEYS), file, line)
        seconds, debounce = spec.get("seconds"), spec.get("debounce", 0)
        if not _number(seconds) or seconds <= 0:
            self.error(f"session: 'seconds' must be a number > 0 (got {seconds!r})", file, line)
            return 0.0, 0.0
        if not _number(debounce) or debounce < 0:
            self.error(
                f"session: 'debounce' must be a number of seconds >= 0 (got {debounce!r})",
                file,
                line,
            )
            return float(seconds), 0.0
        if debounce >= seconds:
            self.error(
                f"session: 'debounce' ({debounce:g} s) must be shorter than the session "
                f"({seconds:g} s), or the session ends while a burst waits",
                file,
                line,
            )
            return float(seconds), 0.0
        return float(seconds), float(debounce)

    def rule_filters(self, raw: LineDict, file: str) -> Filters:
        """Where the rule applies; the shared OPEN_FILTERS when it says nothing."""
        if _FILTER_KEY_SET.isdisjoint(raw):
            return OPEN_FILTERS
        return Filters(
            platforms=self.str_set(raw, "platforms", file),
            chats=self.str_set(raw, "chats", file),
            private=self.typed(raw, "private", bool, None, file),
            admin_only=self.typed(raw, "admin_only", bool, False, file),
            mention=self.typed(raw, "mention", bool, False, file),
        )

    def rule_extras(self, raw: LineDict, file: str, rid: str, known: set[str]) -> dict[str, Any]:
        """The installed rule keys the rule carries, validated; their run locals join ``known``."""
        extras: dict[str, Any] = {}
        for key, rule_key in self.registry.rule_keys.items():  # in the order installed
            if key not in raw:
                continue
            try:
                extras[key] = value = rule_key.validate(raw[key])
            except _KEY_ERRORS as exc:
                self.error(f"rule {rid!r}: {key}: {exc}", file, raw.line_of(key))
                continue
            if rule_key.locals is not None:
                known.update(rule_key.locals(value))
        return extras

    def rule_steps(
        self, raw: LineDict, file: str, rid: str, known: set[str]
    ) -> tuple[list[Step], bool]:
        """The chain, compiled in order; each save adds its variable to ``known`` for the
        steps after it. Also whether some step saves to a computed position."""
        raw_steps = raw.get("steps")
        if not isinstance(raw_steps, LineList) or not raw_steps:
            self.error(
                f"rule {rid!r} needs 'steps:', a non-empty list of executor steps",
                file,
                raw.line_of("steps"),
            )
            return [], False
        steps: list[Step] = []
        step_ids: set[str] = set()
        dynamic_save = False
        for i, raw_step in enumerate(raw_steps):
            sline = raw_steps.line_of(i)
            if not isinstance(raw_step, LineDict):
                self.error("a step must be a mapping with 'plugin:'", file, sline)
                continue
            # a plain step (plugin + a constant input) is built directly, else checked whole
            step = (
                self.plain_step(raw_step, i, rid, file)
                if raw_step.keys() <= _PLAIN_STEP_KEYS
                else None
            )
            if step is None:
                step = self.compile_step(raw_step, i, rid, file, known, dynamic_save)
            if step is None:
                continue
            if step.id is not None:
                if step.id in step_ids:
                    self.error(f"duplicate step id {step.id!r} in rule {rid!r}", file, sline)
                step_ids.add(step.id)
            if step.save is not None:
                if step.save.root is None:
                    dynamic_save = True
                else:
                    known.add(step.save.root)
            steps.append(step)
        return steps, dynamic_save

    def cooldown(self, raw: LineDict, file: str, rid: str) -> Cooldown | None:
        """``cooldown:`` — a number of seconds, or {seconds, per, reply}."""
        spec = raw["cooldown"]
        line = raw.line_of("cooldown")
        where = f"rule {rid!r}: cooldown"
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            spec = {"seconds": spec}
        if not isinstance(spec, dict):
            self.error(f"{where} must be {{seconds: N, per: user|chat|global, reply: …}}",
                       file, line)  # fmt: skip
            return None
        for key in spec:
            if key not in COOLDOWN_KEYS:
                self.error(f"{where}: " + unknown_key("key", key, COOLDOWN_KEYS), file, line)
        seconds = spec.get("seconds")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
            self.error(f"{where}: 'seconds' must be a number > 0 (got {seconds!r})", file, line)
            return None
        per = spec.get("per", "user")
        if per not in SCOPES:
            self.error(f"{where}: 'per' must be user, chat or global (got {per!r})", file, line)
            return None
        reply: Value | None = None
        if spec.get("reply") not in (None, ""):
            if not isinstance(spec["reply"], str):
                self.error(f"{where}: 'reply' must be text", file, line)
                return None
            try:
                reply = compile_value(spec["reply"])
            except EvalError as exc:
                self.error(f"{where}: 'reply': {exc}", file, line)
                return None
            self.check_boards(boards_of(reply), line, "reply", file, where)
            allowed = RUN_LOCALS | {"COOLDOWN_LEFT"} | set(self.variables)
            for name in sorted(reply.names - allowed):
                self.error(
                    f"{where}: 'reply' reads {name!r}; it may use run locals such as "
                    "{USER_NAME} and {COOLDOWN_LEFT} (seconds left) and declared variables",
                    file,
                    line,
                )
        return Cooldown(float(seconds), per, reply)


def _number(value: Any) -> bool:
    """An int or float, not a bool (YAML's ``true`` is no number of seconds)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
