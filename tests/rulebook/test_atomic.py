"""The atomic analysis of compiled steps (tmy/rulebook/atomic.py), on rules the real loader read.

Which declared variables a step reads and writes, which it holds locked
(read-modify-write), which a rule holds across steps (its span), what a run
prefetches, which steps become one compare-and-set update, and what a
scheduled rule's run holds.
"""

from __future__ import annotations

from pathlib import Path

import tmy.cron
from tmy.executors import default_registry
from tmy.rulebook import atomic
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook

VARIABLES = """
variables:
  hits: {default: 0}
  points: {default: 0}
  stamp: {default: ""}
  deck: {default: [a, b]}
  names: {default: {}}
"""


def load(rules: str) -> Rulebook:
    registry = default_registry([tmy.cron.EXTENSION])
    return load_sources([(Path("r.yaml"), VARIABLES + "rules:\n" + rules)], registry)


DECLARED = {"hits", "points", "stamp", "deck", "names"}


def test_access_reads_and_writes_of_a_step() -> None:
    book = load("""
  - id: r
    triggers: [r]
    steps:
      - {plugin: ADJUST, input: "?= hits + points", save: "names[{stamp}]"}
      - {plugin: ADJUST, input: SHIFT, INPUT: deck}
""")
    first, second = book.rules[0].steps
    assert atomic.access(first, DECLARED) == ({"hits", "points", "stamp"}, {"names"})
    assert atomic.access(second, DECLARED) == ({"deck"}, {"deck"})


def test_a_read_then_save_of_one_variable_is_locked_or_one_atomic_update() -> None:
    book = load("""
  - id: pure
    triggers: [pure]
    steps: [{plugin: ADJUST, input: "?= hits + 1", save: hits}]
  - id: blind
    triggers: [blind]
    steps: [{plugin: ADJUST, input: "0", save: points}]
""")
    (pure,) = book.by_id["pure"].steps
    assert pure.lock_roots == ("hits",) and pure.atomic_update  # nothing else locks hits
    assert "hits" not in book.locked_variables
    (blind,) = book.by_id["blind"].steps
    assert blind.lock_roots == () and not blind.atomic_update  # a write without a read


def test_a_computed_save_position_locks_every_variable_it_reads() -> None:
    assert atomic.lock_roots(None, {"hits"}, False, DECLARED) == ()
    book = load("""
  - id: any
    triggers: [any]
    steps: [{plugin: ADJUST, input: "?= points + hits", save: "?= 'points'"}]
""")
    assert book.rules[0].steps[0].lock_roots == ("hits", "points")


def test_a_span_holds_from_the_first_read_to_the_last_write() -> None:
    book = load("""
  - id: checkin
    triggers: [checkin]
    steps:
      - {plugin: ADJUST, input: "hi"}
      - {plugin: ADJUST, input: "x", stop: "?= stamp == NOW"}
      - {plugin: ADJUST, input: "?= points + 1", save: points}
      - {plugin: ADJUST, input: "{NOW}", save: stamp}
      - {plugin: ADJUST, input: "done"}
""")
    rule = book.rules[0]
    assert rule.atomic_vars == ("points", "stamp") and rule.atomic_span == (1, 3)
    assert atomic.atomic_span(rule.steps[:1], DECLARED) == ((), (0, -1))
    # held in a span: no atomic update, and locked for every other writer
    assert not rule.steps[2].atomic_update
    assert {"points", "stamp"} <= book.locked_variables
    opted_out = load(
        """
  - id: loose
    triggers: [loose]
    atomic: false
    steps:
      - {plugin: ADJUST, input: "x", stop: "?= stamp == NOW"}
      - {plugin: ADJUST, input: "{NOW}", save: stamp}
"""
    )
    assert opted_out.rules[0].atomic_vars == ()


def test_prefetch_skips_what_is_locked_and_lists_taken_by_a_constant_mode() -> None:
    book = load("""
  - id: r
    triggers: [r]
    steps:
      - {plugin: ADJUST, input: "{stamp} {hits}"}
      - {plugin: ADJUST, input: LOOPBACK, INPUT: deck}
      - {plugin: ADJUST, input: "?= points + 1", save: points}
""")
    rule = book.rules[0]
    assert rule.prefetch == ("hits", "stamp")  # not deck (taken in one update), not points


def test_a_scheduled_rule_holds_what_it_writes_and_keeps_others_locked() -> None:
    book = load("""
  - id: tick
    triggers: [tick]
    schedule: {every: 60s}
    steps:
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
      - {plugin: ADJUST, input: "{FIRE_TIME}", save: stamp}
  - id: hit
    triggers: [hit]
    steps: [{plugin: ADJUST, input: "?= hits + 1", save: hits}]
""")
    assert book.by_id["tick"].scheduled_locks == ("hits", "stamp")
    assert atomic.written(book.by_id["tick"].steps, DECLARED) == ("hits", "stamp")
    # a scheduled run holds hits across its run: the chat rule must lock it too
    assert not book.by_id["hit"].steps[0].atomic_update
    assert "hits" in book.locked_variables
