"""What both store backends share: the value codec, argument checks, per-key locks.

Values are stored as UTF-8 JSON made by orjson (fast, non-ASCII kept as is).
Decisions, so that every backend stores exactly the same thing:

* ``dict`` keys that are not strings (int, float, bool, None, enum, UUID) are
  written as strings (``{1: "a"}`` reads back as ``{"1": "a"}``), because the
  engine indexes dicts with numbers taken from templates and JSON only has
  string keys. Two keys that become the same string are both written and the
  last one wins on reading.
* Tuples are written as lists; ``str``/``int``/``dict``/``list`` subclasses as
  their base type; ``Enum`` members as their value and ``UUID`` as its string
  (that is what orjson does natively and none of them loses information a rule
  could see).
* Refused with :class:`~tmy.errors.StoreError` naming the type, before anything
  is written: ``set``, ``bytes``, ``datetime``, dataclasses and any other object
  (they would not read back as what was stored); integers outside 64 bits (they
  would read back as a rounded float); ``NaN`` and ``±Infinity`` (orjson would
  silently write ``null``); strings with lone surrogates; nesting deeper than
  254 levels.
* Values larger than the store's ``max_value_bytes`` encoded
  (``limits.max_value_bytes``, default :data:`MAX_VALUE_BYTES`) are refused: one
  message must not be able to grow a stored list or map without bound, nor
  make every later read of it slow. Each store carries its own limit (given to
  its constructor / :func:`~tmy.store.open_store`) and passes it to
  :func:`encode`; nothing here is set per app.
* The ``MISSING`` marker cannot be stored inside a value; at the top level it
  means "delete" (see the backends' ``set`` and ``update``).

Finding ``NaN`` needs a walk over the value; it is done only when the encoded
text contains ``null`` (orjson writes non-finite floats as ``null``), so the
common write pays nothing for it.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from tmy.errors import StoreError, ValueRefused

_DUMPS_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)

MAX_VALUE_BYTES = 4 * 1024 * 1024
"""The largest encoded value a store accepts unless told otherwise (``limits.max_value_bytes``'s
default); a constant: each store is given its own limit."""

_ALLOWED = "null, bool, int (64-bit), finite float, str, list/tuple and dict"


def _where(key: str) -> str:
    return f" at key {key!r}" if key else ""


def _has_nonfinite(value: Any) -> bool:
    """True when a float NaN/±Infinity hides anywhere inside ``value``."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def encode(value: Any, key: str = "", limit: int = MAX_VALUE_BYTES) -> bytes:
    """``value`` as UTF-8 JSON bytes; StoreError (naming the type) if JSON cannot hold it
    or it is over ``limit`` bytes (the store's ``limits.max_value_bytes``)."""
    try:
        raw = orjson.dumps(value, option=_DUMPS_OPTIONS)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        why = str(exc).replace(": _Missing", ": MISSING (delete the key instead)")
        raise ValueRefused(
            f"cannot store the value{_where(key)}: {why}; a stored value may hold only {_ALLOWED}"
        ) from None
    if b"null" in raw and _has_nonfinite(value):
        raise ValueRefused(
            f"cannot store the value{_where(key)}: it contains NaN or Infinity, "
            "which JSON cannot hold"
        )
    if len(raw) > limit:
        raise ValueRefused(
            f"cannot store the value{_where(key)}: it is {len(raw):,} bytes as JSON "
            f"(limits.max_value_bytes is {limit:,})"
        )
    return raw


def decode(raw: bytes | str, key: str = "") -> Any:
    """The value a stored JSON text stands for; StoreError if the stored text is corrupt."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"corrupt value stored{_where(key)}: {exc}") from None


def check_key(key: str) -> None:
    """Refuse keys no backend can hold the same way (empty, not str, lone surrogates)."""
    if not isinstance(key, str) or not key:
        raise ValueRefused(f"store keys are non-empty strings, got {key!r}")
    if not key.isascii():
        try:
            key.encode()
        except UnicodeEncodeError:
            raise ValueRefused(f"store key {key!r} is not valid Unicode") from None


def check_board(board: str, member: str | None = None) -> None:
    """Refuse a board id no backend can hold (the rules of keys) or a member that is not
    a string."""
    check_key(board)
    if member is not None and not isinstance(member, str):
        raise ValueRefused(f"board members are strings, got {member!r}")


_NUMBERS = (int, float)  # a tuple, made once (``int | float`` is a new union per call)
MAX_TTL = 100 * 365 * 86_400.0
"""The longest expiry a store takes (100 years): Redis refuses an expiry time past
2^63 ms mid-script, which would leave a multi-key commit half applied."""


def check_ttl(ttl: float, what: str = "ttl") -> float:
    """``ttl`` as a positive finite float, else StoreError (0 would mean "already gone")."""
    if isinstance(ttl, bool) or not isinstance(ttl, _NUMBERS) or not 0 < ttl < math.inf:
        raise ValueRefused(f"{what} must be a positive number of seconds, got {ttl!r}")
    if ttl > MAX_TTL:
        raise ValueRefused(f"{what} must be at most {MAX_TTL:.0f} seconds (100 years), got {ttl!r}")
    return float(ttl)
