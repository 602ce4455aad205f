"""The registry: executors plus what extensions install (rule keys, step keys, hooks)."""

from __future__ import annotations

from typing import Any

import pytest

from tmy.errors import ConfigError
from tmy.executors import default_registry
from tmy.executors.registry import ExecutorSpec, Registry
from tmy.extension import Extension, RuleKey, StepKey
from tmy.types import StepHook


async def _echo(value: Any, cfg: dict[str, Any], ctx: Any) -> Any:
    return value


class _Before(StepHook):
    async def before(self, run: Any, step: Any, record: Any) -> bool:
        return False


class _Again(StepHook):
    async def again(self, run: Any, step: Any, record: Any, count: int) -> bool:
        return count < 3


class _OnlyBefore:  # not a StepHook: lacks again()
    async def before(self, run: Any, step: Any, record: Any) -> bool:
        return False


def _weather(settings: Any) -> list[ExecutorSpec]:
    return [ExecutorSpec("WEATHER", _echo, doc=f"city {settings}")]


WEATHER = Extension(
    name="weather",
    executors=_weather,
    rule_keys={"forecast": RuleKey(str, locals=lambda _v: ("CITY",))},
    step_keys={
        "when_sunny": StepKey(bool, _Before()),
        "while_rainy": StepKey(bool, _Again()),
        "max_drops": StepKey(int),
    },
)


def test_default_registry_is_adjust_and_http_only() -> None:
    registry = default_registry()
    assert registry.names() == ["ADJUST", "HTTP"]
    assert dict(registry.rule_keys) == {} and dict(registry.step_hooks) == {}


def test_install_adds_executors_keys_and_hooks() -> None:
    registry = default_registry([WEATHER], settings="Paris")
    assert registry.get("WEATHER").doc == "city Paris"
    assert set(registry.rule_keys) == {"forecast"}
    assert set(registry.step_keys) == {"when_sunny", "while_rainy", "max_drops"}
    assert set(registry.step_hooks) == {"when_sunny", "while_rainy"}
    assert registry.extensions == ("weather",)


def test_views_are_read_only() -> None:
    registry = default_registry([WEATHER])
    with pytest.raises(TypeError):
        registry.rule_keys["x"] = RuleKey(str)  # type: ignore[index]
    with pytest.raises(TypeError):
        registry.step_hooks["x"] = _Before()  # type: ignore[index]


def test_clashes_are_config_errors_naming_both() -> None:
    registry = default_registry([WEATHER])
    twin = Extension(name="twin", rule_keys={"forecast": RuleKey(str)})
    with pytest.raises(ConfigError, match="'forecast' is already added by 'weather'"):
        registry.install(twin, None)
    assert "twin" not in registry.extensions
    http = Extension(name="http2", executors=lambda s: [ExecutorSpec("HTTP", _echo)])
    with pytest.raises(ConfigError, match="executor 'HTTP' is already added by 'the built-ins'"):
        registry.install(http, None)


def test_a_failed_install_changes_nothing() -> None:
    registry = Registry()
    half = Extension(
        name="half",
        executors=lambda s: [ExecutorSpec("HALF", _echo)],
        step_keys={"k": StepKey(int)},
        rule_keys={"r": RuleKey(str)},
    )
    registry.install(Extension(name="first", step_keys={"k": StepKey(int)}), None)
    with pytest.raises(ConfigError):
        registry.install(half, None)
    assert "HALF" not in registry and "r" not in registry.rule_keys


def test_executors_must_be_specs() -> None:
    bad = Extension(name="bad", executors=lambda s: [_echo])
    with pytest.raises(ConfigError, match="ExecutorSpec"):
        Registry().install(bad, None)


def test_a_refused_install_can_be_retried_without_its_clash() -> None:
    registry = Registry()
    registry.install(Extension(name="first", step_keys={"k": StepKey(int)}), None)
    with pytest.raises(ConfigError):
        registry.install(
            Extension(name="x", rule_keys={"r": RuleKey(str)}, step_keys={"k": StepKey(int)}), None
        )
    registry.install(Extension(name="y", rule_keys={"r": RuleKey(str)}), None)
    assert registry.extensions == ("first", "y")


async def test_a_hook_overrides_one_method_and_inherits_the_other() -> None:
    assert await _Before().again(None, None, None, 1) is False
    assert await _Again().before(None, None, None) is True


def test_a_hook_without_both_methods_is_refused() -> None:
    odd = Extension(name="odd", step_keys={"k": StepKey(bool, _OnlyBefore())})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"subclass tmy\.StepHook"):
        Registry().install(odd, None)
