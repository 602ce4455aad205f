"""Giving back the heap a big rules load freed.

Loading 100,000 rules frees a lot as it goes: each raw rule once compiled, and
the dicts and lists the loader outgrows (a dict of 100,000 ids was a dict of
50,000 first). glibc keeps most of that freed memory mapped, so the daemon's RSS
would count it for as long as it runs.
"""

from __future__ import annotations

TRIM_AFTER = 10_000  # rules: a load this big gives the heap it freed back


def give_back_freed_heap() -> None:
    """Hand the heap pages a big load freed (its raw rules, the dicts and lists it outgrew)
    back to the OS: glibc keeps them otherwise, and the daemon's RSS would count them for
    as long as it runs (about 60 bytes per rule). A no-op where there is no glibc."""
    import ctypes  # stdlib, not tmy: only a load this big pays for importing it

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to do
        return
    trim(0)
