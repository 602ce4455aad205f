"""Rule and step keys come from the registry the loader is given (tmy/rulebook/rules.py, steps.py).

An extension installed in a real Registry adds a rule key (validated with
file:line, with run locals its rules' steps may read) and step keys (one with a
hook, one without); a registry without it refuses the same keys as unknown,
naming what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tmy.errors import RuleErrors
from tmy.executors import default_registry
from tmy.extension import Extension, RuleKey, StepKey
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook
from tmy.types import StepHook


def _deadline(raw: Any) -> int:
    if not isinstance(raw, int) or raw <= 0:
        raise ValueError(f"a number of minutes > 0, got {raw!r}")
    return raw


class Audit(StepHook):
    async def before(self, run: Any, step: Any, record: Any) -> bool:
        return True


AUDIT = Audit()
EXTENSION = Extension(
    name="deadlines",
    rule_keys={"deadline": RuleKey(_deadline, locals=lambda minutes: ("DUE", "MINUTES"))},
    step_keys={"audit": StepKey(str, AUDIT), "label": StepKey(str)},
)

RULES = """
rules:
  - id: due
    triggers: [due]
    deadline: 30
    steps:
      - {plugin: ADJUST, input: "{DUE} in {MINUTES}", audit: on-call, label: first}
"""


def load(text: str, *extensions: Extension) -> Rulebook:
    return load_sources([(Path("r.yaml"), text)], default_registry(extensions))


def test_an_installed_rule_key_is_validated_and_gives_its_locals() -> None:
    book = load(RULES, EXTENSION)
    rule = book.by_id["due"]
    assert rule.extras == {"deadline": 30}
    (step,) = rule.steps
    assert step.extras == {"audit": "on-call", "label": "first"}
    assert step.hooks == (("audit", AUDIT),)  # "label" has no hook


def test_without_the_extension_its_keys_are_unknown_with_file_and_line() -> None:
    with pytest.raises(RuleErrors) as err:
        load(RULES)
    text = str(err.value)
    assert "r.yaml:5: unknown rule key 'deadline'" in text
    assert "r.yaml:7: unknown key for plugin ADJUST 'audit'" in text
    assert "'input' reads 'DUE', which is never set" in text


def test_the_allowed_lists_name_the_installed_keys() -> None:
    bad = RULES.replace("deadline: 30", "dedline: 30").replace("label:", "lable:")
    with pytest.raises(RuleErrors) as err:
        load(bad, EXTENSION)
    text = str(err.value)
    assert "unknown rule key 'dedline' (did you mean 'deadline'?)" in text
    assert "allowed: id, triggers" in text and text.count("deadline") >= 2
    assert "unknown key for plugin ADJUST 'lable' (did you mean 'label'?)" in text


def test_a_bad_value_of_an_installed_key_is_a_rule_error_at_its_line() -> None:
    with pytest.raises(RuleErrors) as err:
        load(RULES.replace("deadline: 30", "deadline: -1"), EXTENSION)
    assert "r.yaml:5: rule 'due': deadline: a number of minutes > 0, got -1" in str(err.value)
