"""Rules for the MCP server tests: tool rules behind different filters, and a counter that
shows whether the admin-only rule ever ran."""

from __future__ import annotations

from pathlib import Path

import pytest

RULES = """
variables:
  wiped: {scope: global, default: 0}
rules:
  - id: weather
    triggers: ["weather *"]
    tool:
      description: "The weather in a city today."
      parameters:
        type: object
        properties: {city: {type: string}}
        required: [city]
    steps:
      - {plugin: ADJUST, input: "Sunny in {QUESTION[city]} for {USER}@{PLATFORM}"}
  - id: wipe.all
    triggers: ["wipe"]
    admin_only: true
    tool: {description: "Wipe everything (admins only)."}
    steps:
      - {plugin: ADJUST, input: "?= wiped + 1", save: wiped}
      - {plugin: ADJUST, input: "wiped {wiped} times"}
  - id: telegram_only
    platforms: [telegram]
    tool: {description: "Only on Telegram."}
    steps:
      - {plugin: ADJUST, input: "hello telegram"}
  - id: broken
    tool: {description: "Always fails."}
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0"}
  - id: plain
    triggers: ["plain"]
    steps:
      - {plugin: ADJUST, input: "not a tool"}
"""

NOT_ADMIN = ["broken", "weather"]  # what a caller who is no admin, on mcp, sees (by name)
ADMIN = ["broken", "weather", "wipe_all"]


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """A rules folder holding :data:`RULES` (and nothing else)."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "tools.yaml").write_text(RULES, encoding="utf-8")
    return folder
