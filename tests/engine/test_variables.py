"""tmy.engine.variables: writes of an atomic span are buffered, and only the span's own.

A run holding an atomic span keeps its writes to the span's variables until the
span ends (one fenced commit). A write to another locked variable made inside
the span (a plugin's ``ctx.set``) takes that variable's lock for that write
alone, so it must reach the store before that lock is given back — buffered
until the span's end it would land after another run had taken the lock and
written, and overwrite that run's write.
"""

from __future__ import annotations

import asyncio

from tmy.engine.variables import Variables
from tmy.message import Message
from tmy.rulebook.model import VariableDecl
from tmy.store import Store
from tmy.values.paths import parse_path

DECLARED = {n: VariableDecl(n, "global", 0, "t.yaml", 1) for n in ("x", "y")}
LOCKED = frozenset(DECLARED)


def _run(store: Store) -> Variables:
    return Variables({}, DECLARED, store, Message("hi", user="u", platform="test"), LOCKED)


async def test_a_write_to_a_variable_outside_the_span_is_not_held_back(store: Store) -> None:
    a = _run(store)
    async with a.holding(["y"]), a.buffering(["y"]):
        await a.write(parse_path("y"), 5)  # the span's own: buffered
        await a.write(parse_path("x"), 1)  # locked for this write only: committed now
        assert a.pending == {"y": 5}
        assert await store.get(a.key("y")) != 5
        b = _run(store)
        async with asyncio.timeout(10), b.holding(["x"]):
            await b.write(parse_path("x"), 100)  # another run, fenced by x's own lease
        await a.flush(["y"])
    assert await store.get(a.key("x")) == 100  # B's write stands
    assert await store.get(a.key("y")) == 5
