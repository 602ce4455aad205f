"""Settings: ``config/tmy.yaml``, then ``TMY_*`` environment variables, then CLI flags.

Relative paths written in a config file (``rules``, ``plugins``, a
``sqlite:///relative.db`` store, ``log.file``) are relative to the directory of
that file, so the daemon finds the same files whatever directory it is started
from; paths from the environment or the command line (and the built-in defaults,
used when there is no config file) are relative to the working directory.

Without ``--config`` / ``TMY_CONFIG`` the config is ``config/tmy.yaml`` in the
working directory, else the one of the checkout tmy runs from (next to the
``tmy`` package: ``python /path/to/checkout/run.py`` works from anywhere), else
none: the built-in defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tmy.errors import ConfigError
from tmy.hints import did_you_mean
from tmy.yamlfile.hints import diagnose, message

DEFAULT_CONFIG = Path("config/tmy.yaml")
# A checkout's own config: <checkout>/config/tmy.yaml beside <checkout>/tmy/ (absent when
# tmy is installed as a package, whose directory holds no config/).
CHECKOUT_CONFIG = Path(__file__).resolve().parents[2] / DEFAULT_CONFIG

# config key -> environment variable
ENV = {
    "rules": "TMY_RULES",
    "plugins": "TMY_PLUGINS",
    "store": "TMY_STORE",
    "timezone": "TMY_TIMEZONE",
    "admins": "TMY_ADMINS",
    "admin_prefix": "TMY_ADMIN_PREFIX",
    "watch": "TMY_WATCH",
    "log.format": "TMY_LOG_FORMAT",
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
    admin_prefix: str = ".tmy"
    watch: bool = True  # reload when rule or plugin files change
    step_timeout: float = 60.0
    max_message_chars: int = 20_000
    max_reply_chars: int = 50_000
    max_id_chars: int = 256
    max_value_bytes: int = 4 * 1024 * 1024
    error_reply: str = "Sorry, something went wrong."
    log_level: str = "info"
    log_file: str = ""
    log_format: str = "auto"  # auto: readable lines on a terminal, JSON otherwise
    slow_step: float = 5.0  # a step still running after this many seconds logs step.running
    console: bool = True
    http_enabled: bool = True
    http_listen: str = "127.0.0.1:8080"
    http_api_keys: tuple[str, ...] = ()
    # the listener's guards (tmy.adapters.listener, tmy.adapters.origin); see config/tmy.yaml
    http_header_timeout: float = 10.0
    http_body_timeout: float = 30.0
    http_keepalive_timeout: float = 15.0
    http_max_connections: int = 1000
    http_max_requests_in_flight: int = 256
    http_allowed_hosts: tuple[str, ...] = ()
    # chat-platform sections as validated from the file (+ env): {"onebot": {...}, ...}
    adapters: dict[str, dict[str, Any]] = field(default_factory=dict)
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
        "admin_prefix": str,
        "watch": bool,
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
        "max_value_bytes": int,
        "shutdown_grace": (int, float),
    },
    "log": {"level": str, "file": str, "format": str, "slow_step": (int, float)},
    "adapters": {
        "console": dict,
        "http": dict,
        "openai": dict,
        "onebot": dict,
        "discord": dict,
        "telegram": dict,
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
    },
    "adapters.discord": {
        "enabled": bool,
        "token_env": str,
        "shards": (int, str),
        "max_pending_per_chat": int,
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
    },
}
# keys whose value must be one of a few words (or, for numbers, a range)
_CHOICES: dict[str, tuple[Any, ...]] = {
    "adapters.onebot.mode": ("reverse", "forward"),
    "adapters.onebot.anonymous": ("key", "ignore"),
    "adapters.telegram.mode": ("polling", "webhook"),
    "log.format": ("auto", "json", "console"),
}
_POSITIVE = (
    "limits.step_timeout",
    "limits.max_message_chars",
    "limits.max_reply_chars",
    "limits.max_id_chars",
    "limits.max_value_bytes",
    "log.slow_step",
    "adapters.onebot.heartbeat_timeout",
    "adapters.onebot.action_timeout",
    "adapters.onebot.max_pending_per_chat",
    "adapters.telegram.max_pending_per_chat",
    "adapters.discord.max_pending_per_chat",
    "adapters.http.header_timeout",
    "adapters.http.body_timeout",
    "adapters.http.keepalive_timeout",
    "adapters.http.max_connections",
    "adapters.http.max_requests_in_flight",
)
_NON_NEGATIVE = ("limits.shutdown_grace", "adapters.onebot.send_interval")
PLATFORM_SECTIONS = ("onebot", "discord", "telegram")
# sections kept as validated in Settings.adapters, platforms and the OpenAI facade
ADAPTER_SECTIONS = (*PLATFORM_SECTIONS, "openai")


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
        if sub in _CHOICES and value not in _CHOICES[sub]:
            raise ConfigError(
                f"{source}: {sub!r} must be one of {', '.join(_CHOICES[sub])} (got {value!r})"
            )
        if sub in _POSITIVE and value <= 0:
            raise ConfigError(f"{source}: {sub!r} must be > 0 (got {value!r})")
        if sub in _NON_NEGATIVE and value < 0:
            raise ConfigError(f"{source}: {sub!r} must be >= 0 (got {value!r})")
        if sub == "adapters.discord.shards" and not (
            value == "auto" or (isinstance(value, int) and value >= 1)
        ):
            raise ConfigError(f"{source}: {sub!r} must be a number >= 1 or 'auto' (got {value!r})")
        if sub in ("adapters.http.api_keys", "adapters.http.allowed_hosts") and not all(
            isinstance(k, str) and k.strip() for k in value
        ):
            raise ConfigError(f"{source}: {sub!r} must be a list of non-empty strings")
        if sub == "adapters.http.allowed_hosts" and any("/" in h for h in value):
            raise ConfigError(
                f"{source}: {sub!r} lists host names (bot.example.com), not URLs (got {value!r})"
            )
        if sub in _SCHEMA:
            _check(sub, value, source)


def _relative_to(value: str, base: Path) -> str:
    """``value`` (a path) read relative to ``base``; kept short when it lies below the cwd."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    full = Path(os.path.normpath(base / path))
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def _resolve_paths(values: dict[str, Any], base: Path) -> None:
    """Relative paths from the config file: relative to its directory ``base``."""
    for key in ("rules", "plugins"):
        if isinstance(values.get(key), str):
            values[key] = _relative_to(values[key], base)
    if values.get("log_file"):
        values["log_file"] = _relative_to(values["log_file"], base)
    store = values.get("store")
    if isinstance(store, str) and store.lower().startswith("sqlite:///"):
        rest = store[len("sqlite:///") :]
        if rest and not rest.startswith("/") and rest != ":memory:":
            resolved = _relative_to(rest, base)  # an absolute path makes four slashes
            values["store"] = f"{store[: len('sqlite:///')]}{resolved}"


