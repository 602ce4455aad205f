"""The registry: executors by name, plus the rule keys, step keys and hooks extensions add.

The executor contract is one signature (:data:`tmy.types.Executor`)::

    async def run(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any

``value`` is the step input (seed 004's ``task_cfg.input`` / ``INPUT``),
``cfg`` the executor's own options with templates and expressions already
evaluated, ``ctx`` the run (variables, store, message, logger, HTTP client).
The return value becomes ``STEP_RESULT``; an exception becomes ``STEP_ERROR``.

Each executor declares its options; a rule that uses an unknown option or
misses a required one is refused when the rules load, with file and line.

One registry is built per app (``tmy.app.build_registry``) from the built-in
executors, the app's extensions (:meth:`Registry.install`) and the plugins
folder; the loader reads the rule and step keys it accepts from it and the
engine reads the step hooks from it. Nothing is registered at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tmy.errors import ConfigError
from tmy.extension import Extension, RuleKey, StepKey
from tmy.hints import did_you_mean
from tmy.types import Executor, StepHook

Run = Executor  # the name this module used before tmy.types existed


@dataclass(frozen=True, slots=True)
class Option:
    """One config key an executor accepts."""

    types: type | tuple[type, ...] | None = None  # checked on constant values at load time
    required: bool = False
    default: Any = None
    doc: str = ""
    evaluate: bool = True  # False: the executor receives the compiled Value, to evaluate itself


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    name: str
    run: Executor
    options: Mapping[str, Option] = field(default_factory=dict)
    takes: type | None = None  # str: bytes input is decoded as UTF-8, other values rendered
    doc: str = ""
    check: Callable[[dict[str, Any]], None] | None = None  # extra load-time check of constants
    instant: bool = False  # never waits on I/O (ADJUST): no step timeout is armed
    # a function of its input and options only: no I/O, no side effects, never awaits.
    # A pure step that reads and saves one variable is applied as one atomic store
    # update (compare-and-set) instead of lock + read + write + unlock.
    pure: bool = False
    # ``check`` also takes the names of the templated options (``check(consts, computed)``):
    # a step whose ``images:`` is a template still needs a model that sees pictures
    check_computed: bool = False
    # the options at their defaults, in the executor's order: a step's config starts as a
    # copy of it and sets only the options the step names (tmy.engine.execute)
    defaults: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        defaults = {name: option.default for name, option in self.options.items()}
        object.__setattr__(self, "defaults", defaults)  # frozen: set once, here


def _check_name(name: str) -> None:
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"executor name {name!r} must be letters, digits, '_' or '-'")


class Registry:
    """Executors by name, and the rule keys, step keys and step hooks of installed extensions.

    ``rule_keys``, ``step_keys`` and ``step_hooks`` are read-only views; they
    change only through :meth:`install`. Every hook has both
    :class:`~tmy.types.StepHook` methods (checked here, once): the engine calls
    them without probing.
    """

    def __init__(self) -> None:
        self._specs: dict[str, ExecutorSpec] = {}
        self._rule_keys: dict[str, RuleKey] = {}
        self._step_keys: dict[str, StepKey] = {}
        self._step_hooks: dict[str, StepHook] = {}
        self._owner: dict[tuple[str, str], str] = {}  # (kind, name) -> extension that added it
        self.rule_keys: Mapping[str, RuleKey] = MappingProxyType(self._rule_keys)
        self.step_keys: Mapping[str, StepKey] = MappingProxyType(self._step_keys)
        self.step_hooks: Mapping[str, StepHook] = MappingProxyType(self._step_hooks)
        self.extensions: tuple[str, ...] = ()  # names of the extensions installed, in order

    def add(
        self,
        name: str,
        run: Executor,
        *,
        options: Mapping[str, Option] | None = None,
        takes: type | None = None,
        doc: str = "",
        check: Callable[[dict[str, Any]], None] | None = None,
        replace: bool = False,
        instant: bool = False,
        pure: bool = False,
    ) -> ExecutorSpec:
        """Register ``run`` under ``name``; a second registration of a name is refused."""
        _check_name(name)
        spec = ExecutorSpec(
            name, run, dict(options or {}), takes, doc, check, instant or pure, pure
        )
        return self.add_spec(spec, replace=replace)

    def add_spec(self, spec: ExecutorSpec, *, replace: bool = False) -> ExecutorSpec:
        """Register a ready :class:`ExecutorSpec` (what an extension's ``executors()`` gives)."""
        _check_name(spec.name)
        if spec.name in self._specs and not replace:
            raise ConfigError(f"executor {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        return spec

    def install(self, extension: Extension, settings: Any) -> None:
        """Add ``extension``'s executors, rule keys and step keys (with their hooks).

        A name another extension (or a built-in) already added is a ConfigError
        naming both: two extensions never silently replace each other's parts.
        """
        specs = list(extension.executors(settings))
        for spec in specs:
            if not isinstance(spec, ExecutorSpec):
                raise ConfigError(
                    f"extension {extension.name!r}: executors() must give ExecutorSpec "
                    f"objects, not {type(spec).__name__}"
                )
            if spec.name in self._specs:
                raise ConfigError(
                    f"extension {extension.name!r}: executor {spec.name!r} is already "
                    f"added by {self._owner.get(('executor', spec.name), 'the built-ins')!r}"
                )
        for key, step_key in extension.step_keys.items():
            hook = step_key.hook
            if hook is not None and not isinstance(hook, StepHook):
                raise ConfigError(
                    f"extension {extension.name!r}: the hook of step key {key!r} must have "
                    "both before() and again() (subclass tmy.StepHook)"
                )
        claims = [("rule key", key) for key in extension.rule_keys]
        claims += [("step key", key) for key in extension.step_keys]
        for kind, key in claims:
            if (kind, key) in self._owner:
                raise ConfigError(
                    f"extension {extension.name!r}: {kind} {key!r} is already added by "
                    f"{self._owner[(kind, key)]!r}"
                )
        for claim in claims:  # checked all first: a refused install changes nothing
            self._owner[claim] = extension.name
        for spec in specs:
            self.add_spec(spec)
            self._owner[("executor", spec.name)] = extension.name
        self._rule_keys.update(extension.rule_keys)
        for key, step_key in extension.step_keys.items():
            self._step_keys[key] = step_key
            hook = step_key.hook
            if hook is None:
                continue
            self._step_hooks[key] = hook
        self.extensions = (*self.extensions, extension.name)

    def get(self, name: str) -> ExecutorSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def suggest(self, name: str) -> str:
        return f"known executors: {', '.join(self.names())}{did_you_mean(name, self._specs)}"

    def __contains__(self, name: object) -> bool:
        return name in self._specs
