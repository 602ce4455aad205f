"""Compiling one step of a rule's chain: its executor, input, save position, options, keys.

A step is checked against its executor's declared options and the step keys
extensions installed in the registry (``when_llm:``); every value is compiled
once and every name it reads is checked against what is set by then (declared
variables, run locals, earlier saves). The step's hooks are resolved here,
once, from the registry, so the engine calls them without looking them up.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tmy.errors import EvalError, RuleError
from tmy.executors.adjust import adjust
from tmy.executors.registry import ExecutorSpec, Registry
from tmy.rulebook.atomic import lock_roots
from tmy.rulebook.fields import FieldReader, boards_of, type_names, unknown_key
from tmy.rulebook.model import NO_NAMES, NOTHING, Step
from tmy.types import StepHook
from tmy.values.compiled import (
    LIST_MODES,
    Constant,
    Expression,
    PathValue,
    Value,
    compile_value,
)
from tmy.yamlfile.source import LineDict

STEP_KEYS = (
    "id", "plugin", "input", "INPUT", "save", "when", "stop", "on_error", "timeout", "description",
)  # fmt: skip
ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_PLAIN_STEP_KEYS = frozenset(("plugin", "input"))
_KEY_ERRORS = (RuleError, EvalError, ValueError, TypeError)


class StepCompiler(FieldReader):
    """Compiles steps (see the module docstring); the rule compiler builds on it."""

    def __init__(self, registry: Registry) -> None:
        super().__init__(registry)
        # executor -> the keys its steps may use (in order, for messages, and as a set)
        self._allowed: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
        # plugin name -> its executor when a step of just plugin + input can skip the
        # general checks (no required option, no load-time check), else None
        self._plain_specs: dict[str, ExecutorSpec | None] = {}

    def compile_step(
        self, raw: LineDict, index: int, rid: str, file: str, known: set[str], dynamic: bool
    ) -> Step | None:
        """Step ``index`` of rule ``rid``; None (and errors recorded) when it is wrong.

        ``known``: the names set before this step; ``dynamic``: an earlier step
        saved to a computed position, so no name can be called unset.
        """
        before = len(self.errors)
        where = f"rule {rid!r} step {raw.get('id', index)!r}"
        spec = self.step_spec(raw, where, file)
        if spec is None:
            return None
        sid = raw.get("id")
        has_input_var = "INPUT" in raw
        step_known = known  # the names this step may read: copied only when it differs
        if has_input_var != ("INPUT" in known):
            step_known = {*known, "INPUT"} if has_input_var else known - {"INPUT"}
        INPUT = self.path(raw, "INPUT", file, step_known, dynamic, where) if has_input_var else None
        input_value, list_mode = self.step_input(raw, INPUT, file, step_known, dynamic, where)
        save = None
        if "save" in raw:
            save_known = step_known if has_input_var else {*known, "INPUT"}
            save = self.path(raw, "save", file, save_known, dynamic, where)
        when = self.value(raw, "when", file, step_known, dynamic, where) if "when" in raw else None
        stop: Value | None = None
        if "stop" in raw and raw["stop"] not in (None, False, ""):
            stop_known = set(step_known)
            if save is not None and save.root:
                stop_known.add(save.root)
            stop = self.value(raw, "stop", file, stop_known, dynamic, where)
        on_error, timeout = self.step_limits(raw, file, where)
        options = self.step_options(raw, spec, file, step_known, dynamic, where)
        extras: Mapping[str, Any] = NOTHING
        hooks: tuple[tuple[str, StepHook], ...] = ()
        if not self.registry.step_keys.keys().isdisjoint(raw):
            extras, hooks = self.step_extras(raw, file, where)
        if len(self.errors) > before:
            return None
        reads: set[str] = set()
        for v in (input_value, list_mode, when, *options.values()):
            if v is not None:
                reads |= v.names
        if INPUT is not None:
            reads |= INPUT.names | ({INPUT.root} if INPUT.root else set())
        dynamic_input = INPUT is not None and INPUT.root is None
        boards = _boards((input_value, list_mode, when, stop, INPUT, save, *options.values()))
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
            options=options or NOTHING,
            timeout=timeout,
            uri=f"{rid}/{sid if sid is not None else index}",
            lock_roots=(
                lock_roots(save, reads, dynamic_input, self.variables) if save is not None else ()
            ),
            stop=stop,
            extras=extras or NOTHING,
            file=file,
            line=raw.line,
            hooks=hooks,
            boards=boards,
        )
        if (
            spec.run is adjust
            and type(input_value) is Constant  # (no class derives from it: no ABC check)
            and INPUT is None
            and save is None
            and stop is None
            and not options
        ):
            step.constant = input_value
        return step

    def plain_step(self, raw: LineDict, index: int, rid: str, file: str) -> Step | None:
        """A step of only ``plugin:`` and a constant ``input:`` (most steps of a big generated
        rulebook), built without the general checks, none of which can fail or change it:
        the Step the general path builds. None: not such a step, take the general path."""
        plugin, given = raw.get("plugin"), raw.get("input")
        if type(plugin) is not str or type(given) is not str or not given:
            return None
        spec = self._plain_specs.get(plugin, False)
        if spec is False:
            spec = self.registry.get(plugin)
            if spec is not None and (
                spec.check is not None
                or _PLAIN_STEP_KEYS & spec.options.keys()
                or any(opt.required for opt in spec.options.values())
            ):
                spec = None
            self._plain_specs[plugin] = spec
        if spec is None or given.strip() in LIST_MODES:
            return None
        try:
            value = compile_value(given)
        except EvalError:
            return None
        if type(value) is not Constant:  # reads names: the general path checks them
            return None
        # index, id, spec, input, list_mode, INPUT, save, when, on_error, options, timeout,
        # uri, lock_roots, stop, extras, file, line, boards, atomic_update, meter, constant
        return Step(index, None, spec, value, None, None, None, None, "stop", NOTHING, None,
                    f"{rid}/{index}", (), None, NOTHING, file, raw.line, NO_NAMES, False, None,
                    value if spec.run is adjust else None)  # fmt: skip

    def step_spec(self, raw: LineDict, where: str, file: str) -> ExecutorSpec | None:
        """The step's executor, its keys checked against what that executor and the
        installed step keys allow, its required options present, its id well-formed."""
        plugin = raw.get("plugin")
        spec = self.registry.get(plugin) if isinstance(plugin, str) else None
        if spec is None:
            hint = self.registry.suggest(plugin) if isinstance(plugin, str) else ""
            self.error(f"{where}: unknown plugin {plugin!r}; {hint}", file, raw.line_of("plugin"))
            return None
        allowed, allowed_set = self._allowed.get(spec.name) or ((), frozenset())
        if not allowed:
            allowed = (*STEP_KEYS, *self.registry.step_keys, *spec.options)
            allowed_set = frozenset(allowed)
            self._allowed[spec.name] = allowed, allowed_set
        for key in raw:
            if key not in allowed_set:
                self.error(
                    unknown_key(f"key for plugin {plugin}", key, allowed), file, raw.line_of(key)
                )
        for name, opt in spec.options.items():
            if opt.required and name not in raw:
                self.error(f"{where}: plugin {plugin} needs '{name}:' ({opt.doc})", file, raw.line)
        sid = raw.get("id")
        if sid is not None and (not isinstance(sid, str) or not ID_RE.fullmatch(sid)):
            self.error(
                f"{where}: step id must be letters, digits, '_', '.', '-'", file, raw.line_of("id")
            )
        return spec

    def step_limits(self, raw: LineDict, file: str, where: str) -> tuple[str, float | None]:
        """``on_error:`` (stop or continue) and ``timeout:`` (seconds) of a step."""
        on_error = raw.get("on_error", "stop")
        if on_error not in ("stop", "continue"):
            self.error(
                f"{where}: on_error must be 'stop' or 'continue' (the rule's 'on_error:' "
                "holds the reply text)",
                file,
                raw.line_of("on_error"),
            )
        timeout = raw.get("timeout")
        if timeout is None:
            return on_error, None
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            self.error(f"{where}: timeout is a number of seconds > 0", file, raw.line_of("timeout"))
            return on_error, None
        return on_error, float(timeout)

    def step_input(
        self,
        raw: LineDict,
        INPUT: PathValue | None,
        file: str,
        known: set[str],
        dynamic: bool,
        where: str,
    ) -> tuple[Value | None, Value | None]:
        """``input:`` as (value, list mode): a list mode (SHIFT, POPUP, …) takes a member of
        the list at INPUT, and an expression with an INPUT may compute one."""
        if "input" not in raw or raw["input"] in ("", None):
            return None, None
        raw_input = raw["input"]
        if not (isinstance(raw_input, str) and raw_input.strip() in LIST_MODES):
            input_value = self.value(raw, "input", file, known, dynamic, where)
            if INPUT is not None and isinstance(input_value, Expression):
                return input_value, input_value
            return input_value, None
        mode = raw_input.strip()
        if INPUT is None:
            self.error(
                f"{where}: input {mode} takes a member of a list: add 'INPUT: <list variable>'",
                file,
                raw.line_of("input"),
            )
        elif (
            INPUT.static is not None and not INPUT.static.segments and INPUT.root in self.variables
        ):
            decl = self.variables[INPUT.root]
            if not isinstance(decl.default, list):
                self.error(
                    f"{where}: input {mode} takes from the list {INPUT.root!r}, but its "
                    f"declared default is {type(decl.default).__name__} {decl.default!r} "
                    f"({decl.file}:{decl.line}); declare it with 'default: []'",
                    file,
                    raw.line_of("input"),
                )
        return None, Constant(mode)

    def step_options(
        self,
        raw: LineDict,
        spec: ExecutorSpec,
        file: str,
        known: set[str],
        dynamic: bool,
        where: str,
    ) -> dict[str, Value]:
        """The executor's options the step sets, compiled; constants type-checked and
        given to the executor's own load-time check."""
        options: dict[str, Value] = {}
        for name, opt in spec.options.items():
            if name not in raw:
                continue
            val = self.value(raw, name, file, known, dynamic, where)
            if val is None:
                continue
            if opt.types and isinstance(val, Constant) and not isinstance(val.value, opt.types):
                self.error(
                    f"{where}: '{name}' must be {type_names(opt.types)}, got "
                    f"{type(val.value).__name__}",
                    file,
                    raw.line_of(name),
                )
            options[name] = val
        if spec.check is not None:
            consts = {k: v.value for k, v in options.items() if isinstance(v, Constant)}
            try:
                if spec.check_computed:
                    spec.check(consts, frozenset(options) - consts.keys())
                else:
                    spec.check(consts)
            except (ValueError, TypeError, RuleError) as exc:
                self.error(f"{where}: {exc}", file, raw.line)
        return options

    def step_extras(
        self, raw: LineDict, file: str, where: str
    ) -> tuple[dict[str, Any], tuple[tuple[str, StepHook], ...]]:
        """The installed step keys the step carries, validated, and their hooks (key, hook)."""
        extras: dict[str, Any] = {}
        hooks: list[tuple[str, StepHook]] = []
        for key, step_key in self.registry.step_keys.items():  # in the order installed
            if key not in raw:
                continue
            try:
                extras[key] = step_key.validate(raw[key])
            except _KEY_ERRORS as exc:
                self.error(f"{where}: {key}: {exc}", file, raw.line_of(key))
                continue
            if step_key.hook is not None:
                hooks.append((key, step_key.hook))
        return extras, tuple(hooks)


def _boards(values: tuple[Value | None, ...]) -> frozenset[str]:
    """The leaderboards the step's values call (a constant calls none)."""
    boards = NO_NAMES
    for v in values:
        if v is not None and type(v) is not Constant:
            boards = boards | boards_of(v)
    return boards
