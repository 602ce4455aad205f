"""``adapters.matrix``: Matrix (rooms and DMs), see tmy.adapters.matrix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tmy.config.section import Section, check_platform, platform_keys

CREDENTIALS = ("user_id", "access_token", "password")
KEYS = platform_keys(CREDENTIALS)
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MatrixConfig(Section):
    """``adapters.matrix`` with its defaults (config/tmy.yaml documents each key)."""

    enabled: bool = False
    api_base: str = "https://matrix-client.matrix.org"  # the homeserver's client API root
    user_id: str = ""  # @bot:example.org
    user_id_env: str = "MATRIX_USER_ID"
    access_token: str = field(default="", repr=False)  # used when set; else a password login
    access_token_env: str = "MATRIX_ACCESS_TOKEN"
    password: str = field(default="", repr=False)  # not in a repr (tracebacks, debug output)
    password_env: str = "MATRIX_PASSWORD"
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner (power level 100), admin (50 to 99)

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> MatrixConfig:
        """The validated section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        check_platform("matrix", config, CREDENTIALS)
        return config
