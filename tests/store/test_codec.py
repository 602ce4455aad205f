"""The value codec (tmy/store/codec.py): the size limit is the caller's, not a process global."""

from __future__ import annotations

import pytest

from tmy.errors import ValueRefused
from tmy.store import codec


def test_the_limit_is_an_argument_with_the_documented_default() -> None:
    big = "x" * 100
    assert codec.encode(big) == f'"{big}"'.encode()
    with pytest.raises(ValueRefused) as refused:
        codec.encode(big, "k", limit=50)
    assert str(refused.value) == (
        "cannot store the value at key 'k': it is 102 bytes as JSON (limits.max_value_bytes is 50)"
    )
    assert codec.MAX_VALUE_BYTES == 4 * 1024 * 1024  # a constant: nothing sets it per app
