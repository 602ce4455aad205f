"""load_settings: every section comes back frozen and checked, errors name the key and line.

The config is validated once, here; the sections are the objects the rest of tmy
reads (``settings.llm``, ``settings.memory``, ``settings.adapters.onebot``,
``settings.limits``, ``settings.log``, ``settings.tz``, ``settings.sections``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tmy.config import Settings, key_line, load_settings, with_sections
from tmy.config.adapters import OneBotConfig
from tmy.config.llm import LLMConfig
from tmy.config.memory import MemoryConfig
from tmy.errors import ConfigError
from tmy.extension import ConfigSection, Extension


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tmy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


FULL = """\
timezone: Asia/Shanghai
limits:
  step_timeout: 7
  shutdown_grace: 3
log:
  level: debug
  slow_step: 2
adapters:
  http:
    listen: 127.0.0.1:9999
    api_keys: [k1]
  onebot:
    enabled: true
    mode: forward
    url: ws://127.0.0.1:1
  openai:
    unmatched_reply: nothing here
llm:
  models:
    fast: {base_url: TESTONLY}
  memory:
    max_entries: 9
"""


# -- frozen sections ------------------------------------------------------------------------------


def test_every_section_is_a_frozen_checked_object(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL), env={})
    assert isinstance(settings.llm, LLMConfig) and settings.llm.default == "fast"
    assert isinstance(settings.memory, MemoryConfig) and settings.memory.max_entries == 9
    assert settings.memory is settings.llm.memory
    onebot = settings.adapters.onebot
    assert isinstance(onebot, OneBotConfig)
    assert (onebot.enabled, onebot.mode, onebot.url) == (True, "forward", "ws://127.0.0.1:1")
    assert settings.adapters.http.listen == "127.0.0.1:9999" == settings.http_listen
    assert settings.adapters.http.api_keys == ("k1",)
    assert settings.adapters.openai.unmatched_reply == "nothing here"
    assert settings.adapters.telegram.enabled is False
    assert (settings.limits.step_timeout, settings.limits.shutdown_grace) == (7, 3)
    assert (settings.log.level, settings.log.slow_step) == ("debug", 2)
    assert settings.tz == ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize(
    "change",
    [
        lambda s: setattr(s, "store", "sqlite:///other.db"),
        lambda s: setattr(s, "tz", None),
        lambda s: setattr(s.limits, "step_timeout", 1),
        lambda s: setattr(s.log, "level", "error"),
        lambda s: setattr(s.adapters, "onebot", None),
        lambda s: setattr(s.adapters.onebot, "access_token", "x"),
        lambda s: setattr(s.adapters.http, "api_keys", ()),
        lambda s: setattr(s.llm, "default", "other"),
        lambda s: setattr(s.memory, "max_entries", 1),
    ],
)
def test_mutation_is_refused(tmp_path: Path, change: Any) -> None:
    settings = load_settings(write(tmp_path, FULL), env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        change(settings)


def test_inner_mappings_are_read_only(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL), env={})
    with pytest.raises(TypeError):
        settings.llm.models["evil"] = settings.llm.models["fast"]  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.llm.scene_prompts["general"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.sections["x"] = 1  # type: ignore[index]


def test_with_rebuilds_the_derived_sections_and_keeps_the_checked_ones(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL), env={})
    moved = settings.with_(http_listen="127.0.0.1:0", timezone="UTC", step_timeout=1.5)
    assert moved.adapters.http.listen == "127.0.0.1:0"
    assert moved.tz == ZoneInfo("UTC") and moved.limits.step_timeout == 1.5
    assert moved.llm is settings.llm  # not parsed again
    assert moved.adapters.onebot is settings.adapters.onebot


def test_a_directly_built_settings_gets_defaults_and_parses_raw_sections() -> None:
    plain = Settings(rules=Path("r"), store="sqlite:///x.db")
    assert plain.tz is None  # local
    assert plain.adapters.onebot == OneBotConfig() and plain.adapters.console.enabled
    assert plain.limits.step_timeout == 60.0 and plain.log.format == "auto"
    assert plain.memory == MemoryConfig()
    raw = Settings(
        adapters={"telegram": {"enabled": True, "token_env": "TG"}},  # type: ignore[arg-type]
        llm={"models": {"m": {"base_url": "TESTONLY"}}},  # type: ignore[arg-type]
    )
    assert raw.adapters.telegram.token_env == "TG" and raw.llm.default == "m"
    with pytest.raises(ConfigError, match=r"unknown key 'llm\.modles'"):
        Settings(llm={"modles": {}})  # type: ignore[arg-type]


def test_sections_still_read_as_mappings(tmp_path: Path) -> None:
    """Code (and plugins) written when the sections were dicts keeps working."""
    settings = load_settings(write(tmp_path, FULL), env={"TMY_ONEBOT_TOKEN": "tok"})
    assert settings.adapters["onebot"]["access_token"] == "tok"
    assert (settings.adapters.get("telegram") or {}).get("enabled") is False
    assert isinstance(settings.adapters.http, Mapping)
    assert dict(settings.adapters.openai)["user_header"] == "X-OpenWebUI-User-Id"


# -- the time zone --------------------------------------------------------------------------------


def test_the_time_zone_is_resolved_once_when_the_settings_load(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "timezone: local\n"), env={}).tz is None
    settings = load_settings(write(tmp_path, "{}\n"), env={"TMY_TIMEZONE": "Europe/Berlin"})
    assert settings.tz == ZoneInfo("Europe/Berlin") and settings.timezone == "Europe/Berlin"


def test_a_bad_time_zone_in_the_file_names_its_line(tmp_path: Path) -> None:
    config = write(tmp_path, "rules: r\ntimezone: Mars/Olympus\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert str(caught.value) == (
        f"{config}:2: unknown timezone 'Mars/Olympus' (use an IANA name like 'Asia/Shanghai')"
    )


def test_a_bad_time_zone_from_the_environment_blames_no_file_line(tmp_path: Path) -> None:
    config = write(tmp_path, "timezone: UTC\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={"TMY_TIMEZONE": "Nowhere/Land"})
    assert str(caught.value).startswith("unknown timezone 'Nowhere/Land'")


# -- errors name the key and the line -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("rules: r\nlimits:\n  step_timout: 3\n", 3, "unknown key 'limits.step_timout'"),
        ("rules: r\nlog:\n  level: debug\n  format: fancy\n", 4, "'log.format' must be one of"),
        (
            "adapters:\n  onebot:\n    enabled: true\n    mode: sideways\n",
            4,
            "'adapters.onebot.mode' must be one of reverse, forward",
        ),
        ("adapters:\n  discord:\n    shards: 0\n", 3, "'adapters.discord.shards' must be"),
        ("store: x\nwatch: maybe\n", 2, "'watch' has the wrong type"),
        (
            "adapters:\n  onebot:\n    enabled: true\n    path: relative\n",
            4,
            "adapters.onebot.path must start with '/'",
        ),
        (
            "llm:\n  models:\n    m:\n      base_url: TESTONLY\n      timout: 3\n",
            5,
            "unknown key 'llm.models.m.timout' (did you mean 'timeout'?)",
        ),
        ("llm:\n  modles: {}\n", 2, "unknown key 'llm.modles' (did you mean 'models'?)"),
        (
            "llm:\n  memory:\n    dialogue:\n      kep: 3\n",
            4,
            "unknown key 'llm.memory.dialogue.kep' (did you mean 'keep'?)",
        ),
        ("a: 1\nllm: 5\n", 1, "unknown key 'a'"),
    ],
)
def test_errors_name_the_key_and_the_line(tmp_path: Path, text: str, line: int, says: str) -> None:
    config = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    message = str(caught.value)
    assert message.startswith(f"{config}:{line}: "), message
    assert says in message


def test_a_disabled_platform_is_not_checked_for_use(tmp_path: Path) -> None:
    """As before the sections were frozen: keys of an adapter that is off are not held
    against the file (their types still are)."""
    settings = load_settings(write(tmp_path, "adapters:\n  onebot:\n    path: rel\n"), env={})
    assert settings.adapters.onebot.path == "rel" and not settings.adapters.onebot.enabled


def test_a_yaml_syntax_error_still_names_its_line(tmp_path: Path) -> None:
    config = write(tmp_path, "rules: r\nadmins: [a, b\nstore: x\n")
    with pytest.raises(ConfigError, match=rf"^{config}:2: YAML syntax error: unclosed '\["):
        load_settings(config, env={})


def test_key_line_finds_the_deepest_key_written() -> None:
    text = "a:\n  b:\n    c: 1\nd: 2\n"
    assert key_line(text, "a.b.c") == 3
    assert key_line(text, "a.b.zz") == 2
    assert key_line(text, "d") == 4
    assert key_line(text, "zz") is None
    assert key_line("[unclosed", "a") is None


# -- extension sections ---------------------------------------------------------------------------


def _weather(raw: Mapping[str, Any]) -> tuple[str, int]:
    unknown = set(raw) - {"city", "days"}
    if unknown:
        raise ConfigError(f"unknown key 'weather.{sorted(unknown)[0]}'")
    return (str(raw.get("city", "Paris")), int(raw.get("days", 1)))


WEATHER = Extension(name="weather", config=ConfigSection("weather", _weather))


def test_a_key_an_extension_claims_is_parsed_by_it(tmp_path: Path) -> None:
    config = write(tmp_path, "rules: r\nweather:\n  city: Oslo\n  days: 3\n")
    settings = load_settings(config, env={}, extensions=[WEATHER])
    assert settings.sections["weather"] == ("Oslo", 3)
    absent = load_settings(write(tmp_path, "rules: r\n"), env={}, extensions=[WEATHER])
    assert absent.sections["weather"] == ("Paris", 1)  # parse({}): the extension's defaults


def test_without_its_extension_the_key_is_unknown(tmp_path: Path) -> None:
    config = write(tmp_path, "weather:\n  city: Oslo\n")
    with pytest.raises(ConfigError, match=r"unknown key 'weather'"):
        load_settings(config, env={})


def test_an_extension_section_error_names_the_key_and_line(tmp_path: Path) -> None:
    config = write(tmp_path, "rules: r\nweather:\n  city: Oslo\n  dayz: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={}, extensions=[WEATHER])
    assert str(caught.value) == f"{config}:4: unknown key 'weather.dayz'"


def test_an_extension_parse_that_raises_value_error_is_a_config_error(tmp_path: Path) -> None:
    config = write(tmp_path, "weather:\n  days: many\n")
    with pytest.raises(ConfigError, match=rf"^{config}:1: 'weather': invalid literal"):
        load_settings(config, env={}, extensions=[WEATHER])


def test_with_sections_fills_in_what_a_directly_built_settings_lacks() -> None:
    plain = with_sections(Settings(), [WEATHER])
    assert plain.sections["weather"] == ("Paris", 1)
    kept = Settings(sections={"weather": ("Rome", 2)})
    assert with_sections(kept, [WEATHER]) is kept


def test_an_extension_may_not_claim_a_section_of_tmy_itself(tmp_path: Path) -> None:
    thief = Extension(name="thief", config=ConfigSection("llm", dict))
    with pytest.raises(ConfigError, match=r"extension 'thief' claims .*'llm', which is tmy's own"):
        load_settings(write(tmp_path, "{}\n"), env={}, extensions=[thief])
