"""Settings: everything the daemon is configured with, frozen and checked once.

:func:`tmy.config.load.load_settings` fills one from ``config/tmy.yaml``, the
environment and the CLI flags. The flat fields (``settings.store``,
``settings.http_listen``, ``settings.step_timeout``, …) are what the environment and
the flags override and what ``settings.with_(…)`` changes; the sections are built
from them and from the file's sections when a Settings is made:

* ``settings.llm`` (:class:`~tmy.config.llm.LLMConfig`) and ``settings.memory``
  (:class:`~tmy.config.memory.MemoryConfig`, ``llm.memory:``);
* ``settings.adapters`` (:class:`~tmy.config.adapters.Adapters`: one object per adapter);
* ``settings.limits`` (:class:`Limits`) and ``settings.log`` (:class:`LogConfig`);
* ``settings.web_console`` (:class:`~tmy.config.console.WebConsoleConfig`, ``console:``:
  the web console; ``settings.console`` is the terminal chat's on/off);
* ``settings.tz``: the ``timezone`` resolved (None: the machine's local time);
* ``settings.sections``: installed extensions' own top-level sections, as their
  ``parse`` returned them.

A Settings made directly (``Settings(rules=…, store=…)``, as tests do) gets the
defaults; a raw ``llm``/``adapters`` mapping given to it is parsed and checked
there, so nothing downstream checks config again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tmy.config.adapters import Adapters, ConsoleConfig, HttpConfig
from tmy.config.console import WebConsoleConfig, parse_console
from tmy.config.llm import LLMConfig, load_config
from tmy.config.memory import MemoryConfig
from tmy.config.timezone import zone_of


@dataclass(frozen=True, slots=True)
class Limits:
    """``limits:``: how long a step may run and how big messages, replies and values get."""

    step_timeout: float = 60.0
    max_message_chars: int = 20_000
    max_reply_chars: int = 50_000
    max_id_chars: int = 256
    max_value_bytes: int = 4 * 1024 * 1024
    shutdown_grace: float = 30.0
    # hosts media may be downloaded from although they are private (loopback, LAN …);
    # "*": any. See tmy.media.hosts.
    media_private_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LogRotate:
    """``log.rotate:``: ``log.file`` moves to ``<file>.1`` … ``<file>.<backups>`` when it
    would grow past ``max_bytes`` (0: never; leave it to logrotate). See tmy.logs.rotate."""

    max_bytes: int = 0
    backups: int = 5


@dataclass(frozen=True, slots=True)
class LogConfig:
    """``log:``: where log lines go, how they look, when a slow step is reported."""

    level: str = "info"
    file: str = ""
    format: str = "auto"  # auto: readable lines on a terminal, JSON otherwise
    slow_step: float = 5.0  # a step still running after this many seconds logs step.running
    rotate: LogRotate = field(default_factory=LogRotate)  # applies to ``file`` only


def _hosts(value: Any) -> tuple[str, ...]:
    """A host list as given (one text counts as one host), trimmed."""
    return tuple(str(h).strip() for h in ([value] if isinstance(value, str) else value))


def _no_llm() -> LLMConfig:
    return load_config({})


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
    log_rotate_max_bytes: int = 0  # log.rotate: 0 = the log file never rotates
    log_rotate_backups: int = 5
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
    # every adapter's section; a mapping of raw sections ({"onebot": {...}}) is parsed
    adapters: Adapters = field(default_factory=Adapters)
    shutdown_grace: float = 30.0
    media_private_hosts: tuple[str, ...] = ()  # limits.media_private_hosts
    # ``llm:`` (with ``llm.memory``); a raw mapping is parsed with the process environment
    llm: LLMConfig = field(default_factory=_no_llm)
    # ``console:``, the web console (``console`` above is the terminal one); a raw mapping
    # is parsed (without the environment: load_settings applies TMY_CONSOLE_*)
    web_console: WebConsoleConfig = field(default_factory=WebConsoleConfig)
    source: str = "<defaults>"
    # installed extensions' top-level sections: key -> what its ConfigSection.parse returned
    sections: Mapping[str, Any] = field(default_factory=dict)
    # built from the fields above when the Settings is made (never passed in)
    limits: Limits = field(init=False, repr=False, compare=False)
    log: LogConfig = field(init=False, repr=False, compare=False)
    tz: tzinfo | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        llm: Any = self.llm
        if not isinstance(llm, LLMConfig):
            llm = load_config(llm)
        http = HttpConfig(
            enabled=self.http_enabled,
            listen=self.http_listen,
            api_keys=tuple(self.http_api_keys),
            header_timeout=self.http_header_timeout,
            body_timeout=self.http_body_timeout,
            keepalive_timeout=self.http_keepalive_timeout,
            max_connections=self.http_max_connections,
            max_requests_in_flight=self.http_max_requests_in_flight,
            allowed_hosts=tuple(self.http_allowed_hosts),
        )
        adapters = replace(
            Adapters.parse(self.adapters), http=http, console=ConsoleConfig(self.console)
        )
        limits = Limits(
            step_timeout=self.step_timeout,
            max_message_chars=self.max_message_chars,
            max_reply_chars=self.max_reply_chars,
            max_id_chars=self.max_id_chars,
            max_value_bytes=self.max_value_bytes,
            shutdown_grace=self.shutdown_grace,
            media_private_hosts=_hosts(self.media_private_hosts),
        )
        rotate = LogRotate(self.log_rotate_max_bytes, self.log_rotate_backups)
        log = LogConfig(self.log_level, self.log_file, self.log_format, self.slow_step, rotate)
        for name, value in (
            ("web_console", parse_console(self.web_console)),
            ("llm", llm),
            ("adapters", adapters),
            ("sections", MappingProxyType(dict(self.sections))),
            ("limits", limits),
            ("log", log),
            ("tz", zone_of(self.timezone)),
        ):
            object.__setattr__(self, name, value)

    @property
    def memory(self) -> MemoryConfig:
        """``llm.memory``: long-term memory's settings."""
        return self.llm.memory

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (flat fields or raw sections), its sections rebuilt."""
        return replace(self, **changes)
