"""Explaining a platform event: which rule takes it (or why none), by the engine's own rules.

An event matches no trigger: the engine walks the rules listing its kind under
``events:`` in rulebook order and runs the first whose filters admit it
(:func:`tmy.engine.events.event_rule`). Here every listening rule becomes a
candidate row, the winner marked and each other one given its reason (refused
by a filter, or later in rulebook order); then the chat switch and the
cooldown may still block the run, as for a message.
"""

from __future__ import annotations

from typing import Any

from tmy.engine.core import Engine
from tmy.engine.events import unhandled_reason
from tmy.explain.model import Explanation
from tmy.message import Message
from tmy.rulebook.triggers import Match


def analyse_event(engine: Engine, rulebook: Any, message: Message, ex: Explanation) -> Match | None:
    """Fill ``ex`` with the rules listening for ``message``'s event; the match the engine
    would run, or None (``ex.reason`` says why)."""
    event = message.event
    assert event is not None
    ex.event = {"kind": event.kind, "raw": event.raw, "data": dict(event.data)}
    winner = None
    for order, rule in enumerate(rulebook.events.get(event.kind, ())):
        refused = rule.filters.refusal(message, event=True)
        if refused is None and winner is None:
            winner = rule
            why = (
                f"the first rule in rulebook order listing {event.kind} "
                "whose filters admit the event"
            )
        elif refused is not None:
            why = f"refused: {refused}"
        else:
            assert winner is not None
            why = (
                f"later in rulebook order ({rule.file}:{rule.line} comes after "
                f"{winner.file}:{winner.line})"
            )
        ex.candidates.append(
            {
                "rule": rule.id,
                "trigger": f"<event {event.kind}>",
                "kind": "event",
                "priority": rule.priority,
                "literal_length": 0,
                "file": rule.file,
                "line": rule.line,
                "order": order,
                "MAGIC": "",
                "QUESTION": "",
                "won": rule is winner,
                "refused": refused,
                "why": why,
            }
        )
    if winner is None:
        ex.reason = unhandled_reason(rulebook, message)
        return None
    ex.via, ex.trigger = "event", None
    return Match(winner, None, "", "")
