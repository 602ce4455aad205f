"""Settings: ``config/tmy.yaml``, then ``TMY_*`` environment variables, then CLI flags.

Relative paths (rules, plugins, a ``sqlite:///relative.db`` store, the log
file) are relative to the directory the daemon is started from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tmy.errors import ConfigError
from tmy.hints import did_you_mean

DEFAULT_CONFIG = Path("config/tmy.yaml")

# config key -> environment variable
ENV = {
    "rules": "TMY_RULES",
    "plugins": "TMY_PLUGINS",
    "store": "TMY_STORE",
    "timezone": "TMY_TIMEZONE",
    "admins": "TMY_ADMINS",
    "log.level": "TMY_LOG_LEVEL",
    "log.file": "TMY_LOG_FILE",
    "http.listen": "TMY_HTTP",
}


@dataclass(frozen=True)
class Settings:
    """Everything the daemon is configured with; see config/tmy.yaml for each key."""

    rules: Path = Path("rules")
    plugins: Path = Path("plugins")
    store: str = "sqlite:///data/tmy.db"
    timezone: str = "local"
    admins: frozenset[str] = frozenset()
    step_timeout: float = 60.0
    max_message_chars: int = 20_000
    max_reply_chars: int = 50_000
    max_id_chars: int = 256
    error_reply: str = "Sorry, something went wrong."
    log_level: str = "info"
    log_file: str = ""
    console: bool = True
    http_enabled: bool = True
    http_listen: str = "127.0.0.1:8080"
    shutdown_grace: float = 30.0
    llm: dict[str, Any] = field(default_factory=dict)
    source: str = "<defaults>"

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


_SCHEMA: dict[str, dict[str, Any]] = {
    "": {
        "rules": str,
        "plugins": str,
        "store": str,
        "timezone": str,
        "admins": list,
        "limits": dict,
        "log": dict,
        "adapters": dict,
        "llm": dict,
        "error_reply": str,
    },
    "limits": {
        "step_timeout": (int, float),
        "max_message_chars": int,
        "max_reply_chars": int,
        "max_id_chars": int,
        "shutdown_grace": (int, float),
    },
    "log": {"level": str, "file": str},
    "adapters": {"console": dict, "http": dict},
    "adapters.console": {"enabled": bool},
    "adapters.http": {"enabled": bool, "listen": str},
}


def _check(section: str, data: Any, source: str) -> None:
    schema = _SCHEMA[section]
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: '{section or 'top level'}' must be a mapping")
    for key, value in data.items():
        if key not in schema:
            hint = did_you_mean(key, schema)
            where = f"{section}.{key}" if section else key
            raise ConfigError(
                f"{source}: unknown key {where!r}{hint}; allowed: {', '.join(schema)}"
            )
        if value is None:
            continue
        types = schema[key]
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            where = f"{section}.{key}" if section else key
            raise ConfigError(f"{source}: {where!r} has the wrong type ({value!r})")
        sub = f"{section}.{key}" if section else key
        if sub in _SCHEMA:
            _check(sub, value, source)


def load_settings(
    config: Path | str | None = None, env: dict[str, str] | None = None, **overrides: Any
) -> Settings:
    """Read the config file (optional when it is the default path), env, then overrides."""
    env = dict(os.environ if env is None else env)
    path = Path(config or env.get("TMY_CONFIG") or DEFAULT_CONFIG)
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
        _check("", data, str(path))
    elif config is not None or env.get("TMY_CONFIG"):
        raise ConfigError(f"config file {str(path)!r} does not exist")
    limits = data.get("limits") or {}
    log = data.get("log") or {}
    adapters = data.get("adapters") or {}
    http = adapters.get("http") or {}
    console = adapters.get("console") or {}
    values: dict[str, Any] = {
        "rules": data.get("rules"),
        "plugins": data.get("plugins"),
        "store": data.get("store"),
        "timezone": data.get("timezone"),
        "admins": data.get("admins"),
        "error_reply": data.get("error_reply"),
        "step_timeout": limits.get("step_timeout"),
        "max_message_chars": limits.get("max_message_chars"),
        "max_reply_chars": limits.get("max_reply_chars"),
        "max_id_chars": limits.get("max_id_chars"),
        "shutdown_grace": limits.get("shutdown_grace"),
        "log_level": log.get("level"),
        "log_file": log.get("file"),
        "console": console.get("enabled"),
        "http_enabled": http.get("enabled"),
        "http_listen": http.get("listen"),
        "llm": data.get("llm"),
    }
    for key, var in ENV.items():
        if env.get(var):
            values[
                {
                    "log.level": "log_level",
                    "log.file": "log_file",
                    "http.listen": "http_listen",
                }.get(key, key)
            ] = env[var]
    values.update({k: v for k, v in overrides.items() if v is not None})
    kwargs = {k: v for k, v in values.items() if v is not None}
    for key in ("rules", "plugins"):
        if key in kwargs:
            kwargs[key] = Path(kwargs[key])
    if "admins" in kwargs:
        admins = kwargs["admins"]
        if isinstance(admins, str):
            admins = [a.strip() for a in admins.split(",") if a.strip()]
        kwargs["admins"] = frozenset(str(a) for a in admins)
    kwargs["source"] = str(path) if path.exists() else "<defaults>"
    return Settings(**kwargs)
