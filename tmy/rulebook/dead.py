"""Triggers that can never fire, for ``check``'s warnings (asked once, never per message)."""

from __future__ import annotations

from typing import Any

from tmy.rulebook.triggers import Trigger


def dead_triggers(sides: tuple[Any, Any]) -> list[tuple[Any, Trigger, Any, Trigger]]:
    """Triggers that can never fire: another rule's trigger wins on every text they match.

    ``sides``: the index's case-folded and case-sensitive :class:`~tmy.rulebook.index.Side`.
    Returns ``(rule, trigger, winning_rule, winning_trigger)``. Regex triggers
    are not analysed; a winner only counts when its rule's filters admit every
    message the loser's rule admits (no filters, or the same ones).
    """
    covers = {
        "exact": None,
        "prefix": frozenset({"prefix", "contains", "any"}),
        "suffix": frozenset({"suffix", "contains", "any"}),
        "contains": frozenset({"contains", "any"}),
        "any": frozenset({"any"}),
    }
    dead = []
    for side in sides:
        entries = {
            id(e[2]): e
            for group in (side.exact, side.prefix, side.suffix, side.contains)
            for lst in group.values()
            for e in lst
        }
        for key, rule, trig in [*entries.values(), *side.any]:
            for (ukey, urule, utrig), _, _ in side.candidates(
                trig.literal, trig.literal, covers[trig.kind]
            ):
                if urule is rule or ukey >= key:
                    continue
                if urule.filters.is_open or urule.filters == rule.filters:
                    dead.append((rule, trig, urule, utrig))
                    break
    return dead
