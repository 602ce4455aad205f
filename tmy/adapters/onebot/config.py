"""``adapters.onebot``: the frozen, checked settings of the OneBot adapter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tmy.errors import ConfigError

PER_CHAT_LIMIT = 1000  # the most max_pending_per_chat may be (the adapter's MAX_WAITING)


@dataclass(frozen=True, slots=True)
class OneBotConfig:
    """``adapters.onebot`` with its defaults (see config/tmy.yaml for each key)."""

    mode: str = "reverse"
    path: str = "/onebot/v11/ws"
    url: str = "ws://127.0.0.1:3001"
    access_token: str = ""
    heartbeat_timeout: float = 60.0
    send_interval: float = 0.5
    action_timeout: float = 10.0
    quote_reply: bool = False
    at_sender: bool = False
    max_pending_per_chat: int = 20
    anonymous: str = "key"

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> OneBotConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in section.items() if k in known and v is not None})
        if config.mode not in ("reverse", "forward"):
            raise ConfigError(
                f"adapters.onebot.mode must be reverse or forward (got {config.mode!r})"
            )
        if config.mode == "reverse" and not config.path.startswith("/"):
            raise ConfigError(f"adapters.onebot.path must start with '/' (got {config.path!r})")
        if config.mode == "forward" and not config.url.startswith(("ws://", "wss://")):
            raise ConfigError(
                f"adapters.onebot.url must be a ws:// or wss:// URL (got {config.url!r})"
            )
        cap = config.max_pending_per_chat
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= PER_CHAT_LIMIT:
            raise ConfigError(
                f"adapters.onebot.max_pending_per_chat must be a whole number from 1 to "
                f"{PER_CHAT_LIMIT} (got {cap!r})"
            )
        if config.anonymous not in ("key", "ignore"):
            raise ConfigError(
                f"adapters.onebot.anonymous must be key or ignore (got {config.anonymous!r})"
            )
        return config
