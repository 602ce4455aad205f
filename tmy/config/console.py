"""``console:`` in config/tmy.yaml: the web console (not ``adapters.console``, the terminal).

``console: {enabled: false, path: /console, password: …, viewer_password: …}``;
``TMY_CONSOLE_PASSWORD`` / ``TMY_CONSOLE_VIEWER_PASSWORD`` override the passwords.
The passwords are hashed when the section is read (scrypt, a random salt) and the
text is not kept: :class:`WebConsoleConfig` holds only the hashes, so neither a
``repr`` nor a memory dump of the settings shows a password. A console that is off
keeps no hash at all. That an enabled console has a password is checked when the
daemon mounts it (:func:`tmy.console.routes`): one-shot CLI commands read the same
file without needing the daemon's environment.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tmy.config.check import check_section
from tmy.errors import ConfigError

SCHEMA: dict[str, Any] = {"enabled": bool, "path": str, "password": str, "viewer_password": str}
ENV_PASSWORD = "TMY_CONSOLE_PASSWORD"
ENV_VIEWER_PASSWORD = "TMY_CONSOLE_VIEWER_PASSWORD"
# the listener's own paths: the console may not sit on (or above) them
_TAKEN = ("/v1", "/admin", "/healthz", "/metrics")
_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")
# scrypt's cost: ~40 ms a hash here, paid once at start and once per login attempt
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """A password as scrypt left it: checking one costs what hashing it did."""

    salt: bytes
    digest: bytes

    @classmethod
    def of(cls, password: str) -> PasswordHash:
        salt = secrets.token_bytes(16)
        return cls(salt, _scrypt(password, salt))

    def matches(self, password: str) -> bool:
        """Whether ``password`` is the one hashed (compared in constant time)."""
        return hmac.compare_digest(_scrypt(password, self.salt), self.digest)

    def __repr__(self) -> str:
        return "PasswordHash(…)"


def _scrypt(password: str, salt: bytes) -> bytes:
    data = password.encode("utf-8", errors="surrogateescape")
    return hashlib.scrypt(data, salt=salt, maxmem=64 * 1024 * 1024, **_SCRYPT)


@dataclass(frozen=True, slots=True)
class WebConsoleConfig:
    """``console:``: whether the web console is served, where, and its two passwords' hashes.

    ``path`` is normalised (a leading ``/``, no trailing one): pages are at
    ``path + "/" + sub``. ``admin`` logs in as the admin role, ``viewer`` (optional)
    as the read-only one; None when not set.
    """

    enabled: bool = False
    path: str = "/console"
    admin: PasswordHash | None = None
    viewer: PasswordHash | None = None

    def url(self, sub: str = "") -> str:
        """The console page ``sub`` (``""``: the overview) as a path on the listener."""
        return f"{self.path}/{sub.lstrip('/')}"


def normal_path(value: str) -> str:
    """``console.path`` with one leading ``/`` and none trailing; ConfigError when unusable."""
    path = "/" + value.strip().strip("/")
    if path == "/" or not _PATH.fullmatch(path):
        raise ConfigError(
            f"'console.path' must be a URL path below / of letters, digits and . _ ~ -, "
            f"such as /console (got {value!r})"
        )
    for taken in _TAKEN:
        if path == taken or path.startswith(taken + "/") or taken.startswith(path + "/"):
            raise ConfigError(f"'console.path' {value!r} collides with the listener's {taken}")
    return path


def parse_console(raw: Any, env: Mapping[str, str] | None = None) -> WebConsoleConfig:
    """``console:`` checked (ConfigError naming the key), the environment's passwords over
    the file's, the passwords hashed (only when the console is enabled)."""
    if isinstance(raw, WebConsoleConfig):
        return raw
    data = {k: v for k, v in check_section("console", raw, SCHEMA).items() if v is not None}
    env = env or {}
    password = env.get(ENV_PASSWORD) or data.get("password") or ""
    viewer = env.get(ENV_VIEWER_PASSWORD) or data.get("viewer_password") or ""
    enabled = bool(data.get("enabled", False))
    path = normal_path(data.get("path", "/console"))
    if not enabled:
        return WebConsoleConfig(False, path)
    if viewer and viewer == password:
        raise ConfigError(
            "'console.viewer_password' must differ from 'console.password' "
            "(the same password cannot log in as both roles)"
        )
    return WebConsoleConfig(
        True,
        path,
        PasswordHash.of(password) if password else None,
        PasswordHash.of(viewer) if viewer else None,
    )


def missing_password() -> ConfigError:
    """Why a daemon with the console enabled and no password refuses to start."""
    return ConfigError(
        "console.enabled is true but no console password is set: set console.password "
        f"in the config file or the {ENV_PASSWORD} environment variable (there is no "
        "default password)"
    )