def load_settings(
    config: Path | str | None = None, env: dict[str, str] | None = None, **overrides: Any
) -> Settings:
    """Read the config file (optional when it is the default path), env, then overrides."""
    env = dict(os.environ if env is None else env)
    path = Path(config or env.get("TMY_CONFIG") or DEFAULT_CONFIG)
    if not (config or env.get("TMY_CONFIG")) and not path.exists() and CHECKOUT_CONFIG.exists():
        path = CHECKOUT_CONFIG
    data: dict[str, Any] = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text) or {}
        except yaml.MarkedYAMLError as exc:
            line, what, hint = diagnose(text, exc)
            where = f"{path}:{line}" if line else str(path)
            raise ConfigError(f"{where}: {message(what, hint, where)}") from None
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
        "admin_prefix": data.get("admin_prefix"),
        "watch": data.get("watch"),
        "error_reply": data.get("error_reply"),
        "step_timeout": limits.get("step_timeout"),
        "max_message_chars": limits.get("max_message_chars"),
        "max_reply_chars": limits.get("max_reply_chars"),
        "max_id_chars": limits.get("max_id_chars"),
        "max_value_bytes": limits.get("max_value_bytes"),
        "shutdown_grace": limits.get("shutdown_grace"),
        "log_level": log.get("level"),
        "log_file": log.get("file"),
        "log_format": log.get("format"),
        "slow_step": log.get("slow_step"),
        "console": console.get("enabled"),
        "http_enabled": http.get("enabled"),
        "http_listen": http.get("listen"),
        "http_api_keys": http.get("api_keys"),
        "http_header_timeout": http.get("header_timeout"),
        "http_body_timeout": http.get("body_timeout"),
        "http_keepalive_timeout": http.get("keepalive_timeout"),
        "http_max_connections": http.get("max_connections"),
        "http_max_requests_in_flight": http.get("max_requests_in_flight"),
        "http_allowed_hosts": http.get("allowed_hosts"),
        "llm": data.get("llm"),
        "adapters": {k: dict(adapters.get(k) or {}) for k in ADAPTER_SECTIONS},
    }
    if data:
        _resolve_paths(values, path.absolute().parent)
    if env.get("TMY_HTTP_API_KEYS"):
        keys = [k.strip() for k in env["TMY_HTTP_API_KEYS"].split(",") if k.strip()]
        if not keys:  # set but blank: fail closed rather than open the listener to everyone
            raise ConfigError(
                "TMY_HTTP_API_KEYS is set but holds no key (expected key1,key2,…); "
                "unset it to use adapters.http.api_keys"
            )
        values["http_api_keys"] = keys
    if env.get("TMY_ONEBOT_TOKEN"):
        values["adapters"]["onebot"]["access_token"] = env["TMY_ONEBOT_TOKEN"]
    for key, var in ENV.items():
        if env.get(var):
            values[
                {
                    "log.level": "log_level",
                    "log.file": "log_file",
                    "log.format": "log_format",
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
    if "http_api_keys" in kwargs:
        kwargs["http_api_keys"] = tuple(k for k in kwargs["http_api_keys"] if k)
    if "http_allowed_hosts" in kwargs:
        kwargs["http_allowed_hosts"] = tuple(str(h).strip() for h in kwargs["http_allowed_hosts"])
    if isinstance(kwargs.get("watch"), str):  # TMY_WATCH=0/false/no
        kwargs["watch"] = kwargs["watch"].strip().lower() not in ("0", "false", "no", "off", "")
    prefix = kwargs.get("admin_prefix", ".tmy")
    if not prefix.strip() or prefix != prefix.strip():
        raise ConfigError(f"admin_prefix {prefix!r} must be a non-empty word without spaces")
    if kwargs.get("log_format", "auto") not in ("auto", "json", "console"):
        raise ConfigError(f"log.format {kwargs['log_format']!r} must be auto, json or console")
    kwargs["source"] = str(path) if path.exists() else "<defaults>"
    return Settings(**kwargs)
