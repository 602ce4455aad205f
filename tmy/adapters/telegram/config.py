"""``adapters.telegram``: the frozen, checked settings of the Telegram adapter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from tmy.errors import ConfigError

PER_CHAT_LIMIT = 1000  # the most max_pending_per_chat may be (the adapter's MAX_PENDING)
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as secret_token


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """``adapters.telegram`` with its defaults (see config/tmy.yaml for each key)."""

    token_env: str = "TELEGRAM_TOKEN"
    api_base: str = "https://api.telegram.org"
    mode: str = "polling"
    webhook_url: str = ""
    webhook_path: str = "/telegram/webhook"
    webhook_secret: str = ""
    max_pending_per_chat: int = 20

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> TelegramConfig:
        """The validated config section (None values take the defaults); ConfigError if unusable."""
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in section.items() if k in known and v is not None})
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
        cap = config.max_pending_per_chat
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= PER_CHAT_LIMIT:
            raise ConfigError(
                f"adapters.telegram.max_pending_per_chat must be a whole number from 1 to "
                f"{PER_CHAT_LIMIT} (got {cap!r})"
            )
        if config.webhook_secret and not _SECRET_RE.fullmatch(config.webhook_secret):
            raise ConfigError(
                "adapters.telegram.webhook_secret may use only A-Z, a-z, 0-9, _ and - "
                "(1 to 256 characters), as Telegram requires"
            )
        return config


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)
