"""The shape of config/tmy.yaml: which keys each section takes, of which type and range.

:func:`first_problem` walks the parsed file and names the first key that is wrong,
with the words the operator sees (``unknown key 'limits.step_timout' (did you mean
'step_timeout'?)``); the loader adds the file and the line. The ``llm:`` section is
checked by :mod:`tmy.config.llm`, each adapter's own rules by :mod:`tmy.config.adapters`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tmy.config import feishu, matrix, qq, satori, slack
from tmy.hints import did_you_mean

# the newer platforms each keep their part of the schema in their own module
_NEWER = {"qq": qq, "feishu": feishu, "slack": slack, "matrix": matrix, "satori": satori}

SCHEMA: dict[str, dict[str, Any]] = {
    "": {
        "rules": str,
        "plugins": str,
        "store": str,
        "timezone": str,
        "admins": list,
        "admin_prefix": str,
        "watch": bool,
        "limits": dict,
        "log": dict,
        "adapters": dict,
        "llm": dict,
        "error_reply": str,
        "console": dict,
    },
    "console": {"enabled": bool, "path": str, "password": str, "viewer_password": str},
    "limits": {
        "step_timeout": (int, float),
        "max_message_chars": int,
        "max_reply_chars": int,
        "max_id_chars": int,
        "max_value_bytes": int,
        "shutdown_grace": (int, float),
        "media_private_hosts": list,
    },
    "log": {"level": str, "file": str, "format": str, "slow_step": (int, float), "rotate": dict},
    "log.rotate": {"max_bytes": int, "backups": int},
    "adapters": {
        "console": dict,
        "http": dict,
        "openai": dict,
        "onebot": dict,
        "discord": dict,
        "telegram": dict,
        **{name: dict for name in _NEWER},
    },
    "adapters.console": {"enabled": bool},
    "adapters.http": {
        "enabled": bool,
        "listen": str,
        "api_keys": list,
        "header_timeout": (int, float),
        "body_timeout": (int, float),
        "keepalive_timeout": (int, float),
        "max_connections": int,
        "max_requests_in_flight": int,
        "allowed_hosts": list,
    },
    "adapters.openai": {"user_header": str, "user_header_trusted": bool, "unmatched_reply": str},
    "adapters.onebot": {
        "enabled": bool,
        "mode": str,
        "path": str,
        "url": str,
        "access_token": str,
        "heartbeat_timeout": (int, float),
        "send_interval": (int, float),
        "action_timeout": (int, float),
        "quote_reply": bool,
        "at_sender": bool,
        "max_pending_per_chat": int,
        "anonymous": str,
        "admins_from": list,
    },
    "adapters.discord": {
        "enabled": bool,
        "token_env": str,
        "shards": (int, str),
        "max_pending_per_chat": int,
        "admins_from": list,
    },
    "adapters.telegram": {
        "enabled": bool,
        "token_env": str,
        "api_base": str,
        "mode": str,
        "webhook_url": str,
        "webhook_path": str,
        "webhook_secret": str,
        "max_pending_per_chat": int,
        "admins_from": list,
        "admins_ttl": (int, float),
    },
    **{f"adapters.{name}": module.KEYS for name, module in _NEWER.items()},
}
# keys whose value must be one of a few words (or, for numbers, a range)
CHOICES: dict[str, tuple[Any, ...]] = {
    "adapters.onebot.mode": ("reverse", "forward"),
    "adapters.onebot.anonymous": ("key", "ignore"),
    "adapters.telegram.mode": ("polling", "webhook"),
    "log.format": ("auto", "json", "console"),
    **{
        f"adapters.{name}.{key}": words
        for name, module in _NEWER.items()
        for key, words in module.CHOICES.items()
    },
}
_POSITIVE = (
    "limits.step_timeout",
    "limits.max_message_chars",
    "limits.max_reply_chars",
    "limits.max_id_chars",
    "limits.max_value_bytes",
    "log.slow_step",
    "log.rotate.backups",
    "adapters.onebot.heartbeat_timeout",
    "adapters.onebot.action_timeout",
    "adapters.onebot.max_pending_per_chat",
    "adapters.telegram.max_pending_per_chat",
    "adapters.discord.max_pending_per_chat",
    "adapters.telegram.admins_ttl",
    "adapters.http.header_timeout",
    "adapters.http.body_timeout",
    "adapters.http.keepalive_timeout",
    "adapters.http.max_connections",
    "adapters.http.max_requests_in_flight",
    *(f"adapters.{name}.max_pending_per_chat" for name in _NEWER),
)
# what a value of the wrong type should look like, for keys whose type is not obvious
_TYPE_HINTS = {
    "log.rotate.max_bytes": "a whole number of bytes, e.g. 10485760 for 10 MiB (0: never rotate)",
    "log.rotate.backups": "how many rotated files to keep, a whole number >= 1",
}
_NON_NEGATIVE = ("limits.shutdown_grace", "adapters.onebot.send_interval", "log.rotate.max_bytes")


def first_problem(
    data: Any, section: str = "", extra: Collection[str] = ()
) -> tuple[str, str] | None:
    """``(dotted key, what is wrong)`` for the first wrong key under ``section``, or None.

    ``extra`` are top-level keys installed extensions claim (their ``parse`` checks them).
    """
    schema = SCHEMA[section]
    if not isinstance(data, dict):
        return section, f"'{section or 'top level'}' must be a mapping"
    allowed = [*schema, *extra] if not section else list(schema)
    for key, value in data.items():
        where: Any = f"{section}.{key}" if section else key  # as written, for the message
        if key not in schema:
            if key in allowed:
                continue
            hint = did_you_mean(key, allowed)
            problem = f"unknown key {where!r}{hint}; allowed: {', '.join(allowed)}"
            return str(where), problem
        if value is None:
            continue
        problem = _value_problem(where, value, schema[key])
        if problem is not None:
            return str(where), problem
        if where in SCHEMA:
            found = first_problem(value, where)
            if found is not None:
                return found
    return None


def _value_problem(key: str, value: Any, types: Any) -> str | None:
    """What is wrong with ``value`` (not None) at ``key``, or None."""
    if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
        hint = f"; expected {_TYPE_HINTS[key]}" if key in _TYPE_HINTS else ""
        return f"{key!r} has the wrong type ({value!r}){hint}"
    if key in CHOICES and value not in CHOICES[key]:
        return f"{key!r} must be one of {', '.join(CHOICES[key])} (got {value!r})"
    if key in _POSITIVE and value <= 0:
        return f"{key!r} must be > 0 (got {value!r})"
    if key in _NON_NEGATIVE and value < 0:
        return f"{key!r} must be >= 0 (got {value!r})"
    if key == "adapters.discord.shards" and not (
        value == "auto" or (isinstance(value, int) and value >= 1)
    ):
        return f"{key!r} must be a number >= 1 or 'auto' (got {value!r})"
    if key in ("adapters.http.api_keys", "adapters.http.allowed_hosts") and not all(
        isinstance(k, str) and k.strip() for k in value
    ):
        return f"{key!r} must be a list of non-empty strings"
    if key.startswith("adapters.") and key.endswith(".admins_from"):
        role_ids = key == "adapters.discord.admins_from"
        for item in value:
            digits = not isinstance(item, bool) and str(item).isdigit()
            if item not in ("owner", "admin") and not (role_ids and digits):
                allowed = "owner, admin" + (" or a role id" if role_ids else "")
                return f"{key!r}: {item!r} is not one of {allowed}"
    if key == "adapters.http.allowed_hosts" and any("/" in h for h in value):
        return f"{key!r} lists host names (bot.example.com), not URLs (got {value!r})"
    if key == "limits.media_private_hosts":
        return _hosts_problem(key, value)
    return None


def _hosts_problem(key: str, value: list[Any]) -> str | None:
    """``limits.media_private_hosts``: host names or IPs (or "*"), not URLs or ranges."""
    if not all(isinstance(h, str) and h.strip() for h in value):
        return f"{key!r} must be a list of host names or IP addresses (or '*' for any)"
    if any("/" in h or "://" in h for h in value):
        return (
            f"{key!r} lists host names or IP addresses (127.0.0.1, napcat.lan), not URLs "
            f"or ranges (got {value!r})"
        )
    return None
