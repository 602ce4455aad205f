"""``adapters:`` in config/tmy.yaml: one frozen, checked object per adapter.

:class:`Adapters` holds ``console``, ``http``, ``openai``, ``onebot``, ``discord``,
``telegram`` and the newer platforms (``qq``, ``feishu``, ``slack``, ``matrix``,
``satori``: one module each, :mod:`tmy.config.section` says how they are made);
each adapter's ``from_settings`` reads its own section and checks nothing again.
A chat platform's section is checked for use (a reverse-mode path starts with '/',
a webhook has a URL, …) only when it is enabled: a disabled one is never used, so
its keys are not held against the rest of the file (as before the sections were
frozen).

Every section is also a read-only mapping over its fields, so code written when the
sections were dicts (``settings.adapters["onebot"]["access_token"]``,
``section.get("enabled")``) keeps working.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tmy.config.feishu import FeishuConfig
from tmy.config.matrix import MatrixConfig
from tmy.config.qq import QQConfig
from tmy.config.satori import SatoriConfig
from tmy.config.section import PER_CHAT_LIMIT as PER_CHAT_LIMIT  # re-exported: where it was
from tmy.config.section import ROLE_WORDS as ROLE_WORDS
from tmy.config.section import Section
from tmy.config.section import admins_from as _admins_from
from tmy.config.section import is_http_url as _is_http_url
from tmy.config.section import per_chat_cap as _per_chat_cap
from tmy.config.slack import SlackConfig
from tmy.errors import ConfigError, TmyError

# the newer platforms' sections, one module each (tmy.config.qq …): name -> config class
NEWER_PLATFORMS: dict[str, Any] = {
    "qq": QQConfig,
    "feishu": FeishuConfig,
    "slack": SlackConfig,
    "matrix": MatrixConfig,
    "satori": SatoriConfig,
}
PLATFORM_SECTIONS = ("onebot", "discord", "telegram", *NEWER_PLATFORMS)
# sections read from ``adapters:`` into their objects (http and console come from the flat
# Settings fields, which the environment and the CLI flags override)
ADAPTER_SECTIONS = (*PLATFORM_SECTIONS, "openai")
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as secret_token


@dataclass(frozen=True, slots=True)
class ConsoleConfig(Section):
    """``adapters.console``: the terminal chat when the daemon runs in one."""

    enabled: bool = True


def parse_listen(listen: str, error: type[TmyError] = ConfigError) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``) → (host, port); ``error`` (ConfigError for the config,
    AdapterError for the listener's own callers) when it is neither."""
    host, sep, port = listen.rpartition(":") if isinstance(listen, str) else ("", "", "")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise error(f"HTTP listen address {listen!r} must be HOST:PORT, e.g. 127.0.0.1:8080")
    return (host.strip("[]") or "127.0.0.1"), int(port)


@dataclass(frozen=True, slots=True)
class HttpConfig(Section):
    """``adapters.http``: the listener (REST API, webhooks, admin) and its guards;
    ``host`` and ``port`` are ``listen`` parsed (a bad one is a ConfigError naming
    ``adapters.http.listen``)."""

    enabled: bool = True
    listen: str = "127.0.0.1:8080"
    api_keys: tuple[str, ...] = ()
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 15.0
    max_connections: int = 1000
    max_requests_in_flight: int = 256
    allowed_hosts: tuple[str, ...] = ()
    host: str = field(init=False, repr=False, compare=False)
    port: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            host, port = parse_listen(self.listen)
        except ConfigError as exc:
            raise ConfigError(f"adapters.http.listen: {exc}") from None
        object.__setattr__(self, "host", host)
        object.__setattr__(self, "port", port)


@dataclass(frozen=True, slots=True)
class OpenAIConfig(Section):
    """``adapters.openai``: the OpenAI-compatible facade on the HTTP listener."""

    user_header: str = "X-OpenWebUI-User-Id"  # Open WebUI's forwarded user id
    user_header_trusted: bool = False
    unmatched_reply: str = "No rule matched this message."


@dataclass(frozen=True, slots=True)
class OneBotConfig(Section):
    """``adapters.onebot`` with its defaults (see config/tmy.yaml for each key)."""

    enabled: bool = False
    mode: str = "reverse"
    path: str = "/onebot/v11/ws"
    url: str = "ws://127.0.0.1:3001"
    access_token: str = field(default="", repr=False)  # not in a repr (tracebacks)
    heartbeat_timeout: float = 60.0
    send_interval: float = 0.5
    action_timeout: float = 10.0
    quote_reply: bool = False
    at_sender: bool = False
    max_pending_per_chat: int = 20
    anonymous: str = "key"
    admins_from: tuple[str, ...] = ()  # owner, admin: QQ group roles that are admins there

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> OneBotConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
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
        _per_chat_cap("onebot", config.max_pending_per_chat)
        if config.anonymous not in ("key", "ignore"):
            raise ConfigError(
                f"adapters.onebot.anonymous must be key or ignore (got {config.anonymous!r})"
            )
        object.__setattr__(config, "admins_from", _admins_from("onebot", config.admins_from))
        return config


