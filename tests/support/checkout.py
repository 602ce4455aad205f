"""The ``in_checkout`` fixture: ``tmy.cli.main`` called in-process as from the checkout."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tmy import logs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def in_checkout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Path]:
    """Run as from the checkout (its config/, plugins/), without a developer's TMY_*/LLM env.

    ``main()`` points the log at the test's captured stderr; it is pointed back while that
    stream is still open (capsys, asked for here, closes after this), or a pending repeats
    report would be written to a closed stream.
    """
    monkeypatch.chdir(REPO)
    for name in list(os.environ):
        if name.startswith(("TMY_", "OPENAI_")):
            monkeypatch.delenv(name)
    yield REPO
    logs.configure("warning")
