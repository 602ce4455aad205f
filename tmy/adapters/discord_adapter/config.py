"""``adapters.discord``: the frozen, checked settings of the Discord adapter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tmy.errors import ConfigError

PER_CHAT_LIMIT = 1000  # the most max_pending_per_chat may be (the adapter's MAX_WAITING)


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """``adapters.discord`` with its defaults."""

    token_env: str = "DISCORD_TOKEN"
    shards: int | str = 1
    max_pending_per_chat: int = 20

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> DiscordConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in section.items() if k in known and v is not None})
        shards = config.shards
        if not (shards == "auto" or (isinstance(shards, int) and not isinstance(shards, bool)
                                     and shards >= 1)):  # fmt: skip
            raise ConfigError(
                f"adapters.discord.shards must be a number >= 1 or 'auto' (got {shards!r})"
            )
        if not config.token_env:
            raise ConfigError("adapters.discord.token_env must name an environment variable")
        cap = config.max_pending_per_chat
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= PER_CHAT_LIMIT:
            raise ConfigError(
                f"adapters.discord.max_pending_per_chat must be a whole number from 1 to "
                f"{PER_CHAT_LIMIT} (got {cap!r})"
            )
        return config
