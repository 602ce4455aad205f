"""``limits.media_private_hosts``: the private hosts tmy may download media from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.config import Settings, load_settings
from tmy.errors import ConfigError


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "tmy.yaml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env={})


def test_the_default_is_no_private_host(tmp_path: Path) -> None:
    assert load(tmp_path, "limits: {step_timeout: 5}\n").limits.media_private_hosts == ()
    assert Settings().limits.media_private_hosts == ()


def test_hosts_and_ips_are_read_trimmed(tmp_path: Path) -> None:
    text = 'limits:\n  media_private_hosts: ["127.0.0.1", " napcat.lan ", "::1"]\n'
    hosts = load(tmp_path, text).limits.media_private_hosts
    assert hosts == ("127.0.0.1", "napcat.lan", "::1")
    assert load(tmp_path, "limits:\n  media_private_hosts: ['*']\n").limits.media_private_hosts == (
        "*",
    )
    assert Settings(media_private_hosts=("10.0.0.2",)).limits.media_private_hosts == ("10.0.0.2",)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("127.0.0.1", "wrong type"),
        ("[http://127.0.0.1:3000]", "not URLs or ranges"),
        ("[10.0.0.0/8]", "not URLs or ranges"),
        ("['']", "list of host names or IP addresses"),
        ("[3]", "list of host names or IP addresses"),
    ],
)
def test_a_wrong_value_names_the_key_and_line(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, f"limits:\n  step_timeout: 5\n  media_private_hosts: {value}\n")
    message = str(refused.value)
    assert "tmy.yaml:3:" in message and "limits.media_private_hosts" in message
    assert problem in message
