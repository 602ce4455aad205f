"""Fixtures the engine's unit tests share: a real SQLite store in the test's tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tmy.store import Store, open_store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'tmy.db'}")
    await s.open()
    try:
        yield s
    finally:
        await s.close()
