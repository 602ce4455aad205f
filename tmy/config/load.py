"""load_settings: ``config/tmy.yaml``, then ``TMY_*`` environment variables, then CLI flags.

Relative paths written in a config file (``rules``, ``plugins``, a
``sqlite:///relative.db`` store, ``log.file``) are relative to the directory of
that file, so the daemon finds the same files whatever directory it is started
from; paths from the environment or the command line (and the built-in defaults,
used when there is no config file) are relative to the working directory.

Without ``--config`` / ``TMY_CONFIG`` the config is ``config/tmy.yaml`` in the
working directory, else the one of the checkout tmy runs from (next to the
``tmy`` package: ``python /path/to/checkout/run.py`` works from anywhere), else
none: the built-in defaults.

Everything is checked here, once: a wrong key is a ConfigError naming it, and, when
it is in the file, the file and its line (``config/tmy.yaml:12: unknown key …``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tmy.config.adapters import ADAPTER_SECTIONS, Adapters, parse_listen
from tmy.config.console import parse_console
from tmy.config.llm import load_config
from tmy.config.schema import SCHEMA, first_problem
from tmy.config.settings import Settings
from tmy.config.store import parse_store_url
from tmy.errors import ConfigError
from tmy.extension import ConfigSection, Extension
from tmy.logs import level_of
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
# an ENV key -> the Settings field it sets
_ENV_FIELDS = {
    "log.level": "log_level",
    "log.file": "log_file",
    "log.format": "log_format",
    "http.listen": "http_listen",
}
_HTTP_KEYS = ("listen", "api_keys", "header_timeout", "body_timeout", "keepalive_timeout",
              "max_connections", "max_requests_in_flight", "allowed_hosts")  # fmt: skip
# Settings field <- (section, key) in the file (None: top level)
_FIELDS: dict[str, tuple[str | None, str]] = {
    **{k: (None, k) for k in ("rules", "plugins", "store", "timezone", "admins")},
    **{k: (None, k) for k in ("admin_prefix", "watch", "error_reply")},
    **{k: ("limits", k) for k in ("step_timeout", "max_message_chars", "max_reply_chars")},
    **{k: ("limits", k) for k in ("max_id_chars", "max_value_bytes", "shutdown_grace")},
    "media_private_hosts": ("limits", "media_private_hosts"),
    **{f"log_{k}": ("log", k) for k in ("level", "file", "format")},
    "slow_step": ("log", "slow_step"),
    "log_rotate_max_bytes": ("log.rotate", "max_bytes"),
    "log_rotate_backups": ("log.rotate", "backups"),
    "console": ("adapters.console", "enabled"),
    "http_enabled": ("adapters.http", "enabled"),
    **{f"http_{k}": ("adapters.http", k) for k in _HTTP_KEYS},
}
# Settings field -> (its config key, the check of its value): values whose words the
# schema cannot judge (it sees only their type), checked once here rather than where
# they are used (the store opening, logging set up, the listener binding)
_VALUE_CHECKS: dict[str, tuple[str, Any]] = {
    "store": ("store", parse_store_url),
    "log_level": ("log.level", level_of),
    "http_listen": ("adapters.http.listen", parse_listen),
}


def load_settings(
    config: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    extensions: Iterable[Extension] = (),
    **overrides: Any,
) -> Settings:
    """Read the config file (optional when it is the default path), env, then overrides.

    ``extensions`` are the installed extensions: a top-level key one claims
    (``Extension.config``) is parsed by its ``parse`` into ``settings.sections[key]``
    instead of being refused as unknown.
    """
    env = dict(os.environ if env is None else env)
    path = Path(config or env.get("TMY_CONFIG") or DEFAULT_CONFIG)
    if not (config or env.get("TMY_CONFIG")) and not path.exists() and CHECKOUT_CONFIG.exists():
        path = CHECKOUT_CONFIG
    claimed = _claimed(extensions)
    text = ""
    data: dict[str, Any] = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        data = _parse_file(path, text, claimed)
    elif config is not None or env.get("TMY_CONFIG"):
        raise ConfigError(f"config file {str(path)!r} does not exist")
    values = _file_values(data)
    if data:
        _resolve_paths(values, path.absolute().parent)
    in_file = dict(values)  # before the environment and the flags have their say
    _apply_env(values, env)
    values.update({k: v for k, v in overrides.items() if v is not None})
    kwargs = _typed({k: v for k, v in values.items() if v is not None})
    kwargs["source"] = str(path) if path.exists() else "<defaults>"
    file = (path, text) if text else None
    _check_values(kwargs, file, in_file)
    try:
        kwargs["llm"] = load_config(kwargs.get("llm") or {}, env)
    except ConfigError as exc:
        raise _located(exc, file, "llm") from None
    try:
        kwargs["adapters"] = Adapters.parse(kwargs["adapters"])
    except ConfigError as exc:
        raise _located(exc, file, "adapters") from None
    try:  # the web console's passwords: the environment's over the file's, hashed
        kwargs["web_console"] = parse_console(data.get("console"), env)
    except ConfigError as exc:
        raise _located(exc, file, "console") from None
    sections = {}
    for key, section in claimed.items():
        try:
            sections[key] = _parse_section(section, data.get(key))
        except ConfigError as exc:
            raise _located(exc, file, key) from None
    kwargs["sections"] = sections
    try:
        return Settings(**kwargs)  # resolves the time zone: the one thing left to check
    except ConfigError as exc:
        from_file = data.get("timezone") == kwargs.get("timezone")
        raise _located(exc, file if from_file else None, "timezone") from None


def _claimed(extensions: Iterable[Extension]) -> dict[str, ConfigSection]:
    """Top-level key -> the section an extension claims; tmy's own keys are not to be had."""
    claimed: dict[str, ConfigSection] = {}
    for ext in extensions:
        if ext.config is None:
            continue
        if ext.config.key in SCHEMA[""]:
            raise ConfigError(
                f"extension {ext.name!r} claims the config section {ext.config.key!r}, "
                "which is tmy's own"
            )
        claimed[ext.config.key] = ext.config
    return claimed


