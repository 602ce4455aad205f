"""``adapters.satori``: a Satori server (Koishi, Chronocat, LLOneBot …), see tmy.adapters.satori."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tmy.config.section import Section, check_platform, platform_keys
from tmy.errors import ConfigError

CREDENTIALS = ("token",)
KEYS = platform_keys(CREDENTIALS, send_interval=(int, float))
MAX_SEND_INTERVAL = 60.0  # seconds; more would leave a chat's replies minutes behind
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class SatoriConfig(Section):
    """``adapters.satori`` with its defaults (config/tmy.yaml documents each key)."""

    enabled: bool = False
    api_base: str = "http://127.0.0.1:5140/satori"  # the Satori server's root (no public one)
    # sent as Authorization: Bearer; "" when the server asks none (never in a repr)
    token: str = field(default="", repr=False)
    token_env: str = "SATORI_TOKEN"
    # seconds between two messages to one channel (a long reply's pieces too): QQ behind
    # Chronocat/LLOneBot and KOOK throttle bursts; 0 leaves pacing to the server's 429s
    send_interval: float = 0.5
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner, admin: guild roles where the platform has them

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> SatoriConfig:
        """The validated section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        check_platform("satori", config, CREDENTIALS)
        interval = config.send_interval
        if (
            isinstance(interval, bool)
            or not isinstance(interval, (int, float))
            or not (0 <= interval <= MAX_SEND_INTERVAL)
        ):
            raise ConfigError(
                f"adapters.satori.send_interval must be a number of seconds from 0 to "
                f"{MAX_SEND_INTERVAL:g} (got {interval!r})"
            )
        return config
