"""Load and validate a rules directory into a :class:`Rulebook`.

Every problem is collected (not just the first) and reported as
``file:line: what is wrong — what to do``. A rulebook either loads whole or
not at all, so a broken file never half-replaces the running rules.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tmy.errors import EvalError, RuleError, RuleErrors, StoreError
from tmy.executors.adjust import adjust
from tmy.executors.registry import Registry
from tmy.hints import did_you_mean
from tmy.rulebook.index import TriggerIndex
from tmy.rulebook.model import (
    OPEN_FILTERS,
    RUN_LOCALS,
    SCOPES,
    Cooldown,
    Filters,
    Rule,
    Rulebook,
    RuleTest,
    Step,
    VariableDecl,
)
from tmy.rulebook.triggers import parse_trigger
from tmy.store.codec import encode
from tmy.values.compiled import (
    LIST_MODES,
    Constant,
    Expression,
    PathValue,
    Value,
    compile_path,
    compile_value,
)
from tmy.yamlfile.source import LineDict, LineList, read_yaml

FILE_KEYS = ("variables", "rules", "tests")
VARIABLE_KEYS = ("scope", "default", "description")
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
    "description",
    "intent",
    "enabled",
    "atomic",
    "cooldown",
)
STEP_KEYS = (
    "id", "plugin", "input", "INPUT", "save", "when", "stop", "on_error", "timeout", "description",
)  # fmt: skip
COOLDOWN_KEYS = ("seconds", "per", "reply")
_RULE_KEY_SET = frozenset(RULE_KEYS)
_FILTER_KEYS = ("platforms", "chats", "private", "admin_only", "mention")
_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_NAME_RE = re.compile(r"[^\W\d]\w*")

# Engine extensions (the LLM scenes, tools) add keys here: name -> validator(raw, where) -> value.
RULE_EXTENSIONS: dict[str, Any] = {}
STEP_EXTENSIONS: dict[str, Any] = {}
# ...and may say which locals a validated rule key gives every run of that rule
# (a tool rule's arguments): name -> fn(validated value) -> iterable of names.
RULE_LOCALS: dict[str, Any] = {}


def _schedule_key() -> None:
    """``schedule:`` (tmy/cron.py) is validated like any extension key, with file:line."""
    from tmy.cron import validate_schedule

    RULE_EXTENSIONS["schedule"] = validate_schedule
    RULE_LOCALS["schedule"] = lambda _schedule: ("FIRE_TIME",)


_schedule_key()


def rule_files(root: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` under ``root`` (or ``root`` itself), in a stable order."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise RuleError(f"rules directory {str(root)!r} does not exist")
    files = [p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_rulebook(
    root: Path | str, registry: Registry, *, store_url: str | None = None
) -> Rulebook:
    """Load every rules file under ``root``; RuleErrors listing every problem found.

    With ``store_url``, rules the store cannot run are refused too (see
    :func:`check_store`).
    """
    root = Path(root)
    files = rule_files(root)
    return load_sources(((p, None) for p in files), registry, store_url=store_url)


def load_sources(
    sources: Iterable[tuple[Path, str | None]],
    registry: Registry,
    *,
    store_url: str | None = None,
) -> Rulebook:
    """Load rules from (path, text) pairs; ``text=None`` reads the file.

    The cyclic collector is paused meanwhile: loading allocates millions of
    objects that all stay alive, and each collection would walk them all again
    (it more than doubles the time to load 100,000 rules). With ``store_url``,
    rules the store cannot run are refused too (see :func:`check_store`).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        loader = _Loader(registry)
        names = []
        for path, text in sources:
            names.append(str(path))
            loader.load_file(path, text)
        rulebook = loader.finish(tuple(names))
    finally:
        if was_enabled:
            gc.enable()
    if store_url is not None:
        check_store(rulebook, store_url)
    return rulebook


