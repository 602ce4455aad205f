"""Which Host a listener answers to and which Origin may change state (tmy.adapters.origin).

The listener-level behaviour (421/403 on a real port) is in test_http_adapter.py;
these cover the address forms a real port cannot (a wildcard, a LAN address).
"""

from __future__ import annotations

import pytest

from tmy.adapters.origin import HostPolicy, split_host


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", "8080")),
        ("LocalHost", ("localhost", "")),
        ("[::1]:8080", ("::1", "8080")),
        ("[::1]", ("::1", "")),
        ("bot.example.com.:443", ("bot.example.com", "443")),
        ("::1", ("::1", "")),
    ],
)
def test_split_host(header: str, expected: tuple[str, str]) -> None:
    assert split_host(header) == expected


def test_loopback_listener_answers_loopback_names_only() -> None:
    policy = HostPolicy("127.0.0.1")
    for ok in ("127.0.0.1:8080", "localhost", "127.0.0.2", "[::1]:8080", None):
        assert policy.host_problem(ok) is None, ok
    for bad in ("evil.example", "192.168.1.5", "127.0.0.1.nip.io", "localhost.evil.example"):
        assert "allowed_hosts" in (policy.host_problem(bad) or ""), bad


def test_wildcard_listener_answers_any_ip_literal_and_listed_names() -> None:
    """0.0.0.0: every address of the machine works; a name must be listed (rebinding)."""
    policy = HostPolicy("0.0.0.0", ["tmy", "host.docker.internal"])
    for ok in ("192.168.1.5:8080", "10.0.0.7", "[fe80::1]:8080", "localhost", "tmy:8080",
               "host.docker.internal"):  # fmt: skip
        assert policy.host_problem(ok) is None, ok
    assert policy.host_problem("evil.example") is not None
    assert HostPolicy("::").host_problem("bot.example.com") is not None


def test_a_specific_address_answers_itself_and_allowed_hosts() -> None:
    policy = HostPolicy("192.168.1.5", ["bot.example.com"])
    assert policy.host_problem("192.168.1.5:8080") is None
    assert policy.host_problem("Bot.Example.Com") is None
    assert policy.host_problem("127.0.0.1") is not None  # not what it listens on
    assert HostPolicy("127.0.0.1", ["*"]).host_problem("anything.example") is None


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, False),
        ({"Origin": "http://127.0.0.1:8080", "Host": "127.0.0.1:8080"}, False),
        ({"Origin": "http://localhost", "Host": "localhost:80"}, False),
        ({"Origin": "https://bot.example.com", "Host": "127.0.0.1:8080"}, False),  # listed
        ({"Sec-Fetch-Site": "same-origin"}, False),
        ({"Sec-Fetch-Site": "none"}, False),  # typed into the address bar
        ({"Origin": "http://localhost:3000", "Host": "localhost:8080"}, True),
        ({"Origin": "http://evil.example", "Host": "127.0.0.1:8080"}, True),
        ({"Origin": "null", "Host": "127.0.0.1:8080"}, True),
        ({"Origin": "http://[bad", "Host": "127.0.0.1:8080"}, True),
        ({"Sec-Fetch-Site": "cross-site"}, True),
    ],
)
def test_cross_site_problem(headers: dict[str, str], refused: bool) -> None:
    policy = HostPolicy("127.0.0.1", ["bot.example.com"])
    assert (policy.cross_site_problem(headers) is not None) is refused


def test_the_telegram_webhook_host_is_allowed_when_the_webhook_is_served_here() -> None:
    from tmy.adapters.origin import allowed_hosts_of
    from tmy.config import Settings
    from tmy.daemon import build_adapters

    webhook = {"enabled": True, "mode": "webhook", "webhook_url": "https://bot.example.com/tg/hook"}
    settings = Settings(http_allowed_hosts=("a.example",), adapters={"telegram": webhook})
    assert allowed_hosts_of(settings) == ("a.example", "bot.example.com")
    polling = Settings(adapters={"telegram": {**webhook, "mode": "polling"}})
    assert allowed_hosts_of(polling) == ()
    http = build_adapters(Settings(http_allowed_hosts=("b.example",)), console=False)[0]
    assert http.hosts.host_problem("b.example") is None
    assert http.hosts.host_problem("c.example") is not None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("[https://bot.example.com]", "not URLs"),
        ("['']", "non-empty strings"),
        ("bot.example.com", "wrong type"),
    ],
)
def test_allowed_hosts_in_the_config_must_be_host_names(tmp_path, value: str, says: str) -> None:
    from tmy.config import load_settings
    from tmy.errors import ConfigError

    config = tmp_path / "tmy.yaml"
    config.write_text(f"adapters:\n  http:\n    allowed_hosts: {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=says):
        load_settings(config, env={})
    config.write_text("adapters:\n  http:\n    allowed_hosts: [Bot.Example.com]\n")
    assert load_settings(config, env={}).http_allowed_hosts == ("Bot.Example.com",)