def with_sections(settings: Settings, extensions: Iterable[Extension]) -> Settings:
    """``settings`` with a section for every extension that claims one and has none yet
    (parsed from ``{}``: its defaults) — for Settings made without load_settings (tests,
    harnesses), so an extension always finds ``settings.sections[key]``."""
    missing = {
        ext.config.key: _parse_section(ext.config, None)
        for ext in extensions
        if ext.config is not None and ext.config.key not in settings.sections
    }
    return settings.with_(sections={**settings.sections, **missing}) if missing else settings


def _parse_file(path: Path, text: str, claimed: Mapping[str, ConfigSection]) -> dict[str, Any]:
    """The file's mapping, its keys checked (ConfigError with file and line)."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.MarkedYAMLError as exc:
        line, what, hint = diagnose(text, exc)
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: {message(what, hint, where)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    problem = first_problem(data, "", claimed)
    if problem is not None:
        key, what = problem
        line = key_line(text, key) if isinstance(data, dict) else None
        raise ConfigError(f"{path}:{line}: {what}" if line else f"{path}: {what}")
    return data


def _file_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """Settings fields as the file sets them (None where it does not)."""
    values: dict[str, Any] = {}
    for name, (section, key) in _FIELDS.items():
        box: Any = data
        for part in section.split(".") if section else ():
            box = (box or {}).get(part)
        values[name] = (box or {}).get(key)
    adapters = data.get("adapters") or {}
    values["adapters"] = {k: dict(adapters.get(k) or {}) for k in ADAPTER_SECTIONS}
    values["llm"] = data.get("llm")
    return values


def _apply_env(values: dict[str, Any], env: Mapping[str, str]) -> None:
    """``TMY_*`` variables over the file's values."""
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
            values[_ENV_FIELDS.get(key, key)] = env[var]