@dataclass(frozen=True, slots=True)
class DiscordConfig(Section):
    """``adapters.discord`` with its defaults."""

    enabled: bool = False
    token_env: str = "DISCORD_TOKEN"
    shards: int | str = 1
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner, admin (Manage Server), or role ids

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> DiscordConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        shards = config.shards
        if not (shards == "auto" or (isinstance(shards, int) and not isinstance(shards, bool)
                                     and shards >= 1)):  # fmt: skip
            raise ConfigError(
                f"adapters.discord.shards must be a number >= 1 or 'auto' (got {shards!r})"
            )
        if not config.token_env:
            raise ConfigError("adapters.discord.token_env must name an environment variable")
        _per_chat_cap("discord", config.max_pending_per_chat)
        admins = _admins_from("discord", config.admins_from, role_ids=True)
        object.__setattr__(config, "admins_from", admins)
        return config


@dataclass(frozen=True, slots=True)
class TelegramConfig(Section):
    """``adapters.telegram`` with its defaults (see config/tmy.yaml for each key)."""

    enabled: bool = False
    token_env: str = "TELEGRAM_TOKEN"
    api_base: str = "https://api.telegram.org"
    mode: str = "polling"
    webhook_url: str = ""
    webhook_path: str = "/telegram/webhook"
    webhook_secret: str = field(default="", repr=False)
    max_pending_per_chat: int = 20
    admins_from: tuple[str, ...] = ()  # owner (creator), admin (administrator)
    admins_ttl: float = 300.0  # seconds a chat's administrator list is cached

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> TelegramConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        config = cls.unchecked(section)
        if config.mode not in ("polling", "webhook"):
            raise ConfigError(
                f"adapters.telegram.mode must be polling or webhook (got {config.mode!r})"
            )
        if not _is_http_url(config.api_base):
            raise ConfigError(
                f"adapters.telegram.api_base must be an http(s) URL (got {config.api_base!r})"
            )
        if not config.token_env:
            raise ConfigError("adapters.telegram.token_env must name an environment variable")
        if config.mode == "webhook":
            if not _is_http_url(config.webhook_url):
                raise ConfigError(
                    "adapters.telegram.webhook_url must be the public https:// URL Telegram "
                    f"posts updates to (got {config.webhook_url!r})"
                )
            if not config.webhook_path.startswith("/"):
                raise ConfigError(
                    f"adapters.telegram.webhook_path must start with '/' "
                    f"(got {config.webhook_path!r})"
                )
        _per_chat_cap("telegram", config.max_pending_per_chat)
        if config.webhook_secret and not _TELEGRAM_SECRET.fullmatch(config.webhook_secret):
            raise ConfigError(
                "adapters.telegram.webhook_secret may use only A-Z, a-z, 0-9, _ and - "
                "(1 to 256 characters), as Telegram requires"
            )
        object.__setattr__(config, "admins_from", _admins_from("telegram", config.admins_from))
        if config.admins_ttl <= 0:
            raise ConfigError(
                f"adapters.telegram.admins_ttl must be > 0 (got {config.admins_ttl!r})"
            )
        return config


_PLATFORMS: dict[str, Any] = {
    "onebot": OneBotConfig,
    "discord": DiscordConfig,
    "telegram": TelegramConfig,
    **NEWER_PLATFORMS,
}


@dataclass(frozen=True, slots=True)
class Adapters(Section):
    """Every adapter's section; ``settings.adapters.onebot`` and so on."""

    console: ConsoleConfig = ConsoleConfig()
    http: HttpConfig = HttpConfig()
    openai: OpenAIConfig = OpenAIConfig()
    onebot: OneBotConfig = OneBotConfig()
    discord: DiscordConfig = DiscordConfig()
    telegram: TelegramConfig = TelegramConfig()
    qq: QQConfig = field(default_factory=QQConfig)
    feishu: FeishuConfig = field(default_factory=FeishuConfig)
    slack: SlackConfig = field(default_factory=SlackConfig)
    matrix: MatrixConfig = field(default_factory=MatrixConfig)
    satori: SatoriConfig = field(default_factory=SatoriConfig)

    @classmethod
    def parse(cls, sections: Mapping[str, Any]) -> Adapters:
        """``adapters.<name>`` mappings (or section objects) into their frozen objects.

        A platform is checked for use when it is enabled (module doc); ``http`` and
        ``console`` here are ignored: the Settings fields they mirror are the truth.
        """
        if isinstance(sections, Adapters):
            return sections
        made: dict[str, Any] = {}
        for name, kind in _PLATFORMS.items():
            raw = sections.get(name) or {}
            made[name] = kind.from_section(raw) if raw.get("enabled") else kind.unchecked(raw)
        made["openai"] = OpenAIConfig.unchecked(sections.get("openai") or {})
        return cls(**made)
