"""A step of only ``plugin:`` and a constant ``input:`` is compiled without the general
checks (none can fail for it): it must be the very Step the general path builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.errors import RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Step

FIELDS = [f for f in Step.__dataclass_fields__ if f != "meter"]


def compiled(step: str) -> Step | str:
    """The one step of a rule whose step is ``step`` (YAML flow mapping), or its errors."""
    text = f"rules:\n  - id: r\n    triggers: [t]\n    steps:\n      - {step}\n"
    try:
        rulebook = load_sources([(Path("s.yaml"), text)], default_registry())
    except RuleErrors as exc:
        return "\n".join(str(e) for e in exc.errors)
    return rulebook.rules[0].steps[0]


def fields(step: Step | str) -> object:
    if isinstance(step, str):
        return step
    return {f: same(getattr(step, f)) for f in FIELDS}


def same(value: object) -> object:
    """An expression compares by its source (its parsed tree is a new object each time)."""
    tree = getattr(value, "tree", None)
    return ("expression", value.source) if tree is not None else value  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "plugin_and_input",
    [
        "plugin: ADJUST, input: ok-r1",
        "plugin: ADJUST, input: '~{not a template}'",
        "plugin: ADJUST, input: '{QUESTION}'",  # reads a name: the general path
        "plugin: ADJUST, input: '?= 1 + 1'",
        "plugin: ADJUST, input: SHIFT",  # a list mode without INPUT: an error
        "plugin: ADJUST, input: ''",
        "plugin: ADJUST, input: 'a } b'",
        "plugin: ADJUST, input: '{nope}'",
        "plugin: ADJUSTT, input: x",
        "plugin: HTTP, input: x",  # a required option missing: an error
        "plugin: [ADJUST], input: x",
        "plugin: ADJUST, input: 5",
    ],
)
def test_a_plain_step_is_what_the_general_path_builds(plugin_and_input: str) -> None:
    plain = compiled("{" + plugin_and_input + "}")
    general = compiled("{" + plugin_and_input + ", on_error: stop}")  # the default: no-op
    if isinstance(general, str):
        assert isinstance(plain, str)
        assert plain.replace(":5:", ":X:") == general.replace(":5:", ":X:")
    else:
        assert fields(plain) == fields(general)
