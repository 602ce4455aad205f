"""The shipped rules and plugins (rules/, plugins/ of this checkout) as a test bot."""

from __future__ import annotations

from pathlib import Path

from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]


def samples(store: str) -> Bot:
    """A :class:`Bot` on the sample rules and the example plugins, on ``store``."""
    return Bot(REPO / "examples", plugins=REPO / "plugins", store=store)
