"""Fixtures the engine's unit tests share: a real SQLite store in the test's tmp_path; the
log into a buffer, with no bound context (the FAQ line's own way), for the line tests."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tmy import logs
from tmy.store import Store, open_store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'tmy.db'}")
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def nothing_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a daemon no plugin has bound context in: the spliced line's way. (Another
    test of the session binding a structlog context variable leaves it registered.)"""
    monkeypatch.setattr(logs, "BOUND", {})


@pytest.fixture
def log_buffer() -> Iterator[io.BytesIO]:
    """``info`` lines into a buffer for the test; ``warning`` into a throwaway one after."""
    out = io.BytesIO()
    logs.configure("info", stream=out)
    try:
        yield out
    finally:
        logs.configure("warning", stream=io.BytesIO())
