"""The random functions of ``?=`` expressions: ``random()``, ``randint``, ``choice``, ``sample``,
``shuffled``.

Every draw comes from :func:`tmy.values.randomness.current` (the system generator
in the daemon, ``random.Random(seed)`` under a rule test's ``seed:``) and is
told to :func:`tmy.values.randomness.note`, so ``explain`` can show what was
drawn. None of them changes its argument: ``shuffled`` returns a new list.
Misuse (an empty ``choice``, ``sample`` of more than there is) is an
ExpressionError that says what to write instead.
"""

from __future__ import annotations

import reprlib
from typing import Any

from tmy.errors import ExpressionError
from tmy.values import randomness

_BRIEF = 60  # characters of an argument shown in a draw's description
_SHORT = reprlib.Repr()  # bounded work whatever the argument's size
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 2, 6, 6, 4
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 40


def _brief(value: Any) -> str:
    """An argument as a draw's description shows it: short, or what it is.

    Never a full ``repr``: a draw from a stored list of 800,000 members must cost
    what the draw costs, not a walk of the list the cost model never charged.
    """
    if isinstance(value, (list, tuple)) and len(value) > _SHORT.maxlist:
        return f"<a list of {len(value)}>"
    if isinstance(value, str) and len(value) > _BRIEF:
        return f"<a text of {len(value)} characters>"
    text = _SHORT.repr(value)
    return text if len(text) <= _BRIEF else f"<a {type(value).__name__}>"


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExpressionError(f"{what} must be a whole number, got {_brief(value)}")
    return value


def _sequence(value: Any, fn: str) -> list[Any] | tuple[Any, ...] | str:
    """A list, tuple or text to draw from; a map or set is refused with the fix."""
    if isinstance(value, (list, tuple, str)):
        return value
    if isinstance(value, dict):
        raise ExpressionError(
            f"{fn}() takes a list, got a map: draw from list(m) (its keys) or list(m.values())"
        )
    if isinstance(value, (set, frozenset)):
        raise ExpressionError(f"{fn}() takes a list, got a set: draw from sorted(s)")
    raise ExpressionError(f"{fn}() takes a list (or a text), got {type(value).__name__}")


def random_() -> float:
    """``random()``: a float in [0, 1)."""
    value = randomness.current().random()
    randomness.note("random()", value)
    return value


def randint(a: Any, b: Any) -> int:
    """``randint(a, b)``: a whole number from a to b, both included."""
    low, high = _integer(a, "randint()'s first bound"), _integer(b, "randint()'s second bound")
    if low > high:
        raise ExpressionError(f"randint({low}, {high}): the first bound must not exceed the second")
    value = randomness.current().randint(low, high)
    randomness.note(lambda: f"randint({low}, {high})", value)
    return value


def choice(seq: Any) -> Any:
    """``choice(seq)``: one member, each equally likely; the list is not changed."""
    members = _sequence(seq, "choice")
    if not members:
        raise ExpressionError(
            "choice() of an empty list: check it first, e.g. choice(xs) if xs else 'none left'"
        )
    value = randomness.current().choice(members)
    randomness.note(lambda: f"choice({_brief(seq)})", value)
    return value


def sample(seq: Any, k: Any) -> list[Any]:
    """``sample(seq, k)``: k different members (by position), in the order drawn."""
    members = _sequence(seq, "sample")
    count = _integer(k, "sample()'s count")
    if not 0 <= count <= len(members):
        raise ExpressionError(
            f"sample() of {count} from {len(members)} members: the count must be between 0"
            " and the list's length (use min(k, len(xs)) to take what there is)"
        )
    value = randomness.current().sample(list(members), count)
    randomness.note(lambda: f"sample({_brief(seq)}, {count})", value)
    return value


def shuffled(seq: Any) -> list[Any]:
    """``shuffled(seq)``: a new list with the members in random order."""
    value = list(_sequence(seq, "shuffled"))
    randomness.current().shuffle(value)
    randomness.note(lambda: f"shuffled({_brief(seq)})", value)
    return value