def check_store(rulebook: Rulebook, store_url: str) -> None:
    """Refuse (RuleErrors naming file:line) the rules the store at ``store_url`` cannot run.

    On a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``) an atomic
    span's writes are applied by ONE script, which runs on one node: every key
    it writes and every lease fencing it must be in one hash slot. Each
    variable's keys are tagged by the variable's own key, so a span holding
    two or more variables spans several slots: such a rule is refused here
    rather than failing at every run.
    """
    scheme = store_url.split("://", 1)[0].lower()
    if not scheme.endswith("+cluster"):
        return
    errors = [
        RuleError(
            f"rule {r.id!r}: its atomic span holds {', '.join(r.atomic_vars)}, whose keys are "
            "in different hash slots on a Redis Cluster, so the span's writes cannot be "
            "committed together in one script; keep that state in one variable (a map such "
            "as {count: 0, last: ''}), or opt out with 'atomic: false'",
            r.file,
            r.line,
        )
        for r in rulebook.rules
        if len(r.atomic_vars) > 1
    ]
    if errors:
        raise RuleErrors(errors)


class _Loader:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.errors: list[RuleError] = []
        self.variables: dict[str, VariableDecl] = {}
        self.raw_rules: list[tuple[str, LineDict]] = []
        self.tests: list[RuleTest] = []
        self._known: frozenset[str] | None = None
        self._allowed: dict[str, tuple[str, ...]] = {}

    def error(self, message: str, file: str, line: int | None) -> None:
        self.errors.append(RuleError(message, file=file, line=line))

    def load_file(self, path: Path, text: str | None) -> None:
        file = str(path)
        try:
            doc = read_yaml(path, text)
        except RuleError as exc:
            self.errors.append(exc)
            return
        if doc is None:
            return
        if not isinstance(doc, LineDict):
            self.error("a rules file must be a mapping with 'variables:' and/or 'rules:'", file, 1)
            return
        for key in doc:
            if key not in FILE_KEYS:
                self.error(_unknown("top-level key", key, FILE_KEYS), file, doc.line_of(key))
        variables = doc.get("variables")
        if variables is None:
            pass
        elif not isinstance(variables, LineDict):
            self.error(
                "'variables:' must be a mapping of name -> {scope, default}",
                file,
                doc.line_of("variables"),
            )
        else:
            for name, decl in variables.items():
                self.declare(name, decl, file, variables.line_of(name))
        self.collect_tests(doc, file)
        rules = doc.get("rules")
        if rules is None:
            return
        if not isinstance(rules, LineList):
            self.error("'rules:' must be a list of rules", file, doc.line_of("rules"))
            return
        for i, raw in enumerate(rules):
            if not isinstance(raw, LineDict):
                self.error(
                    "each rule must be a mapping with id, triggers and steps",
                    file,
                    rules.line_of(i),
                )
                continue
            self.raw_rules.append((file, raw))

    def collect_tests(self, doc: LineDict, file: str) -> None:
        """Keep ``tests:`` cases with their lines; tmy/ruletests.py validates and runs them."""
        tests = doc.get("tests")
        if tests is None:
            return
        if not isinstance(tests, LineList):
            self.error("'tests:' must be a list of cases like {send: …, expect: …}", file,
                       doc.line_of("tests"))  # fmt: skip
            return
        for i, case in enumerate(tests):
            if not isinstance(case, LineDict):
                self.error("each test case must be a mapping with 'send:'", file, tests.line_of(i))
                continue
            lines = {str(k): case.line_of(k) for k in case}
            self.tests.append(RuleTest(file, tests.line_of(i), {**_plain(case), "_lines": lines}))

    def declare(self, name: Any, decl: Any, file: str, line: int) -> None:
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            self.error(
                f"variable name {name!r} must be an identifier (letters, digits, _)", file, line
            )
            return
        if name in RUN_LOCALS:
            self.error(f"variable {name!r} is a built-in run local; pick another name", file, line)
            return
        if decl is None:
            decl = LineDict()
        if not isinstance(decl, LineDict):
            self.error(
                f"variable {name!r}: expected {{scope: global|chat|user, default: …}}", file, line
            )
            return
        for key in decl:
            if key not in VARIABLE_KEYS:
                self.error(
                    _unknown(f"key of variable {name!r}", key, VARIABLE_KEYS),
                    file,
                    decl.line_of(key),
                )
        scope = decl.get("scope", "global")
        if scope not in SCOPES:
            self.error(
                f"variable {name!r}: scope {scope!r} must be one of {', '.join(SCOPES)}",
                file,
                decl.line_of("scope"),
            )
            scope = "global"  # declared anyway: rules using it must not say "declare it"
        default = _plain(decl.get("default"))
        try:
            encode(default, name)
        except StoreError as exc:
            self.error(
                f"variable {name!r}: the default cannot be stored ({exc}); quote dates and "
                "other special values to keep them as text",
                file,
                decl.line_of("default"),
            )
            default = None
        prior = self.variables.get(name)
        if prior and (prior.scope, prior.default) != (scope, default):
            self.error(
                f"variable {name!r} is declared again differently (first at "
                f"{prior.file}:{prior.line})",
                file,
                line,
            )
            return
        self.variables[name] = VariableDecl(name, scope, default, file, line)

    def finish(self, files: tuple[str, ...]) -> Rulebook:
        rules: list[Rule] = []
        seen: dict[str, Rule] = {}
        raw_rules, self.raw_rules = self.raw_rules, []
        raw_rules.reverse()
        while raw_rules:  # popping frees each raw rule once compiled: a lower peak
            file, raw = raw_rules.pop()
            rule = self.compile_rule(raw, file)
            if rule is None:
                continue
            if rule.id in seen:
                first = seen[rule.id]
                self.error(
                    f"duplicate rule id {rule.id!r} (first at {first.file}:{first.line})",
                    file,
                    raw.line_of("id"),
                )
                continue
            seen[rule.id] = rule
            if raw.get("enabled", True) is not False:
                rules.append(rule)
        if self.errors:
            raise RuleErrors(self.errors)
        index = TriggerIndex(rules)
        for r in rules:
            if "schedule" in r.extras and r.steps:
                written = set().union(*(self.access(st)[1] for st in r.steps))
                r.scheduled_locks = tuple(sorted(written))
        scheduled = {name for r in rules for name in r.scheduled_locks}
        locked = frozenset(name for r in rules for st in r.steps for name in st.lock_roots)
        locked |= {name for r in rules for name in r.atomic_vars} | scheduled
        locked -= _atomic_updates(rules, scheduled)
        return Rulebook(
            tests=tuple(self.tests),
            locked_variables=locked,
            rules=tuple(rules),
            variables=dict(self.variables),
            index=index,
            files=files,
            by_id={r.id: r for r in rules},
            has_sessions=any(r.session > 0 for r in rules),
            has_filters=any(r.filters is not OPEN_FILTERS for r in rules),
        )

    # -- rules -------------------------------------------------------------------------------

    def compile_rule(self, raw: LineDict, file: str) -> Rule | None:
        before = len(self.errors)
        line = raw.line
        for key in raw:
            if key not in _RULE_KEY_SET and key not in RULE_EXTENSIONS:
                self.error(
                    _unknown("rule key", key, (*RULE_KEYS, *RULE_EXTENSIONS)),
                    file,
                    raw.line_of(key),
                )
        rid = raw.get("id")
        if not isinstance(rid, str) or not _ID_RE.fullmatch(rid):
            self.error(
                f"rule needs an 'id:' of letters, digits, '_', '.', '-' (got {rid!r})",
                file,
                raw.line_of("id"),
            )
            rid = f"<rule at line {line}>"
        case_sensitive = self.typed(raw, "case_sensitive", bool, False, file)
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
            tline = raw_triggers.line_of(i) if isinstance(raw_triggers, LineList) else line
            try:
                trigger = parse_trigger(src, case_sensitive=case_sensitive)
            except RuleError as exc:
                self.error(exc.message, file, tline)
            else:
                trigger.line = tline
                triggers.append(trigger)
        groups = {g for t in triggers for g in t.groups}
        priority = self.typed(raw, "priority", int, 0, file)
        session = self.typed(raw, "session", (int, float), 0, file)
        if session < 0:
            self.error("'session:' is a number of seconds >= 0", file, raw.line_of("session"))
        filters = OPEN_FILTERS
        if any(k in raw for k in _FILTER_KEYS):
            filters = Filters(
                platforms=self.str_set(raw, "platforms", file),
                chats=self.str_set(raw, "chats", file),
                private=self.typed(raw, "private", bool, None, file),
                admin_only=self.typed(raw, "admin_only", bool, False, file),
                mention=self.typed(raw, "mention", bool, False, file),
            )
        extras = {}
        for key, validate in RULE_EXTENSIONS.items():
            if key in raw:
                try:
                    extras[key] = validate(raw[key])
                except (RuleError, EvalError, ValueError, TypeError) as exc:
                    self.error(f"rule {rid!r}: {key}: {exc}", file, raw.line_of(key))
        raw_steps = raw.get("steps")
        if not isinstance(raw_steps, LineList) or not raw_steps:
            self.error(
                f"rule {rid!r} needs 'steps:', a non-empty list of executor steps",
                file,
                raw.line_of("steps"),
            )
            raw_steps = LineList()
            raw_steps.item_lines = []
        if self._known is None:  # declared variables + run locals, shared by every rule
            self._known = frozenset(self.variables) | RUN_LOCALS
        known = set(self._known)
        known |= groups
        for key, value in extras.items():
            if key in RULE_LOCALS:
                known |= set(RULE_LOCALS[key](value))
        steps: list[Step] = []
        step_ids: set[str] = set()
        dynamic_save = False
        for i, raw_step in enumerate(raw_steps):
            sline = raw_steps.line_of(i)
            if not isinstance(raw_step, LineDict):
                self.error("a step must be a mapping with 'plugin:'", file, sline)
                continue
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
        on_error = None
        if "on_error" in raw:
            on_error = self.value(raw, "on_error", file, known, dynamic_save, rid)
        cooldown = self.cooldown(raw, file, rid) if "cooldown" in raw else None
        atomic = self.typed(raw, "atomic", bool, True, file)
        if len(self.errors) > before:
            return None
        atomic_vars, span = self.atomic_span(steps) if atomic else ((), (0, -1))
        locked = {name for st in steps for name in st.lock_roots} | set(atomic_vars)
        reads = set().union(*(self.access(st)[0] for st in steps)) if steps else set()
        # a constant list mode takes from its list inside one store update: nothing to prefetch
        taken = {
            st.INPUT.root
            for st in steps
            if isinstance(st.list_mode, Constant) and st.INPUT is not None and st.INPUT.root
        }
        untaken = set().union(
            *(self.access(st)[0] for st in steps if not isinstance(st.list_mode, Constant))
        ) if steps else set()  # fmt: skip
        reads -= taken - untaken
        return Rule(
            prefetch=tuple(sorted(reads - locked)),
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
            description=str(raw.get("description", "")),
            intent=str(raw.get("intent", "")),
            extras=extras,
            file=file,
            line=line,
        )

    def cooldown(self, raw: LineDict, file: str, rid: str) -> Cooldown | None:
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
                self.error(f"{where}: " + _unknown("key", key, COOLDOWN_KEYS), file, line)
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
            allowed = RUN_LOCALS | {"COOLDOWN_LEFT"} | set(self.variables)
            for name in sorted(reply.names - allowed):
                self.error(
                    f"{where}: 'reply' reads {name!r}; it may use run locals such as "
                    "{USER_NAME} and {COOLDOWN_LEFT} (seconds left) and declared variables",
                    file,
                    line,
                )
        return Cooldown(float(seconds), per, reply)

    def atomic_span(self, steps: list[Step]) -> tuple[tuple[str, ...], tuple[int, int]]:
        """The variables a rule must hold across steps, and from which step to which.

        A declared variable read in one step and written in a later one (the
        check-in pattern: a guard, an increment, a date stamp) is a
        read-modify-write spread over the chain; two concurrent runs could both
        pass the guard. Such variables are held from the first step that reads
        one to the last that writes one. Everything the steps in between lock or
        write joins the set, so the run takes all its locks at once, in name
        order, and never waits for a lock while holding another (no deadlock).
        """
        declared = set(self.variables)
        reads: list[set[str]] = []
        writes: list[set[str]] = []
        for st in steps:
            r, w = self.access(st)
            reads.append(r)
            writes.append(w)
        first, last, held = len(steps), -1, set()
        for name in declared:
            read_at = [i for i, r in enumerate(reads) if name in r]
            write_at = [i for i, w in enumerate(writes) if name in w]
            if read_at and write_at and read_at[0] < write_at[-1]:
                held.add(name)
                first, last = min(first, read_at[0]), max(last, write_at[-1])
        if not held:
            return (), (0, -1)
        for i in range(first, last + 1):
            held |= writes[i]
        return tuple(sorted(held)), (first, last)

    def access(self, st: Step) -> tuple[set[str], set[str]]:
        """The declared variables a step may read, and those it may write."""
        declared = set(self.variables)
        names: set[str] = set()
        for v in (st.input, st.list_mode, st.when, st.stop, *st.options.values()):
            if v is not None:
                names |= v.names
        if st.INPUT is not None:
            names |= st.INPUT.names
            names |= {st.INPUT.root} if st.INPUT.root else declared
        if st.save is not None:
            names |= st.save.names
        wrote: set[str] = set(st.lock_roots)
        if st.save is not None and st.save.root in declared:
            wrote.add(st.save.root)
        if st.list_mode is not None and st.INPUT is not None:
            wrote |= {st.INPUT.root} if st.INPUT.root else declared
        return names & declared, wrote & declared

    def compile_step(
        self, raw: LineDict, index: int, rid: str, file: str, known: set[str], dynamic: bool
    ) -> Step | None:
        before = len(self.errors)
        where = f"rule {rid!r} step {raw.get('id', index)!r}"
        plugin = raw.get("plugin")
        spec = self.registry.get(plugin) if isinstance(plugin, str) else None
        if spec is None:
            hint = self.registry.suggest(plugin) if isinstance(plugin, str) else ""
            self.error(f"{where}: unknown plugin {plugin!r}; {hint}", file, raw.line_of("plugin"))
            return None
        allowed = self._allowed.get(spec.name)
        if allowed is None:
            allowed = self._allowed[spec.name] = (*STEP_KEYS, *STEP_EXTENSIONS, *spec.options)
        for key in raw:
            if key not in allowed:
                self.error(
                    _unknown(f"key for plugin {plugin}", key, allowed), file, raw.line_of(key)
                )
        for name, opt in spec.options.items():
            if opt.required and name not in raw:
                self.error(f"{where}: plugin {plugin} needs '{name}:' ({opt.doc})", file, raw.line)
        sid = raw.get("id")
        if sid is not None and (not isinstance(sid, str) or not _ID_RE.fullmatch(sid)):
            self.error(
                f"{where}: step id must be letters, digits, '_', '.', '-'", file, raw.line_of("id")
            )
        has_input_var = "INPUT" in raw
        step_known = set(known)
        if has_input_var:
            step_known.add("INPUT")
        else:
            step_known.discard("INPUT")
        INPUT = self.path(raw, "INPUT", file, step_known, dynamic, where)
        list_mode: Value | None = None
        input_value: Value | None = None
        if "input" in raw and raw["input"] not in ("", None):
            raw_input = raw["input"]
            if isinstance(raw_input, str) and raw_input.strip() in LIST_MODES:
                list_mode = Constant(raw_input.strip())
                if INPUT is None:
                    self.error(
                        f"{where}: input {raw_input.strip()} takes a member of a list: "
                        "add 'INPUT: <list variable>'",
                        file,
                        raw.line_of("input"),
                    )
                elif (
                    INPUT.static is not None
                    and not INPUT.static.segments
                    and INPUT.root in self.variables
                ):
                    decl = self.variables[INPUT.root]
                    if not isinstance(decl.default, list):
                        self.error(
                            f"{where}: input {raw_input.strip()} takes from the list "
                            f"{INPUT.root!r}, but its declared default is "
                            f"{type(decl.default).__name__} {decl.default!r} "
                            f"({decl.file}:{decl.line}); declare it with 'default: []'",
                            file,
                            raw.line_of("input"),
                        )
            else:
                input_value = self.value(raw, "input", file, step_known, dynamic, where)
                if isinstance(input_value, Expression) and INPUT is not None:
                    list_mode = input_value
        if has_input_var:
            save_known = step_known
        else:
            save_known = set(known)
            save_known.add("INPUT")
        save = self.path(raw, "save", file, save_known, dynamic, where)
        when = self.value(raw, "when", file, step_known, dynamic, where) if "when" in raw else None
        stop: Value | None = None
        if "stop" in raw and raw["stop"] not in (None, False, ""):
            stop_known = set(step_known)
            if save is not None and save.root:
                stop_known.add(save.root)
            stop = self.value(raw, "stop", file, stop_known, dynamic, where)
        on_error = raw.get("on_error", "stop")
        if on_error not in ("stop", "continue"):
            self.error(
                f"{where}: on_error must be 'stop' or 'continue' (the rule's 'on_error:' "
                "holds the reply text)",
                file,
                raw.line_of("on_error"),
            )
        timeout = raw.get("timeout")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            self.error(f"{where}: timeout is a number of seconds > 0", file, raw.line_of("timeout"))
        options: dict[str, Value] = {}
        for name, opt in spec.options.items():
            if name not in raw:
                continue
            val = self.value(raw, name, file, step_known, dynamic, where)
            if val is None:
                continue
            if opt.types and isinstance(val, Constant) and not isinstance(val.value, opt.types):
                self.error(
                    f"{where}: '{name}' must be {_type_names(opt.types)}, got "
                    f"{type(val.value).__name__}",
                    file,
                    raw.line_of(name),
                )
            options[name] = val
        if spec.check is not None:
            consts = {k: v.value for k, v in options.items() if isinstance(v, Constant)}
            try:
                spec.check(consts)
            except (ValueError, TypeError, RuleError) as exc:
                self.error(f"{where}: {exc}", file, raw.line)
        extras: dict[str, Any] = {}
        for key, validate in STEP_EXTENSIONS.items():
            if key in raw:
                try:
                    extras[key] = validate(raw[key])
                except (RuleError, EvalError, ValueError, TypeError) as exc:
                    self.error(f"{where}: {key}: {exc}", file, raw.line_of(key))
        if len(self.errors) > before:
            return None
        reads: set[str] = set()
        for v in (input_value, list_mode, when, *options.values()):
            if v is not None:
                reads |= v.names
        if INPUT is not None:
            reads |= INPUT.names | ({INPUT.root} if INPUT.root else set())
        lock_roots = self.lock_roots(save, reads, INPUT is not None and INPUT.root is None)
        step = Step(
            index=index,
            id=sid,
            spec=spec,
            input=input_value,
            list_mode=list_mode,
            INPUT=INPUT,
            save=save,
            when=when,
            on_error=on_error,
            options=options,
            timeout=float(timeout) if timeout else None,
            uri=f"{rid}/{sid if sid is not None else index}",
            lock_roots=lock_roots,
            stop=stop,
            extras=extras,
            file=file,
            line=raw.line,
        )
        if (
            spec.run is adjust
            and isinstance(input_value, Constant)
            and INPUT is None
            and save is None
            and stop is None
            and not options
        ):
            step.constant = input_value
        return step

    # -- helpers -----------------------------------------------------------------------------

    def lock_roots(
        self, save: PathValue | None, reads: set[str], dynamic_input: bool
    ) -> tuple[str, ...]:
        """Declared variables a step must hold locked: those it may read and then save.

        A step that reads the variable it saves to is a read-modify-write; holding
        the variable's lock from the read to the write keeps concurrent runs from
        interleaving. A computed save position (``?=``) could be any variable the
        step reads, so all of them are locked (in name order: no deadlocks); a
        computed INPUT position could read any variable at all.
        """
        if save is None:
            return ()
        if save.root is not None:
            if save.root in self.variables and (save.root in reads or dynamic_input):
                return (save.root,)
            return ()
        candidates = set(self.variables) if dynamic_input else reads & set(self.variables)
        return tuple(sorted(candidates))

    def value(
        self, raw: LineDict, key: str, file: str, known: set[str], dynamic: bool, where: str
    ) -> Value | None:
        try:
            val = compile_value(_plain(raw[key]))
        except EvalError as exc:
            self.error(f"{where}: '{key}': {exc}", file, raw.line_of(key))
            return None
        self.check_names(val.names, raw, key, file, known, dynamic, where)
        return val

    def path(
        self, raw: LineDict, key: str, file: str, known: set[str], dynamic: bool, where: str
    ) -> PathValue | None:
        src = raw.get(key)
        if src in (None, ""):
            return None
        if not isinstance(src, str):
            self.error(
                f"{where}: '{key}' must be a variable position such as 'scores[{{USER}}]'",
                file,
                raw.line_of(key),
            )
            return None
        try:
            pv = compile_path(src)
        except EvalError as exc:
            self.error(f"{where}: '{key}': {exc}", file, raw.line_of(key))
            return None
        reads = set(pv.names)
        if key == "INPUT" and pv.root:
            reads.add(pv.root)
        self.check_names(reads, raw, key, file, known, dynamic, where)
        return pv

    def check_names(
        self,
        names: Iterable[str],
        raw: LineDict,
        key: str,
        file: str,
        known: set[str],
        dynamic: bool,
        where: str,
    ) -> None:
        if dynamic:
            return
        for name in sorted(set(names) - known):
            extra = did_you_mean(name, sorted(known))
            self.error(
                f"{where}: '{key}' reads {name!r}, which is never set{extra}: declare it under "
                "'variables:', save it in an earlier step, or write {{ and }} for literal braces",
                file,
                raw.line_of(key),
            )

    def typed(self, raw: LineDict, key: str, types: Any, default: Any, file: str) -> Any:
        if key not in raw:
            return default
        val = raw[key]
        if types is int or types == (int, float):
            ok = isinstance(val, types) and not isinstance(val, bool)
        else:
            ok = isinstance(val, types)
        if not ok:
            self.error(f"'{key}' must be {_type_names(types)}, got {val!r}", file, raw.line_of(key))
            return default
        return val

    def str_set(self, raw: LineDict, key: str, file: str) -> frozenset[str] | None:
        if key not in raw:
            return None
        val = raw[key]
        if isinstance(val, (str, int)):
            val = [val]
        if not isinstance(val, list) or not all(isinstance(v, (str, int)) for v in val):
            self.error(f"'{key}' must be a list of names", file, raw.line_of(key))
            return None
        return frozenset(str(v) for v in val)


