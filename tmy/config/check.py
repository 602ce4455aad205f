"""The one check every config section goes through: known keys, right types, no negatives.

Shared by ``llm:`` (:mod:`tmy.config.llm`) and ``llm.memory:`` (:mod:`tmy.config.memory`):
a wrong key is refused with its full dotted name and a "did you mean", so the
operator fixes the file at start-up rather than in the middle of a conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tmy.errors import ConfigError
from tmy.hints import did_you_mean


def check_section(where: str, data: Any, schema: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a mapping under config key ``where``) checked against ``schema``
    (key -> allowed types): unknown keys with a did-you-mean, wrong types, negative
    numbers are ConfigErrors naming the key."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"'{where}' must be a mapping, got {data!r}")
    for key, value in data.items():
        if key not in schema:
            hint = did_you_mean(str(key), schema)
            raise ConfigError(f"unknown key '{where}.{key}'{hint}; allowed: {', '.join(schema)}")
        types = schema[key]
        if value is None:
            continue
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            raise ConfigError(f"'{where}.{key}' has the wrong type: {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ConfigError(f"'{where}.{key}' must not be negative: {value!r}")
    return data
