"""An extension's config section reaches ``settings.sections`` however the Settings was made.

load_settings parses a claimed section from the file; a Settings made directly
(``tmy.testing.Bot``, harnesses) has none, so the App fills in each extension's
defaults (``with_sections``) and the extension's lifespan always finds its key.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tmy.extension import ConfigSection, Extension
from tmy.testing import Bot
from tmy.types import Services


def _parse(raw: Mapping[str, Any]) -> tuple[str, int]:
    return str(raw.get("city", "Paris")), int(raw.get("days", 1))


@contextlib.asynccontextmanager
async def _lifespan(services: Services) -> AsyncIterator[Any]:
    yield services.settings.sections["weather"]


WEATHER = Extension(name="weather", config=ConfigSection("weather", _parse), lifespan=_lifespan)
RULES = {
    "r.yaml": "rules:\n  - id: hi\n    triggers: [hi]\n"
    "    steps:\n      - {plugin: ADJUST, input: hello}\n"
}


async def test_an_extension_finds_its_section_defaults_under_the_test_bot() -> None:
    async with Bot(RULES, extensions=(WEATHER,)) as bot:
        assert bot.app.settings.sections["weather"] == ("Paris", 1)
        assert bot.app.state["weather"] == ("Paris", 1)


async def test_a_section_given_with_the_settings_is_kept() -> None:
    async with Bot(RULES, extensions=(WEATHER,), sections={"weather": ("Rome", 2)}) as bot:
        assert bot.app.state["weather"] == ("Rome", 2)
