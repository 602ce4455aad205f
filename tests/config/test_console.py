"""``console:`` (the web console's section): defaults, the path, the passwords kept only as
hashes, the environment over the file, and errors naming the key with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.config import Settings, load_settings
from tmy.config.console import PasswordHash, WebConsoleConfig, normal_path, parse_console
from tmy.errors import ConfigError


def test_off_by_default_at_console() -> None:
    config = Settings().web_console
    assert config == WebConsoleConfig(enabled=False, path="/console")
    assert config.url("") == "/console/" and config.url("rules") == "/console/rules"
    assert Settings().console is True  # the terminal chat's switch is another thing


@pytest.mark.parametrize(
    ("given", "path"),
    [("/console", "/console"), ("console/", "/console"), ("/ops/tmy-console/", "/ops/tmy-console")],
)
def test_the_path_is_normalised(given: str, path: str) -> None:
    assert normal_path(given) == path
    assert parse_console({"path": given}).path == path


@pytest.mark.parametrize("bad", ["/", "", "/a b", "/x?y", "/v1", "/admin/console", "/healthz"])
def test_an_unusable_path_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"console\.path"):
        normal_path(bad)


def test_passwords_are_kept_only_as_hashes() -> None:
    config = parse_console({"enabled": True, "password": "s3cret", "viewer_password": "look"})
    assert isinstance(config.admin, PasswordHash) and isinstance(config.viewer, PasswordHash)
    assert config.admin.matches("s3cret") and not config.admin.matches("s3cre")
    assert config.viewer.matches("look")
    assert b"s3cret" not in config.admin.digest and config.admin.salt != config.viewer.salt
    settings = Settings(web_console={"enabled": True, "password": "s3cret"})
    for text in (repr(config), repr(settings), str(settings.__dict__)):
        assert "s3cret" not in text and "look" not in text


def test_a_console_that_is_off_keeps_no_hash() -> None:
    config = parse_console({"enabled": False, "password": "s3cret"})
    assert config.admin is None and config.viewer is None


def test_the_environment_overrides_the_files_passwords(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("console:\n  enabled: true\n  password: from-file\n")
    env = {"TMY_CONSOLE_PASSWORD": "from-env", "TMY_CONSOLE_VIEWER_PASSWORD": "viewer-env"}
    settings = load_settings(config, env=env)
    console = settings.web_console
    assert console.enabled and console.admin is not None and console.viewer is not None
    assert console.admin.matches("from-env") and not console.admin.matches("from-file")
    assert console.viewer.matches("viewer-env")
    only_file = load_settings(config, env={}).web_console
    assert only_file.admin is not None and only_file.admin.matches("from-file")
    assert only_file.viewer is None


def test_viewer_and_admin_passwords_must_differ() -> None:
    with pytest.raises(ConfigError, match="viewer_password' must differ"):
        parse_console({"enabled": True, "password": "same", "viewer_password": "same"})


def test_a_misspelt_key_names_the_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("rules: rules\nconsole:\n  enabled: true\n  pasword: x\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    text = str(caught.value)
    assert text.startswith(f"{config}:4:") and "console.pasword" in text
    assert "did you mean 'password'" in text


def test_a_wrong_type_or_path_names_the_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("console:\n  enabled: yes please\n")
    with pytest.raises(ConfigError, match=rf"^{config}:2: .*console.enabled"):
        load_settings(config, env={})
    config.write_text("console:\n  enabled: true\n  password: x\n  path: /admin\n")
    with pytest.raises(ConfigError, match=rf"^{config}:4: 'console.path'"):
        load_settings(config, env={})


def test_settings_copies_keep_the_parsed_section() -> None:
    settings = Settings(web_console={"enabled": True, "password": "pw", "path": "/c/"})
    again = settings.with_(watch=False)
    assert again.web_console is settings.web_console and again.web_console.path == "/c"
