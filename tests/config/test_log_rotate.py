"""``log.rotate``: read into ``settings.log.rotate``; a bad value names the key and its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tmy.config import LogRotate, Settings, load_settings
from tmy.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tmy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_rotation_is_off_by_default() -> None:
    assert Settings().log.rotate == LogRotate(max_bytes=0, backups=5)


def test_the_file_sets_both_keys_and_the_log_file_beside_it(tmp_path: Path) -> None:
    path = write(tmp_path, "log:\n  file: logs/tmy.log\n  rotate:\n    max_bytes: 1048576\n"
                 "    backups: 3\n")  # fmt: skip
    settings = load_settings(path, env={})
    assert settings.log.rotate == LogRotate(max_bytes=1048576, backups=3)
    assert Path(settings.log.file).resolve() == (tmp_path / "logs" / "tmy.log").resolve()


def test_one_key_keeps_the_other_default(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "log:\n  rotate: {max_bytes: 500}\n"), env={})
    assert settings.log.rotate == LogRotate(max_bytes=500, backups=5)


def test_with_rebuilds_the_section() -> None:
    settings = Settings().with_(log_rotate_max_bytes=10, log_rotate_backups=2)
    assert settings.log.rotate == LogRotate(max_bytes=10, backups=2)


@pytest.mark.parametrize(
    ("body", "line", "problem"),
    [
        ("    max_bytes: -1\n", 5, "'log.rotate.max_bytes' must be >= 0 (got -1)"),
        (
            "    max_bytes: 10MB\n",
            5,
            "'log.rotate.max_bytes' has the wrong type ('10MB'); expected a whole number of bytes",
        ),
        ("    max_bytes: 1.5\n", 5, "'log.rotate.max_bytes' has the wrong type (1.5)"),
        ("    backups: 0\n", 5, "'log.rotate.backups' must be > 0 (got 0)"),
        ("    backups: true\n", 5, "'log.rotate.backups' has the wrong type (True)"),
        (
            "    max_bytes: 100\n    backup: 2\n",
            6,
            "unknown key 'log.rotate.backup' (did you mean 'backups'?)",
        ),
    ],
)
def test_a_bad_value_is_an_error_at_its_line(
    tmp_path: Path, body: str, line: int, problem: str
) -> None:
    path = write(tmp_path, f"rules: r\nlog:\n  file: tmy.log\n  rotate:\n{body}")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert str(caught.value).startswith(f"{path}:{line}: {problem}")


def test_rotate_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "log:\n  rotate: 1048576\n")
    with pytest.raises(ConfigError, match=r"tmy\.yaml:2: 'log\.rotate' has the wrong type"):
        load_settings(path, env={})


def test_the_deploy_docs_example_loads(tmp_path: Path) -> None:
    """docs/deploy.md's log.rotate example is a config tmy accepts, meaning what it says."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
    blocks = re.findall(r"```yaml\n(.*?)```", docs.read_text(encoding="utf-8"), re.S)
    (example,) = [b for b in blocks if "rotate:" in b]
    settings = load_settings(write(tmp_path, example), env={})
    assert settings.log.rotate == LogRotate(max_bytes=100 * 1024 * 1024, backups=5)
    assert Path(settings.log.file).resolve() == (tmp_path.parent / "data" / "tmy.log").resolve()
