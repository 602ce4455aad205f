"""``adapters.qq``: QQ's official bot API (guild channels, groups, C2C), see tmy.adapters.qq."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tmy.config.section import Section, check_platform, choice, http_url, platform_keys

CREDENTIALS = ("app_id", "secret")
MODES = ("webhook", "websocket")
KEYS = platform_keys(CREDENTIALS, mode=str, token_url=str, all_messages=bool)
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({"mode": MODES})


@dataclass(frozen=True, slots=True)
class QQConfig(Section):
    """``adapters.qq`` with its defaults (config/tmy.yaml documents each key)."""

    enabled: bool = False
    mode: str = "webhook"  # webhook (POSTs to /qq/webhook) | websocket (the gateway)
    app_id: str = ""
    app_id_env: str = "QQ_APP_ID"
    # the AppSecret: access tokens, and the webhook's ed25519 key (never in a repr)
    secret: str = field(default="", repr=False)
    secret_env: str = "QQ_SECRET"
    api_base: str = "https://api.sgroup.qq.com"  # sandbox: https://sandbox.api.sgroup.qq.com
    token_url: str = "https://bots.qq.com/app/getAppAccessToken"  # not under api_base
    # a private (私域) guild bot may ask for every channel message (MESSAGE_CREATE), not
    # only @-mentions; QQ refuses the gateway login of a public bot that asks
    all_messages: bool = False
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner, admin: guild roles (groups give none)

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> QQConfig:
        """The validated section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        choice("qq", "mode", config.mode, MODES)
        http_url("qq", "token_url", config.token_url)
        check_platform("qq", config, CREDENTIALS)
        return config
