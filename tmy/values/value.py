"""A compiled rule value (:class:`Value`), a constant, and how values read as text.

Every value in a rule is compiled once, at load time, into a :class:`Value`
that knows which root variable names it reads (``names``) — the engine uses
that to fetch persistent variables before evaluating, and the loader uses it to
report references to variables that can never exist. ``boards`` are the
leaderboards it reads (``top("points", 3)``), fetched the same way.
"""

from __future__ import annotations

import abc
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tmy.errors import EvalError

Scope = Mapping[str, Any]

MAX_TEXT_CHARS = 1_000_000  # characters one template may render


class Value(abc.ABC):
    """A compiled task_cfg value."""

    __slots__ = ()  # a Constant (one or more per rule) then carries no __dict__
    names: frozenset[str] = frozenset()
    boards: frozenset[str] = frozenset()  # leaderboards it reads (top()/rank_of() names)
    constant: bool = False

    @abc.abstractmethod
    def evaluate(self, scope: Scope) -> Any:
        """The value in this run's scope."""


@dataclass(frozen=True, slots=True)
class Constant(Value):
    value: Any
    names: frozenset[str] = frozenset()
    constant: bool = True

    def evaluate(self, scope: Scope) -> Any:
        # a run may change a list it got from a constant (SHIFT on a local list);
        # the rule's own value must stay as written for the next run
        if isinstance(self.value, (list, dict)):
            return copy.deepcopy(self.value)
        return self.value


def clip(text: str, limit: int = 200) -> str:
    """Source text short enough for an error message."""
    return text if len(text) <= limit else text[:limit] + "…"


def render_text(value: Any, where: str, limit: int = MAX_TEXT_CHARS) -> str:
    """:func:`to_text`, refused with an error naming ``where`` past ``limit`` characters."""
    text = to_text(value)
    if len(text) > limit:
        raise EvalError(
            f"{where} renders a text that is too large (more than {limit:,} characters)"
        )
    return text


def to_text(value: Any) -> str:
    """How a value reads in a reply or a template: JSON for containers, '' for None."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (ValueError, TypeError):  # too deep / huge ints, or keys JSON cannot hold
            try:
                return repr(value)
            except ValueError:
                return "<value too large to show>"
    try:
        return str(value)
    except ValueError:  # int beyond the str-digit limit
        return "<number too large to show>"


def truthy(value: Any) -> bool:
    """Truth of a ``when:`` value; the strings '', 0, false, no, none, null are false."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "none", "null")
    return bool(value)
