"""The cyclic garbage collector's settings for a serving app (CPython 3.11's generations).

The rulebook lives as long as the daemon: :func:`settle` freezes it out of the
collector's sight (loading frees its garbage by refcount). The freeze empties the oldest
generation, so CPython's hold-back of full collections lapses: one is kept per
:data:`FULL_EVERY` middle ones, not 10 (~30% of an LLM call walked every in-flight run;
one per 1,000 young collections, as 10 × 100 had it before the young threshold rose).
A young collection waits for :data:`YOUNG_GC` more live objects than died, not 700: hundreds of
runs in flight crossed 700 all the time, each collection walking and promoting objects
of runs about to end. Objects freed by refcount — nearly all of a run's — never reach a
collection; cyclic garbage waits for at most that many tracked objects (and what they
hold: an exception's frames, a response body). A middle collection comes after
:data:`MIDDLE_EVERY` young ones, so it walks at most the survivors of two (on these
machines a young collection of 150,000 objects took 4.8 ms, a middle one of 1,000,000
97 ms): a longer hold-back would let a growing cache — 100,000 rules' plans made at
their first hits — pile up for one long pause. The settings are CPython 3.11's three
generations; a newer interpreter's collector may read them otherwise (not measured).

Measured (2 cores, AMD EPYC VM): ``bench/llm_callgrind.py``, an LLM call 1,775,000 →
1,614,000 instructions (raw aiohttp in the same process 994,000 → 942,000: it gains too);
``bench/onebot_path.py --callgrind``, a QQ message 245,000 → 239,000 at 1 rule and
275,000 → 263,000 at 100,000 — with full collections five times as often (one per 100
middle ones) the QQ message cost 246,600 and 274,900 again.
"""

from __future__ import annotations

import gc

YOUNG_GC = 50_000  # the young generation's threshold once the app is up (CPython's: 700)
MIDDLE_EVERY = 2  # young collections per middle one (CPython's: 10)
FULL_EVERY = 500  # middle collections per full one (CPython's: 10); one per 1,000 young


def settle() -> None:
    """Freeze what exists now (the loaded app) and set the serving thresholds."""
    gc.freeze()
    gc.set_threshold(YOUNG_GC, MIDDLE_EVERY, FULL_EVERY)
