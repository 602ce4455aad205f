"""Executors: named async callables, registered explicitly.

The whole contract is one signature::

    async def run(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any

``value`` is the step input (seed 004's ``task_cfg.input`` / ``INPUT``),
``cfg`` the executor's own options with templates and expressions already
evaluated, ``ctx`` the run (variables, store, message, logger, HTTP client).
The return value becomes ``STEP_RESULT``; an exception becomes ``STEP_ERROR``.

Each executor declares its options; a rule that uses an unknown option or
misses a required one is refused when the rules load, with file and line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tmy.errors import ConfigError
from tmy.hints import did_you_mean

Run = Callable[[Any, dict[str, Any], Any], Awaitable[Any]]


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
    run: Run
    options: Mapping[str, Option] = field(default_factory=dict)
    takes: type | None = None  # str: bytes input is decoded as UTF-8, other values rendered
    doc: str = ""
    check: Callable[[dict[str, Any]], None] | None = None  # extra load-time check of constants
    instant: bool = False  # never waits on I/O (ADJUST): no step timeout is armed
    # a function of its input and options only: no I/O, no side effects, never awaits.
    # A pure step that reads and saves one variable is applied as one atomic store
    # update (compare-and-set) instead of lock + read + write + unlock.
    pure: bool = False


class Registry:
    """Executors by name. Built-ins are added by :func:`default_registry`."""

    def __init__(self) -> None:
        self._specs: dict[str, ExecutorSpec] = {}

    def add(
        self,
        name: str,
        run: Run,
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
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"executor name {name!r} must be letters, digits, '_' or '-'")
        if name in self._specs and not replace:
            raise ConfigError(f"executor {name!r} is registered twice")
        spec = ExecutorSpec(
            name, run, dict(options or {}), takes, doc, check, instant or pure, pure
        )
        self._specs[name] = spec
        return spec

    def get(self, name: str) -> ExecutorSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def suggest(self, name: str) -> str:
        return f"known executors: {', '.join(self.names())}{did_you_mean(name, self._specs)}"

    def __contains__(self, name: object) -> bool:
        return name in self._specs
