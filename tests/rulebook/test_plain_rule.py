"""A rule of only ``id``, ``triggers`` and plain steps is compiled without the general
checks (none can fail or change it): it must be the very Rule the general path builds,
with or without variables declared, and its errors must be the general path's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.errors import RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rule, Step
from tmy.rulebook.rules import RuleCompiler
from tmy.rulebook.triggers import Trigger

RULE_FIELDS = [f for f in Rule.__dataclass_fields__ if f not in ("triggers", "steps")]
STEP_FIELDS = [f for f in Step.__dataclass_fields__ if f != "meter"]
TRIGGER_FIELDS = list(Trigger.__dataclass_fields__)
VARIABLES = "variables:\n  count: {scope: user, default: 0}\n"


def compiled(rule: str, extra: str, variables: str) -> tuple[object, ...] | str:
    """Every field of the rule ``rule`` (YAML lines under ``- ``) with ``extra`` keys added
    (a no-op default forces the general path), or its errors."""
    text = f"{variables}rules:\n  - {rule}{extra}\n"
    try:
        rulebook = load_sources([(Path("p.yaml"), text)], default_registry())
    except RuleErrors as exc:
        return "\n".join(str(e) for e in exc.errors)
    got = rulebook.rules[0]
    return (
        {f: getattr(got, f) for f in RULE_FIELDS},
        [{f: getattr(t, f) for f in TRIGGER_FIELDS} for t in got.triggers],
        [{f: getattr(s, f) for f in STEP_FIELDS} for s in got.steps],
    )


PLAIN = (
    "id: r1\n    triggers: ['kw1*']",
    "id: r1\n    triggers: [a, 'b*'",
    "id: r1\n    triggers: []",
)


@pytest.mark.parametrize("variables", ["", VARIABLES])
@pytest.mark.parametrize(
    "rule",
    [
        "id: r1\n    triggers: ['kw1*']\n    steps:\n      - plugin: ADJUST\n        input: ok",
        "id: r1\n    triggers: [a, 'b*', '*c', '*d*', 're:^x(?P<w>\\w+)$']\n"
        "    steps:\n      - {plugin: ADJUST, input: one}\n      - {plugin: ADJUST, input: two}",
        "id: r1\n    triggers: []\n    steps:\n      - {plugin: ADJUST, input: ok}",
        "id: r1\n    triggers: ['Hello World']\n    steps:\n      - {plugin: ECHO, input: x}",
        "id: r1\n    triggers: [kw]\n    steps:\n      - {plugin: ADJUST, input: '{count}'}",
        "id: r1\n    triggers: ['re:(']\n    steps:\n      - {plugin: ADJUST, input: ok}",
        "id: r1\n    triggers: [5]\n    steps:\n      - {plugin: ADJUST, input: ok}",
        "id: r1\n    triggers: kw\n    steps:\n      - {plugin: ADJUST, input: ok}",
        "id: 'r 1'\n    triggers: [kw]\n    steps:\n      - {plugin: ADJUST, input: ok}",
        "id: 12\n    triggers: [kw]\n    steps:\n      - {plugin: ADJUST, input: ok}",
        "id: r1\n    triggers: [kw]\n    steps: []",
        "id: r1\n    triggers: [kw]\n    steps:\n      - {plugin: NOPE, input: ok}",
        "id: r1\n    triggers: [kw]\n    steps:\n      - just text",
    ],
)
def test_a_plain_rule_is_what_the_general_path_builds(
    rule: str, variables: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []
    plain_rule = RuleCompiler.plain_rule

    def counted(self: RuleCompiler, raw: object, file: str) -> object:
        built.append(plain_rule(self, raw, file))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(RuleCompiler, "plain_rule", counted)
    plain = compiled(rule, "", variables)
    took_plain = any(r is not None for r in built)
    general = compiled(rule, "\n    priority: 0", variables)
    if isinstance(general, str):
        assert isinstance(plain, str)
        assert plain == general
    else:
        assert plain == general
    if rule.startswith(PLAIN):  # the first three: no key, trigger or step it cannot build
        assert took_plain