def _atomic_updates(rules: list[Rule], keep: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Mark the steps applied as one atomic store update; return the variables they free.

    A step qualifies when its executor is pure and the only variable it holds
    locked is the one it saves (``input: "?= hits + 1", save: hits``): the read,
    the executor and the write then run inside the store's compare-and-set, and
    a concurrent change makes it recompute instead of waiting for a lock. That
    is safe only if no other step in the rulebook holds that variable's lock
    across I/O (an impure read-modify-write, or a multi-step span): an update
    landing inside such a step's lock would be overwritten. Those variables keep
    the lock everywhere, as do ``keep`` (variables a scheduled run holds locked).
    """
    steps_of: dict[str, list[Step]] = {}
    for r in rules:
        for st in r.steps:
            for name in st.lock_roots:
                steps_of.setdefault(name, []).append(st)
    spans = {name for r in rules for name in r.atomic_vars} | set(keep)
    freed = set()
    for name, steps in steps_of.items():
        if name in spans or not all(_updatable(st, name) for st in steps):
            continue
        for st in steps:
            st.atomic_update = True
        freed.add(name)
    return freed


def _updatable(st: Step, name: str) -> bool:
    return (
        st.spec.pure
        and st.lock_roots == (name,)
        and st.save is not None
        and st.save.root == name
        and name not in st.save.names
        and st.list_mode is None
        and not st.extras
        and (st.when is None or name not in st.when.names)
    )


def _plain(value: Any) -> Any:
    """LineDict/LineList → dict/list (values handed to the engine carry no YAML baggage)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _unknown(what: str, key: Any, allowed: Iterable[str]) -> str:
    return f"unknown {what} {key!r}{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}"


def _type_names(types: Any) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__
