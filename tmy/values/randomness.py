"""Where every random draw of a run comes from: one generator per context, seedable for tests.

A daemon draws from the operating system's generator (:class:`random.SystemRandom`):
a lottery must not be predictable from earlier draws. A rule test pins the
draws with ``seed: 42`` (:func:`seeded`), so the same seed gives the same
draws every run. The generator lives in a context variable, so a seeded test
case does not change what concurrent runs elsewhere in the process draw, and
asyncio tasks started inside the case inherit it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SYSTEM = random.SystemRandom()
_current: ContextVar[random.Random] = ContextVar("tmy_random", default=_SYSTEM)


def current() -> random.Random:
    """The generator draws in this context come from."""
    return _current.get()


@contextmanager
def seeded(seed: int | str | None) -> Iterator[random.Random]:
    """Draw from ``random.Random(seed)`` inside the block (``None``: the system generator)."""
    rng = _SYSTEM if seed is None else random.Random(seed)
    token = _current.set(rng)
    try:
        yield rng
    finally:
        _current.reset(token)
