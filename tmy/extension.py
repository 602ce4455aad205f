"""Extensions: frozen objects naming everything they add to tmy.

An :class:`Extension` lists its executors, rule keys, step keys (with their
hooks), operator commands, config section and its own async lifespan. The app
is *given* a tuple of them — the built-ins (:data:`tmy.builtins.BUILTINS`) and
those installed as packages under the entry-point group ``tmy.extensions`` —
and nothing is registered by importing a module. A third-party package adds
to its ``pyproject.toml``::

    [project.entry-points."tmy.extensions"]
    weather = "tmy_weather:EXTENSION"

and its executors, rule keys and commands appear in ``check``, the CLI and
``.tmy`` with no change to tmy.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tmy.command import Command
from tmy.errors import ConfigError
from tmy.types import Route, Services, StepHook

if TYPE_CHECKING:
    from tmy.config import Settings
    from tmy.executors.registry import ExecutorSpec

ENTRY_POINT_GROUP = "tmy.extensions"


@dataclass(frozen=True, slots=True)
class RuleKey:
    """A key a rule may carry (``schedule:``, ``tool:``), validated at load time with file:line.

    ``validate(raw) -> value`` raises ``ValueError``/``RuleError`` for a bad value;
    the value lands in ``rule.extras[key]``. ``locals(value)`` names the run locals
    the key gives every run of the rule (``FIRE_TIME``, a tool's arguments), so
    references to them are not reported as unknown.
    """

    validate: Callable[[Any], Any]
    locals: Callable[[Any], Iterable[str]] | None = None


@dataclass(frozen=True, slots=True)
class StepKey:
    """A key any step may carry (``when_llm:``), validated at load time, with its hook.

    The value lands in ``step.extras[key]``; ``hook`` is what the engine calls for a
    step that carries the key (:class:`tmy.types.StepHook`), or None for a key that
    only configures something else (``max_loops``).
    """

    validate: Callable[[Any], Any]
    hook: StepHook | None = None


@dataclass(frozen=True, slots=True)
class ConfigSection:
    """A top-level config section an extension owns: ``parse(raw) -> frozen value``.

    ``parse`` raises :class:`~tmy.errors.ConfigError` naming the key; it runs once,
    when the settings load.
    """

    key: str
    parse: Callable[[Mapping[str, Any]], Any]


def _no_executors(settings: Settings) -> tuple[ExecutorSpec, ...]:
    return ()


@contextlib.asynccontextmanager
async def _no_lifespan(services: Services) -> AsyncIterator[Any]:
    yield None


def _no_routes(services: Services) -> tuple[Route, ...]:
    return ()


def _no_health(services: Services) -> tuple[dict[str, Any], bool] | None:
    return None


async def _no_warnings(settings: Settings, rulebook: Any) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Extension:
    """Everything one extension adds, stated up front (see the module docstring).

    ``executors(settings)`` returns :class:`~tmy.executors.registry.ExecutorSpec`
    objects: a function of the validated settings because an executor's load-time
    check may depend on its config (the LLM step checks model names).
    ``lifespan(services)`` is entered when the app opens, once the rules have
    loaded and the store is open, before the engine is built; it is left when the
    app closes (after runs in flight have drained), in reverse order. What it
    yields is the extension's state for this app (the LLM runtime, say), reachable
    as ``services.state[name]`` — set once by the lifespan, as Starlette's lifespan
    state is, never assigned from outside; an extension offers a typed accessor
    for it (``tmy.llm.runtime_of(services)``).
    ``serving(services)`` is entered only when the app serves (the daemon), once
    the adapters have started and before the scheduler does, and left before the
    adapters stop: what only a daemon does (say which model answers, run a
    background task). ``services.state`` holds every extension's state by then.
    ``routes(services)`` are mounted on the daemon's one listener when it serves (``/mcp``);
    each route checks its own credentials (``tmy.adapters.http.api.api_key_problem``).
    ``health(services)`` is the extension's part of ``GET /healthz`` (under its name) and
    whether it is healthy — False makes the report ``degraded``; None: nothing to report.
    ``check_warnings(settings, rulebook)`` is what ``run.py check`` adds to its warnings
    ("file:line: …") — things only the extension can judge, such as MCP tool names, known
    once the servers have listed them.
    """

    name: str
    executors: Callable[[Settings], Iterable[ExecutorSpec]] = _no_executors
    rule_keys: Mapping[str, RuleKey] = field(default_factory=dict)
    step_keys: Mapping[str, StepKey] = field(default_factory=dict)
    commands: tuple[Command, ...] = ()
    config: ConfigSection | None = None
    lifespan: Callable[[Services], contextlib.AbstractAsyncContextManager[Any]] = _no_lifespan
    serving: Callable[[Services], contextlib.AbstractAsyncContextManager[Any]] = _no_lifespan
    routes: Callable[[Services], Iterable[Route]] = _no_routes
    health: Callable[[Services], tuple[dict[str, Any], bool] | None] = _no_health
    check_warnings: Callable[[Settings, Any], Awaitable[list[str]]] = _no_warnings
    doc: str = ""

    def __post_init__(self) -> None:
        # frozen means frozen: a caller's dict must not change the extension afterwards
        object.__setattr__(self, "rule_keys", MappingProxyType(dict(self.rule_keys)))
        object.__setattr__(self, "step_keys", MappingProxyType(dict(self.step_keys)))
        object.__setattr__(self, "commands", tuple(self.commands))


def extension_routes(extensions: Iterable[Extension], services: Services) -> list[Route]:
    """The routes every extension mounts on the listener, in the extensions' order."""
    return [route for extension in extensions for route in extension.routes(services)]


def add_health(
    report: dict[str, Any], extensions: Iterable[Extension], services: Services
) -> dict[str, Any]:
    """``report`` with each extension's part of ``/healthz`` under its name; one that says it
    is unhealthy makes an ``ok`` report ``degraded`` (an MCP server down, as an adapter)."""
    for extension in extensions:
        part = extension.health(services)
        if part is None:
            continue
        report[extension.name], healthy = part
        if not healthy and report["status"] == "ok":
            report["status"] = "degraded"
    return report


def installed_extensions() -> tuple[Extension, ...]:
    """The extensions installed packages declare under ``tmy.extensions``, by name.

    An entry point names an :class:`Extension` or a callable returning one; one that
    fails to load is a ConfigError naming the package, not a silent omission.
    """
    found: list[Extension] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            obj = point.load()
        except Exception as exc:
            raise ConfigError(
                f"extension {point.name!r} ({point.value}) failed to load: {exc}"
            ) from exc
        if callable(obj) and not isinstance(obj, Extension):
            obj = obj()
        if not isinstance(obj, Extension):
            raise ConfigError(
                f"extension {point.name!r} ({point.value}) is a {type(obj).__name__}, "
                "not a tmy.Extension"
            )
        found.append(obj)
    return tuple(found)


def check_unique(extensions: Iterable[Extension]) -> None:
    """Two extensions may not claim the same name, rule key, step key, command or section."""
    seen: dict[tuple[str, str], str] = {}
    for ext in extensions:
        claims = [("extension", ext.name)]
        claims += [("rule key", k) for k in ext.rule_keys]
        claims += [("step key", k) for k in ext.step_keys]
        claims += [("command", c.name) for c in ext.commands]
        if ext.config is not None:
            claims.append(("config section", ext.config.key))
        for claim in claims:
            if claim in seen:
                raise ConfigError(
                    f"{claim[0]} {claim[1]!r} is claimed by both {seen[claim]!r} and {ext.name!r}"
                )
            seen[claim] = ext.name
