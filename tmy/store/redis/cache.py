"""The Redis store's guess of each key's current raw value (see :mod:`tmy.store.redis`).

An update sends its compare-and-set against the raw value last seen for the
key, so the steady-state update is one round-trip; a wrong guess costs one
more, never correctness.
"""

from __future__ import annotations


class RawCache:
    """The last raw value seen per Redis key: a guess for the next CAS, bounded.

    A wrong guess costs one extra round-trip, never correctness, so eviction is
    plain first-in-first-out (a key seen again moves to the back).
    """

    def __init__(self, max_keys: int, max_bytes: int = 32 << 20) -> None:
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self._raw: dict[str, bytes] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._raw)

    def get(self, rkey: str) -> bytes | None:
        return self._raw.get(rkey)

    def put(self, rkey: str, raw: bytes | None) -> None:
        old = self._raw.pop(rkey, None)
        if old is not None:
            self._bytes -= len(old)
        if raw is None or len(raw) > self.max_bytes // 16:
            return  # absent is the default guess; huge values are not worth the memory
        self._raw[rkey] = raw
        self._bytes += len(raw)
        while len(self._raw) > self.max_keys or self._bytes > self.max_bytes:
            self._bytes -= len(self._raw.pop(next(iter(self._raw))))
