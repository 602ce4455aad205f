"""The schema against the shipped config/tmy.yaml: every adapter key is documented there."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tmy.config.adapters import Adapters
from tmy.config.schema import SCHEMA, first_problem

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "tmy.yaml"
PLATFORMS = ("qq", "feishu", "slack", "matrix", "satori")


def test_the_shipped_config_passes_the_schema() -> None:
    assert first_problem(yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))) is None


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_key_of_a_newer_platform_is_documented(platform: str) -> None:
    shipped = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))["adapters"][platform]
    assert set(shipped) == set(SCHEMA[f"adapters.{platform}"]), platform
    assert shipped["enabled"] is False  # off by default


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_documented_defaults_are_the_code_defaults(platform: str) -> None:
    shipped = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))["adapters"][platform]
    default = getattr(Adapters(), platform)
    for key, value in shipped.items():
        assert getattr(default, key) == (tuple(value) if isinstance(value, list) else value), key
