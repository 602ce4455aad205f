"""The index's direct best-hit path (``Side.best``, no filters) picks exactly what the
general path (every candidate collected, sorted, the first admitted) picks."""

from __future__ import annotations

import random
from typing import Any

from tmy.rulebook.index import TriggerIndex
from tmy.rulebook.triggers import parse_trigger

WORDS = ("a", "ab", "abc", "kw", "kw1", "kw12", "kw123", "hi", "hi there")


class _Rule:
    def __init__(self, rid: str, priority: int, triggers: tuple[Any, ...]) -> None:
        self.id, self.priority, self.triggers = rid, priority, triggers


def _rules(rng: random.Random, n: int) -> list[_Rule]:
    rules = []
    for i in range(n):
        word = rng.choice(WORDS)
        shape = rng.choice(("{}", "{}*", "{} *", "{}*"))
        trig = parse_trigger(shape.format(word), case_sensitive=False)
        rules.append(_Rule(f"r{i}", rng.choice((0, 0, 0, 1, -1)), (trig,)))
    return rules


def _texts() -> list[str]:
    texts = [*WORDS, *(w + " x" for w in WORDS), *(w + "x y" for w in WORDS)]
    return [*texts, "", "  KW12 Hello ", "kw1234", "hi", "hi  there you", "zzz"]


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return (a.rule, a.trigger, a.magic, a.question, a.groups) == (
        b.rule,
        b.trigger,
        b.magic,
        b.question,
        b.groups,
    )


def test_best_hit_agrees_with_the_sorted_candidates() -> None:
    rng = random.Random(24)
    for _ in range(300):
        index = TriggerIndex(_rules(rng, rng.randint(1, 12)))
        assert index.folded.plain
        for text in _texts():
            direct = index.match(text)  # admits None: Side.best
            general = index.match(text, lambda rule: True)  # collect, sort, admit
            assert _same(direct, general), (text, direct, general)


def test_a_higher_priority_shorter_prefix_still_wins() -> None:
    rules = [
        _Rule("long", 0, (parse_trigger("kw9999*", case_sensitive=False),)),
        _Rule("short", 1, (parse_trigger("kw9*", case_sensitive=False),)),
    ]
    match = TriggerIndex(rules).match("kw9999 hello")
    assert match is not None and match.rule.id == "short" and match.question == "999 hello"
