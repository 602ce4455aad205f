"""What every adapter's config section is made of: the frozen mapping base and the
checks the chat platforms share (queue caps, ``admins_from``, URLs, credentials).

A section is a frozen dataclass that also reads as a mapping of its fields
(:class:`Section`), so code written when sections were dicts keeps working.
Platform sections live one per module (``tmy.config.qq``, ``slack`` …) beside the
older ones in :mod:`tmy.config.adapters`; each module's ``KEYS`` is its part of the
file's schema (:mod:`tmy.config.schema`) and its ``from_section`` the checks for use.

**Credentials** (:func:`credential`) follow one rule on every newer platform: the key
itself (``bot_token: xoxb-…``) when it is set, else the environment variable its
``<key>_env`` names (``bot_token_env: SLACK_BOT_TOKEN``, the default being the
platform's own customary variable), read when the adapter is built, so a secret
need never be written into the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tmy.errors import ConfigError

PER_CHAT_LIMIT = 1000  # the most any max_pending_per_chat may be (the adapters' queue totals)
ROLE_WORDS = ("owner", "admin")

_S = TypeVar("_S", bound="Section")


class Section(Mapping[str, Any]):
    """A frozen config section that also reads as a mapping of its fields (see module doc)."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def _names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))  # type: ignore[arg-type]

    @classmethod
    def unchecked(cls: type[_S], section: Mapping[str, Any]) -> _S:
        """The section's known keys over the defaults (a null value keeps the default)."""
        if isinstance(section, cls):
            return section
        known = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in section.items() if k in known and v is not None})


def per_chat_cap(platform: str, cap: Any) -> None:
    """ConfigError unless ``adapters.<platform>.max_pending_per_chat`` is 1..PER_CHAT_LIMIT."""
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= PER_CHAT_LIMIT:
        raise ConfigError(
            f"adapters.{platform}.max_pending_per_chat must be a whole number from 1 to "
            f"{PER_CHAT_LIMIT} (got {cap!r})"
        )


def admins_from(platform: str, value: Any, role_ids: bool = False) -> tuple[str, ...]:
    """``adapters.<platform>.admins_from`` as a tuple of words (Discord: or role ids)."""
    if isinstance(value, str):
        value = (value,)
    items = tuple(str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value)
    for item in items:
        if item in ROLE_WORDS or (role_ids and isinstance(item, str) and item.isdigit()):
            continue
        allowed = "owner, admin" + (" or a role id" if role_ids else "")
        raise ConfigError(f"adapters.{platform}.admins_from: {item!r} is not one of {allowed}")
    return items


def is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def http_url(platform: str, key: str, url: Any) -> None:
    """ConfigError unless ``adapters.<platform>.<key>`` is an http(s) URL."""
    if not isinstance(url, str) or not is_http_url(url):
        raise ConfigError(f"adapters.{platform}.{key} must be an http(s) URL (got {url!r})")


def choice(platform: str, key: str, value: Any, allowed: tuple[str, ...]) -> None:
    """ConfigError unless ``adapters.<platform>.<key>`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(
            f"adapters.{platform}.{key} must be {' or '.join(allowed)} (got {value!r})"
        )


def credential(section: Any, key: str, env: Mapping[str, str]) -> str:
    """The credential ``key`` of ``section``: its own value when set, else the environment
    variable its ``<key>_env`` names (stripped; "" when neither is there)."""
    value = getattr(section, key, "")
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):  # an app id written as a number
        return str(value)
    var = getattr(section, f"{key}_env", "")
    return (env.get(var) or "").strip() if var else ""


def env_names(platform: str, section: Any, keys: tuple[str, ...]) -> None:
    """ConfigError when one of ``keys``' ``<key>_env`` is not a usable variable name."""
    for key in keys:
        var = getattr(section, f"{key}_env", "")
        if not isinstance(var, str) or not var or "=" in var or any(c.isspace() for c in var):
            raise ConfigError(
                f"adapters.{platform}.{key}_env must name an environment variable (got {var!r})"
            )


def platform_keys(credentials: tuple[str, ...], **keys: Any) -> dict[str, Any]:
    """The schema of a newer platform's section (:mod:`tmy.config.schema`): the keys every
    one has, each credential with its ``<key>_env``, and the platform's own ``keys``."""
    schema: dict[str, Any] = {
        "enabled": bool,
        "api_base": str,
        "max_pending_per_chat": int,
        "admins_from": list,
    }
    for key in credentials:
        schema[key] = (str, int) if key.endswith("_id") else str
        schema[f"{key}_env"] = str
    schema.update(keys)
    return schema


def check_platform(platform: str, section: Any, credentials: tuple[str, ...]) -> None:
    """The checks for use every newer platform's section shares (an enabled one):
    ``api_base`` an http(s) URL, each ``<key>_env`` a variable name, the queue cap,
    ``admins_from`` (normalised in place)."""
    http_url(platform, "api_base", section.api_base)
    env_names(platform, section, credentials)
    per_chat_cap(platform, section.max_pending_per_chat)
    object.__setattr__(section, "admins_from", admins_from(platform, section.admins_from))
