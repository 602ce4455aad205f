"""``adapters.feishu``: Feishu / Lark (group and p2p chats), see tmy.adapters.feishu."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tmy.config.section import Section, check_platform, choice, platform_keys

CREDENTIALS = ("app_id", "app_secret", "verification_token", "encrypt_key")
MODES = ("websocket", "webhook")
KEYS = platform_keys(CREDENTIALS, mode=str)
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({"mode": MODES})


@dataclass(frozen=True, slots=True)
class FeishuConfig(Section):
    """``adapters.feishu`` with its defaults (config/tmy.yaml documents each key)."""

    enabled: bool = False
    mode: str = "websocket"  # websocket (the long connection) | webhook (POSTs to /feishu/events)
    app_id: str = ""
    app_id_env: str = "FEISHU_APP_ID"
    app_secret: str = field(default="", repr=False)  # never in a repr, as every credential
    app_secret_env: str = "FEISHU_APP_SECRET"
    verification_token: str = field(default="", repr=False)  # webhook mode: events carry it
    verification_token_env: str = "FEISHU_VERIFICATION_TOKEN"
    # webhook mode: signs and encrypts events when set in the console
    encrypt_key: str = field(default="", repr=False)
    encrypt_key_env: str = "FEISHU_ENCRYPT_KEY"
    api_base: str = "https://open.feishu.cn"  # Lark: https://open.larksuite.com
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner, admin: a group's owner and its managers

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> FeishuConfig:
        """The validated section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        choice("feishu", "mode", config.mode, MODES)
        check_platform("feishu", config, CREDENTIALS)
        return config
