"""Values the schema sees only as strings, judged once at load with their key and line.

``adapters.http.listen``, ``log.level`` and ``store`` used to pass load_settings and
fail later (the listener binding, logging set up, the store opening) without the
key or the line; ``error_reply`` compiles in tmy.values, above the config, so
``run.py check`` judges it and words the error as load_settings would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.adapters.http import parse_listen as listener_parse_listen
from tmy.config import Settings, load_settings, parse_listen, parse_store_url, setting_error
from tmy.config.adapters import HttpConfig
from tmy.errors import AdapterError, ConfigError

BASE = "watch: false\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tmy.yaml"
    path.write_text(BASE + text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "adapters:\n  http:\n    listen: nonsense\n",
            ":4: adapters.http.listen: HTTP listen address 'nonsense' must be HOST:PORT, "
            "e.g. 127.0.0.1:8080",
        ),
        (
            "adapters:\n  http:\n    listen: 'host:99999'\n",
            ":4: adapters.http.listen: HTTP listen address 'host:99999' must be HOST:PORT",
        ),
        (
            "log:\n  level: verbose\n",
            ":3: log.level: log level 'verbose' must be one of debug, info, warning, error, "
            "critical",
        ),
        ("store: postgres://x\n", ":2: store: unsupported store URL scheme 'postgres'"),
        ("store: 'sqlite://x.db'\n", ":2: store: invalid SQLite URL 'sqlite://x.db'"),
        ("store: 'sqlite:///'\n", ":2: store: invalid SQLite URL 'sqlite:///'"),
        (
            "store: 'sqlite:///x.db?foo=1'\n",
            ":2: store: SQLite URLs take no query parameters but ?lease_ttl=<seconds>",
        ),
        ("store: nothing\n", ":2: store: invalid store URL 'nothing'"),
        (  # caught by check, not first by serve (an adapter is enabled only there)
            "adapters:\n  onebot:\n    admins_from: [owner, creator]\n",
            ":4: 'adapters.onebot.admins_from': 'creator' is not one of owner, admin",
        ),
        (
            "adapters:\n  discord:\n    admins_from: [admin, 1234, mods]\n",
            ":4: 'adapters.discord.admins_from': 'mods' is not one of owner, admin or a role id",
        ),
    ],
)
def test_a_bad_value_in_the_file_names_its_key_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert str(caught.value).startswith(f"{path}{expected}")


def test_a_bad_value_from_the_environment_names_the_key_without_a_line(tmp_path: Path) -> None:
    path = write(tmp_path, "log:\n  level: info\nadapters:\n  http:\n    listen: ':8080'\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={"TMY_LOG_LEVEL": "loud"})
    assert str(caught.value) == (
        "log.level: log level 'loud' must be one of debug, info, warning, error, critical"
    )
    with pytest.raises(ConfigError, match=r"^adapters\.http\.listen: HTTP listen address 'x'"):
        load_settings(path, env={"TMY_HTTP": "x"})
    with pytest.raises(ConfigError, match=r"^store: unsupported store URL scheme 'mysql'"):
        load_settings(path, env={"TMY_STORE": "mysql://db"})


def test_good_values_load_and_the_listen_address_is_parsed_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "store: 'redis://127.0.0.1:6379/0'\nlog:\n  level: WARNING\n"
        "adapters:\n  http:\n    listen: '[::1]:9001'\n",
    )
    settings = load_settings(path, env={})
    http = settings.adapters.http
    assert (http.listen, http.host, http.port) == ("[::1]:9001", "::1", 9001)
    assert settings.log.level == "WARNING"  # any case, as logging takes it
    assert Settings().adapters.http.host == "127.0.0.1"


def test_a_settings_made_directly_refuses_a_bad_listen_address() -> None:
    with pytest.raises(ConfigError, match=r"^adapters\.http\.listen: HTTP listen address"):
        Settings(http_listen="8080")
    with pytest.raises(ConfigError, match="HOST:PORT"):
        HttpConfig(listen="host:port")


def test_the_listener_keeps_its_own_error_class() -> None:
    with pytest.raises(AdapterError, match="HOST:PORT"):
        listener_parse_listen("nonsense")
    assert listener_parse_listen(":9000") == parse_listen(":9000") == ("127.0.0.1", 9000)


def test_store_url_syntax() -> None:
    sqlite = parse_store_url("sqlite:///data/tmy.db?lease_ttl=2")
    assert (sqlite.scheme, sqlite.path, sqlite.lease_ttl) == ("sqlite", "data/tmy.db", "2")
    assert parse_store_url("SQLITE:////var/x.db").path == "/var/x.db"
    assert parse_store_url("sqlite:///:memory:").path == ":memory:"
    assert parse_store_url("rediss+cluster://a:1,b:2/").scheme == "rediss+cluster"


def test_error_reply_is_worded_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "error_reply: '{NOPE}'\n")
    settings = load_settings(path, env={})
    error = setting_error(settings, "error_reply", ConfigError("error_reply '{NOPE}' refers to"))
    assert str(error) == f"{path}:2: error_reply '{{NOPE}}' refers to"
    bare = setting_error(Settings(), "error_reply", ValueError("bad"))
    assert str(bare) == "error_reply: bad"