def _typed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Values from the file, env and flags as the Settings fields take them; the checks
    that only make sense once everything is merged."""
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
    if "media_private_hosts" in kwargs:
        kwargs["media_private_hosts"] = tuple(str(h).strip() for h in kwargs["media_private_hosts"])
    if "http_allowed_hosts" in kwargs:
        kwargs["http_allowed_hosts"] = tuple(str(h).strip() for h in kwargs["http_allowed_hosts"])
    if isinstance(kwargs.get("watch"), str):  # TMY_WATCH=0/false/no
        kwargs["watch"] = kwargs["watch"].strip().lower() not in ("0", "false", "no", "off", "")
    prefix = kwargs.get("admin_prefix", ".tmy")
    if not prefix.strip() or prefix != prefix.strip():
        raise ConfigError(f"admin_prefix {prefix!r} must be a non-empty word without spaces")
    if kwargs.get("log_format", "auto") not in ("auto", "json", "console"):
        raise ConfigError(f"log.format {kwargs['log_format']!r} must be auto, json or console")
    return kwargs


def _check_values(
    kwargs: Mapping[str, Any], file: tuple[Path, str] | None, in_file: Mapping[str, Any]
) -> None:
    """The ``_VALUE_CHECKS``: a bad value is a ConfigError ``key: what is wrong``, with
    ``file:line:`` in front when the value is the file's (not the environment's or a flag's)."""
    for name, (key, check) in _VALUE_CHECKS.items():
        value = kwargs.get(name)
        if value is None:
            continue
        try:
            check(value)
        except ConfigError as exc:
            where = file if value is in_file.get(name) else None
            raise at_key(exc, key, where) from None


def at_key(exc: Exception, key: str, file: tuple[Path, str] | None = None) -> ConfigError:
    """``exc`` as a ConfigError ``key: message`` (the message as is when it starts with
    the key), behind ``file:line:`` when ``file`` (path, text) holds ``key``."""
    problem = str(exc) if str(exc).startswith(key) else f"{key}: {exc}"
    line = key_line(file[1], key) if file else None
    return ConfigError(f"{file[0]}:{line}: {problem}" if file and line else problem)


def setting_error(settings: Settings, key: str, exc: Exception) -> ConfigError:
    """``exc`` about config ``key`` worded as load_settings words its own errors: for a
    check that needs a layer above the config (``error_reply``, compiled by the value
    language): ``file:line: key: …`` when the settings' config file holds the key."""
    path = Path(settings.source)
    file = None
    if settings.source != "<defaults>" and path.is_file():
        file = (path, path.read_text(encoding="utf-8"))
    return at_key(exc, key, file)


def _parse_section(section: ConfigSection, raw: Any) -> Any:
    """An extension's section through its ``parse`` (an absent section parses as {})."""
    try:
        return section.parse({} if raw is None else raw)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"'{section.key}': {exc}") from None


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


# a dotted config key in an error message: 'llm.models.fast.timeout', adapters.onebot.path
_KEY_IN_MESSAGE = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)+")


def _located(exc: ConfigError, file: tuple[Path, str] | None, section: str) -> ConfigError:
    """``exc`` with ``file:line:`` in front: the line of the deepest key under ``section``
    that its message names, else of ``section`` itself; unchanged when the file holds
    neither (the value came from the environment, a flag or the defaults)."""
    if file is None:
        return exc
    path, text = file
    problem = str(exc)
    keys = [k for k in _KEY_IN_MESSAGE.findall(problem) if k.split(".")[0] == section]
    for key in [*keys, section]:
        line = key_line(text, key)
        if line:
            return ConfigError(f"{path}:{line}: {problem}")
    return exc


def key_line(text: str, dotted: str) -> int | None:
    """The line (1-based) of the deepest key of ``dotted`` (``a.b.c``) the YAML ``text``
    holds, None when not even the first is there. Read only when reporting an error."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in dotted.split("."):
        if not isinstance(node, yaml.MappingNode):
            break
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                line, node = key.start_mark.line + 1, value
                break
        else:
            break
    return line
