"""The ``mcp:`` section: what it accepts, and the ConfigError naming the key for what it refuses."""

from __future__ import annotations

import pytest

from tmy import redact
from tmy.errors import ConfigError
from tmy.mcp.config import DEFAULT_TIMEOUT, McpConfig, config_of, parse_mcp


def one(entry: dict, name: str = "files"):
    return parse_mcp({"servers": {name: entry}}).servers[name]


def test_a_stdio_server_and_an_http_server() -> None:
    config = parse_mcp(
        {
            "servers": {
                "files": {
                    "command": "npx",
                    "args": ["-y", "pkg", 3],
                    "env": {"A": 1},
                    "cwd": "/srv",
                },
                "github": {
                    "url": "https://mcp.example.com/mcp",
                    "headers": {"X-A": "b"},
                    "timeout": 5,
                },
                "old": {"url": "http://127.0.0.1:9/sse", "transport": "sse"},
            }
        }
    )
    assert list(config.servers) == ["files", "github", "old"]
    files, github, old = config.servers.values()
    assert (files.transport, files.command, files.args, dict(files.env), files.cwd) == (
        "stdio",
        "npx",
        ("-y", "pkg", "3"),
        {"A": "1"},
        "/srv",
    )
    assert files.timeout == DEFAULT_TIMEOUT
    assert (github.transport, github.url, dict(github.headers), github.timeout) == (
        "http",
        "https://mcp.example.com/mcp",
        {"X-A": "b"},
        5.0,
    )
    assert old.transport == "sse"
    assert one({"url": "http://h/mcp", "transport": "streamable-http"}).transport == "http"


def test_no_section_and_an_empty_one_mean_no_servers() -> None:
    assert parse_mcp(None).servers == {}
    assert parse_mcp({}).servers == {}
    assert parse_mcp({"servers": None}).servers == {}
    assert config_of({}) == McpConfig()
    config = parse_mcp({"servers": {"a": {"command": "x"}}})
    assert config_of({"mcp": config}) is config


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"server": {}}, "unknown key 'mcp.server' (did you mean 'servers'?)"),
        ({"servers": []}, "'mcp.servers' has the wrong type"),
        (
            {"servers": {"gh": {"url": "https://x/mcp", "comand": "x"}}},
            "unknown key 'mcp.servers.gh.comand'",
        ),
        ({"servers": {"gh": None}}, "'mcp.servers.gh' needs 'command'"),
        ({"servers": {"gh": {}}}, "'mcp.servers.gh' needs exactly one of 'command'"),
        ({"servers": {"gh": {"command": "x", "url": "http://h"}}}, "needs exactly one of"),
        (
            {"servers": {"gh": {"url": "ftp://h/mcp"}}},
            "'mcp.servers.gh.url' must be an http:// or https:// URL",
        ),
        (
            {"servers": {"gh": {"url": "http://h", "env": {}}}},
            "'mcp.servers.gh.env' does not apply to an HTTP",
        ),
        (
            {"servers": {"gh": {"command": "x", "headers": {}}}},
            "'mcp.servers.gh.headers' does not apply to a stdio",
        ),
        (
            {"servers": {"gh": {"command": "x", "transport": "sse"}}},
            "'mcp.servers.gh.transport' 'sse' needs 'url'",
        ),
        (
            {"servers": {"gh": {"url": "http://h", "transport": "ws"}}},
            "must be one of stdio, http, sse",
        ),
        (
            {"servers": {"gh": {"command": "x", "timeout": 0}}},
            "'mcp.servers.gh.timeout' must be more than 0",
        ),
        (
            {"servers": {"gh": {"command": "x", "timeout": -1}}},
            "'mcp.servers.gh.timeout' must not be negative",
        ),
        (
            {"servers": {"gh": {"command": "x", "timeout": "5"}}},
            "'mcp.servers.gh.timeout' has the wrong type",
        ),
        ({"servers": {"gh": {"command": " "}}}, "'mcp.servers.gh.command' must name a program"),
        (
            {"servers": {"gh": {"command": "x", "args": "-y"}}},
            "'mcp.servers.gh.args' has the wrong type",
        ),
        (
            {"servers": {"gh": {"command": "x", "args": [{"a": 1}]}}},
            "'mcp.servers.gh.args[0]' must be a text",
        ),
        (
            {"servers": {"gh": {"command": "x", "env": {"A": ["v"]}}}},
            "'mcp.servers.gh.env.A' must be a text",
        ),
        ({"servers": {"gh": {"command": "x", "env": {1: "v"}}}}, "'mcp.servers.gh.env' has a name"),
        ({"servers": {"a__b": {"command": "x"}}}, "'mcp.servers.a__b': a server name is"),
        ({"servers": {"a/b": {"command": "x"}}}, "'mcp.servers.a/b': a server name is"),
        ({"servers": {"a b": {"command": "x"}}}, "(the model sees tools as NAME__TOOL)"),
    ],
)
def test_bad_input_names_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp(raw)
    assert message in str(caught.value)


def test_names_may_use_letters_digits_dash_and_single_underscores() -> None:
    assert list(parse_mcp({"servers": {"git-hub_2": {"command": "x"}}}).servers) == ["git-hub_2"]


def test_env_and_header_values_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H1A_TEST_TOKEN", "sk-h1a-from-the-environment")
    server = one({"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${H1A_TEST_TOKEN}"}})
    assert server.headers["Authorization"] == "Bearer sk-h1a-from-the-environment"
    stdio = one({"command": "x", "env": {"TOKEN": "${H1A_TEST_TOKEN}", "PLAIN": "a$b{c}"}})
    assert dict(stdio.env) == {"TOKEN": "sk-h1a-from-the-environment", "PLAIN": "a$b{c}"}
    # registered as secrets: a server echoing them gets them masked in every error and log line
    assert redact.redact("echo: Bearer sk-h1a-from-the-environment") == "echo: ***"
    assert redact.redact("token=sk-h1a-from-the-environment") == "token=***"


def test_a_missing_environment_variable_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("H1A_NOT_SET", raising=False)
    with pytest.raises(
        ConfigError, match=r"'mcp.servers.gh.env.TOKEN': environment variable H1A_NOT_SET"
    ):
        parse_mcp({"servers": {"gh": {"command": "x", "env": {"TOKEN": "${H1A_NOT_SET}"}}}})


def test_credential_values_are_registered_and_never_shown() -> None:
    server = one(
        {
            "url": "https://user:h1a-url-password@h/mcp",
            "headers": {"X-Api-Key": "h1a-header-secret-1", "Accept-Language": "h1a-not-a-secret"},
        }
    )
    stdio = one({"command": "srv", "args": ["--x"], "env": {"GITHUB_TOKEN": "h1a-env-secret-22"}})
    assert redact.redact("h1a-header-secret-1 h1a-env-secret-22 h1a-url-password") == "*** *** ***"
    assert redact.redact("h1a-not-a-secret") == "h1a-not-a-secret"
    for shown in (repr(server), server.describe(), repr(stdio), stdio.describe()):
        assert "secret" not in shown and "password" not in shown
    assert server.describe() == "https://user:***@h/mcp"
    assert stdio.describe() == "srv --x"


def test_a_bad_value_is_not_echoed_in_the_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp(
            {
                "servers": {
                    "gh": {"url": "https://h", "headers": {"Authorization": {"k": "s3cr3t-v"}}}
                }
            }
        )
    assert "s3cr3t-v" not in str(caught.value)
    assert "'mcp.servers.gh.headers.Authorization' must be a text or a number, got a dict" in str(
        caught.value
    )
