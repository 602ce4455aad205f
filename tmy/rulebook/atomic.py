"""Atomic analysis: which declared variables a rule's steps read and write, and what to lock.

Run on compiled steps at load time, so the engine knows before any message
arrives which variables a step must hold locked (a read-modify-write), which
a rule must hold across steps (an atomic span), which a run can prefetch in
one round-trip, and which steps can be one compare-and-set store update
instead of a lock. Every function here is a pure function of the steps and
the set of declared variable names.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from tmy.rulebook.model import Rule, Step
from tmy.values.compiled import Constant, PathValue


def access(st: Step, declared: set[str]) -> tuple[set[str], set[str]]:
    """The declared variables a step may read, and those it may write."""
    names: set[str] = set()
    for v in (st.input, st.list_mode, st.when, st.stop, *st.options.values()):
        if v is not None:
            names |= v.names
    if st.INPUT is not None:
        names |= st.INPUT.names
        names |= {st.INPUT.root} if st.INPUT.root else declared
    if st.save is not None:
        names |= st.save.names
    wrote: set[str] = set(st.lock_roots)
    if st.save is not None and st.save.root in declared:
        wrote.add(st.save.root)
    if st.list_mode is not None and st.INPUT is not None:
        wrote |= {st.INPUT.root} if st.INPUT.root else declared
    return names & declared, wrote & declared


def lock_roots(
    save: PathValue | None, reads: set[str], dynamic_input: bool, declared: Collection[str]
) -> tuple[str, ...]:
    """Declared variables a step must hold locked: those it may read and then save.

    A step that reads the variable it saves to is a read-modify-write; holding
    the variable's lock from the read to the write keeps concurrent runs from
    interleaving. A computed save position (``?=``) could be any variable the
    step reads, so all of them are locked (in name order: no deadlocks); a
    computed INPUT position could read any variable at all.
    """
    if save is None:
        return ()
    if save.root is not None:
        if save.root in declared and (save.root in reads or dynamic_input):
            return (save.root,)
        return ()
    candidates = set(declared) if dynamic_input else {name for name in reads if name in declared}
    return tuple(sorted(candidates))


def atomic_span(
    steps: Sequence[Step], declared: set[str]
) -> tuple[tuple[str, ...], tuple[int, int]]:
    """The variables a rule must hold across steps, and from which step to which.

    A declared variable read in one step and written in a later one (the
    check-in pattern: a guard, an increment, a date stamp) is a
    read-modify-write spread over the chain; two concurrent runs could both
    pass the guard. Such variables are held from the first step that reads
    one to the last that writes one. Everything the steps in between lock or
    write joins the set, so the run takes all its locks at once, in name
    order, and never waits for a lock while holding another (no deadlock).
    """
    if not declared:
        return (), (0, -1)
    reads: list[set[str]] = []
    writes: list[set[str]] = []
    for st in steps:
        r, w = access(st, declared)
        reads.append(r)
        writes.append(w)
    first, last, held = len(steps), -1, set()
    for name in declared:
        read_at = [i for i, r in enumerate(reads) if name in r]
        write_at = [i for i, w in enumerate(writes) if name in w]
        if read_at and write_at and read_at[0] < write_at[-1]:
            held.add(name)
            first, last = min(first, read_at[0]), max(last, write_at[-1])
    if not held:
        return (), (0, -1)
    for i in range(first, last + 1):
        held |= writes[i]
    return tuple(sorted(held)), (first, last)


def prefetch(
    steps: Sequence[Step], atomic_vars: Iterable[str], declared: set[str]
) -> tuple[str, ...]:
    """The declared variables a run reads without holding them: fetched in one round-trip.

    A constant list mode takes from its list inside one store update, so its
    list is not prefetched (unless another step reads it anyway).
    """
    if not steps or not declared:
        return ()
    locked = {name for st in steps for name in st.lock_roots} | set(atomic_vars)
    accessed = [access(st, declared)[0] for st in steps]
    reads = set().union(*accessed)
    taken = {
        st.INPUT.root
        for st in steps
        if isinstance(st.list_mode, Constant) and st.INPUT is not None and st.INPUT.root
    }
    untaken = set().union(
        *(r for st, r in zip(steps, accessed, strict=True)
          if not isinstance(st.list_mode, Constant))
    )  # fmt: skip
    reads -= taken - untaken
    return tuple(sorted(reads - locked))


def written(steps: Sequence[Step], declared: set[str]) -> tuple[str, ...]:
    """Every declared variable the steps may write, in name order (a scheduled run's locks)."""
    if not steps:
        return ()
    return tuple(sorted(set().union(*(access(st, declared)[1] for st in steps))))


def atomic_updates(rules: list[Rule], keep: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Mark the steps applied as one atomic store update; return the variables they free.

    A step qualifies when its executor is pure and the only variable it holds
    locked is the one it saves (``input: "?= hits + 1", save: hits``): the read,
    the executor and the write then run inside the store's compare-and-set, and
    a concurrent change makes it recompute instead of waiting for a lock. That
    is safe only if no other step in the rulebook holds that variable's lock
    across I/O (an impure read-modify-write, or a multi-step span): an update
    landing inside such a step's lock would be overwritten. Those variables keep
    the lock everywhere, as do ``keep`` (variables a scheduled run holds locked).
    """
    steps_of: dict[str, list[Step]] = {}
    for r in rules:
        for st in r.steps:
            for name in st.lock_roots:
                steps_of.setdefault(name, []).append(st)
    spans = {name for r in rules for name in r.atomic_vars} | set(keep)
    freed = set()
    for name, steps in steps_of.items():
        if name in spans or not all(_updatable(st, name) for st in steps):
            continue
        for st in steps:
            st.atomic_update = True
        freed.add(name)
    return freed


def _updatable(st: Step, name: str) -> bool:
    return (
        st.spec.pure
        and st.lock_roots == (name,)
        and st.save is not None
        and st.save.root == name
        and name not in st.save.names
        and st.list_mode is None
        and not st.extras
        and (st.when is None or name not in st.when.names)
    )
