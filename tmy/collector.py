"""The cyclic garbage collector's settings for a serving app (CPython 3.11's generations).

The rulebook lives as long as the daemon: :func:`settle` freezes it out of the
collector's sight (loading frees its garbage by refcount). The freeze empties the oldest
generation, so CPython's hold-back of full collections lapses: one is kept per
:data:`FULL_EVERY` middle ones, not 10 (~30% of an LLM call walked every in-flight run).

The young and middle thresholds stay CPython's (700, 10). Raising the young one to
20,000–100,000 cut the instructions of an LLM call by 85,000–146,000
(``bench/llm_callgrind.py``) and of a QQ message at 100,000 rules by 12,000, and the
in-process LLM call's CPU by ~20% — but the daemon over HTTP spent ~35% more CPU per
call with 1,000 requests in flight (``bench/llm_fanout.py``, four runs side by side: each
young collection walked tens of thousands of live objects of requests in flight, out of
the CPU's caches). Not kept.
"""

from __future__ import annotations

import gc

FULL_EVERY = 100  # middle collections per full one (CPython's: 10)


def settle() -> None:
    """Freeze what exists now (the loaded app) and keep full collections rare."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)
