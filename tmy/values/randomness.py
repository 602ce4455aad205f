"""Where every random draw of a run comes from: one generator per context, seedable for tests.

A daemon draws from the operating system's generator (:class:`random.SystemRandom`):
a lottery must not be predictable from earlier draws. A rule test pins the
draws with ``seed: 42`` (:func:`seeded`), so the same seed gives the same
draws every run. The generator lives in a context variable, so a seeded test
case does not change what concurrent runs elsewhere in the process draw, and
asyncio tasks started inside the case inherit it.

Every draw is also told to :func:`note` (what was called, what came out):
``explain`` listens with :func:`recording` to show "drew: 3 from randint(1, 6)"
under the step that drew it. Outside a recording, noting costs one lookup.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

Listener = Callable[[str, Any], None]
_INT_RE = re.compile(r"-?\d+")
_MAX_DIGITS = 4000

_SYSTEM = random.SystemRandom()
_current: ContextVar[random.Random] = ContextVar("tmy_random", default=_SYSTEM)
_listener: ContextVar[Listener | None] = ContextVar("tmy_random_listener", default=None)


def current() -> random.Random:
    """The generator draws in this context come from."""
    return _current.get()


def normal_seed(seed: int | str) -> int | str:
    """``"42"`` and ``42`` are one seed: ``explain --seed 42`` (text) draws what a rule
    test's ``seed: 42`` (a YAML number) draws. Other texts seed as themselves."""
    text = seed.strip() if isinstance(seed, str) else ""
    # past Python's int/str conversion limit (4,300 digits) a number text seeds as a text
    if _INT_RE.fullmatch(text) and len(text) <= _MAX_DIGITS:
        return int(text)
    return seed


@contextmanager
def seeded(seed: int | str | None) -> Iterator[random.Random]:
    """Draw from ``random.Random(seed)`` inside the block (``None``: the system generator)."""
    rng = _SYSTEM if seed is None else random.Random(normal_seed(seed))
    token = _current.set(rng)
    try:
        yield rng
    finally:
        _current.reset(token)


def note(call: str | Callable[[], str], value: Any) -> None:
    """Tell the listening :func:`recording` (if any) that ``call`` drew ``value``.

    Every draw a rule can make says so here: the expression functions
    (``randint(1, 6)``) and the ``input: PICK`` list mode (``PICK prizes``).
    ``call`` may be a function making the description, so a run nobody explains
    does not pay for describing its draws.
    """
    listener = _listener.get()
    if listener is not None:
        listener(call() if callable(call) else call, value)


@contextmanager
def recording(listener: Listener) -> Iterator[None]:
    """Inside the block, every :func:`note` in this context calls ``listener(call, value)``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
