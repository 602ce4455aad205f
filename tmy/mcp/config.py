"""The ``mcp:`` config section: which MCP tool servers the daemon connects to.

::

    mcp:
      servers:
        files:              # NAME: letters, digits, _ and - (the model sees NAME__TOOL)
          command: npx      # stdio: tmy starts the process, talks over its stdin/stdout
          args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
          env: {LOG_LEVEL: warn, API_TOKEN: "${FILES_TOKEN}"}  # over a minimal inherited one
          cwd: /srv         # working directory of the process (relative: to the daemon's)
          timeout: 30       # seconds one call (and each list/handshake request) may take
        github:
          url: https://mcp.example.com/mcp   # streamable HTTP (the default for a url)
          headers: {Authorization: "Bearer ${GITHUB_TOKEN}"}
          transport: sse              # only for a server that still speaks the older SSE transport
          timeout: 60

Checked once, when the settings load: an unknown key, a wrong type, a server with both or
neither of ``command`` and ``url``, a bad name — each a ConfigError naming
``mcp.servers.NAME.KEY``.

``${VAR}`` inside an ``env`` or ``headers`` value is replaced by that environment
variable of the daemon when the config loads (a missing one is a ConfigError), so
tokens need not be written into the file. Values are secrets: none of them ever
appears in an error, the log or a server's state. A value that came from ``${VAR}``,
and the value of an env variable or header whose name says it is a credential
(token, key, secret, password, auth, cookie …), is registered with
:mod:`tmy.redact`, so a server that echoes it back has it masked as ``***``;
:meth:`ServerConfig.describe` says where a server is without any of them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from tmy import redact
from tmy.config.check import check_section
from tmy.errors import ConfigError

SECTION = "mcp"
DEFAULT_TIMEOUT = 30.0
Transport = Literal["stdio", "http", "sse"]
TRANSPORTS: tuple[str, ...] = ("stdio", "http", "sse")

# A server's name is part of the tool names the model sees (SERVER__TOOL, and OpenAI function
# names allow [a-zA-Z0-9_-] only); "__" would make SERVER__TOOL ambiguous.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECTION_SCHEMA: dict[str, Any] = {"servers": dict}
_SERVER_SCHEMA: dict[str, Any] = {
    "command": str,
    "args": list,
    "env": dict,
    "cwd": str,
    "url": str,
    "headers": dict,
    "transport": str,
    "timeout": (int, float),
}
_STDIO_ONLY = ("command", "args", "env", "cwd")
_HTTP_ONLY = ("url", "headers")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One ``mcp.servers.NAME`` entry, checked: stdio (``command``…) or HTTP (``url``…)."""

    name: str
    transport: Transport
    timeout: float = DEFAULT_TIMEOUT
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def describe(self) -> str:
        """Where the server is, for logs and errors — no env or header value, no URL password."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        return redact.safe_url(self.url or "")

    def __repr__(self) -> str:  # the dataclass repr would print env and header values
        return f"ServerConfig({self.name!r}, {self.transport}, {self.describe()!r})"


@dataclass(frozen=True, slots=True)
class McpConfig:
    """The validated ``mcp:`` section: ``servers`` by name, in the file's order."""

    servers: Mapping[str, ServerConfig] = field(default_factory=lambda: MappingProxyType({}))


def parse_mcp(raw: Mapping[str, Any] | None) -> McpConfig:
    """``mcp:`` as written -> :class:`McpConfig`; ConfigError naming the key."""
    data = check_section(SECTION, raw, _SECTION_SCHEMA)
    servers: dict[str, ServerConfig] = {}
    for name, entry in (data.get("servers") or {}).items():
        servers[str(name)] = _server(name, entry)
    return McpConfig(servers=MappingProxyType(servers))


