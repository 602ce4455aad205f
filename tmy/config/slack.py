"""``adapters.slack``: Slack (channels, DMs, threads), see tmy.adapters.slack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tmy.config.section import Section, check_platform, choice, platform_keys

CREDENTIALS = ("bot_token", "app_token", "signing_secret")
MODES = ("socket", "webhook")
KEYS = platform_keys(CREDENTIALS, mode=str)
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({"mode": MODES})


@dataclass(frozen=True, slots=True)
class SlackConfig(Section):
    """``adapters.slack`` with its defaults (config/tmy.yaml documents each key)."""

    enabled: bool = False
    mode: str = "socket"  # socket (Socket Mode) | webhook (the Events API, POSTs to /slack/events)
    bot_token: str = field(default="", repr=False)  # xoxb-…: every Web API call
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token: str = field(default="", repr=False)  # xapp-…: Socket Mode only
    app_token_env: str = "SLACK_APP_TOKEN"
    # webhook mode: verifies each request's X-Slack-Signature (never in a repr)
    signing_secret: str = field(default="", repr=False)
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    api_base: str = "https://slack.com/api/"
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner, admin: the workspace's owners and admins

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> SlackConfig:
        """The validated section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        choice("slack", "mode", config.mode, MODES)
        check_platform("slack", config, CREDENTIALS)
        return config