def _server(name: Any, entry: Any) -> ServerConfig:
    """One server entry, checked."""
    where = f"{SECTION}.servers.{name}"
    if not isinstance(name, str) or not _NAME_RE.match(name) or "__" in name:
        raise ConfigError(
            f"'{where}': a server name is 1-64 letters, digits, _ and - without '__' "
            f"(the model sees tools as NAME__TOOL), got {name!r}"
        )
    if entry is None:
        raise ConfigError(f"'{where}' needs 'command' (a stdio server) or 'url' (an HTTP server)")
    data = check_section(where, entry, _SERVER_SCHEMA)
    command, url = data.get("command"), data.get("url")
    if (command is None) == (url is None):
        raise ConfigError(
            f"'{where}' needs exactly one of 'command' (a stdio server) or 'url' (an HTTP server)"
        )
    transport = _transport(where, data, stdio=command is not None)
    wrong = [k for k in (_HTTP_ONLY if command is not None else _STDIO_ONLY) if k in data]
    if wrong:
        kind = "a stdio server (command)" if command is not None else "an HTTP server (url)"
        raise ConfigError(f"'{where}.{wrong[0]}' does not apply to {kind}")
    timeout = data.get("timeout")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"'{where}.timeout' must be more than 0 seconds, got {timeout!r}")
    common: dict[str, Any] = {
        "name": name,
        "transport": transport,
        "timeout": DEFAULT_TIMEOUT if timeout is None else float(timeout),
    }
    if command is not None:
        if not command.strip():
            raise ConfigError(f"'{where}.command' must name a program")
        cwd = data.get("cwd")
        if cwd is not None and not cwd.strip():
            raise ConfigError(f"'{where}.cwd' must name a directory, got {cwd!r}")
        return ServerConfig(
            command=command,
            args=_args(where, data.get("args")),
            env=_values(f"{where}.env", data.get("env")),
            cwd=cwd,
            **common,
        )
    assert url is not None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"'{where}.url' must be an http:// or https:// URL, got {redact.safe_url(url)!r}"
        )
    redact.add_url(url)
    return ServerConfig(url=url, headers=_values(f"{where}.headers", data.get("headers")), **common)


def _transport(where: str, data: Mapping[str, Any], stdio: bool) -> Transport:
    given = data.get("transport")
    if given is None:
        return "stdio" if stdio else "http"
    if given == "streamable-http":
        given = "http"
    if given not in TRANSPORTS:
        raise ConfigError(
            f"'{where}.transport' must be one of {', '.join(TRANSPORTS)}, got {given!r}"
        )
    if (given == "stdio") != stdio:
        needs = "'command'" if given == "stdio" else "'url'"
        raise ConfigError(f"'{where}.transport' {given!r} needs {needs}")
    return given  # type: ignore[return-value]


def _args(where: str, args: Any) -> tuple[str, ...]:
    out: list[str] = []
    for i, arg in enumerate(args or ()):
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
            raise ConfigError(f"'{where}.args[{i}]' must be a text or a number, got {arg!r}")
        out.append(str(arg))
    return tuple(out)


def _values(where: str, raw: Any) -> Mapping[str, str]:
    """``env`` / ``headers``: text names to text values, ``${VAR}`` expanded, secrets registered."""
    out: dict[str, str] = {}
    for key, value in (raw or {}).items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"'{where}' has a name that is not a text: {key!r}")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            # the value itself is never shown: it may be a secret
            raise ConfigError(
                f"'{where}.{key}' must be a text or a number, got a {type(value).__name__}"
            )
        text = str(value)
        expanded = _expand(f"{where}.{key}", text)
        if expanded != text or redact.is_secret_name(key):
            redact.add(expanded)
            for part in redact.header_secrets("authorization", expanded)[1:]:
                redact.add(part)  # "Bearer <token>": the token alone too
        out[key] = expanded
    return MappingProxyType(out)


def _expand(where: str, text: str) -> str:
    """``text`` with each ``${VAR}`` replaced by the environment's value (ConfigError if unset)."""

    def value(match: re.Match[str]) -> str:
        var = match.group(1)
        found = os.environ.get(var)
        if found is None:
            raise ConfigError(f"'{where}': environment variable {var} is not set")
        return found

    return _VAR_RE.sub(value, text)


def config_of(sections: Mapping[str, Any]) -> McpConfig:
    """The ``mcp:`` section of ``settings.sections`` (no servers when the file has none)."""
    found = sections.get(SECTION)
    return found if isinstance(found, McpConfig) else McpConfig()
