"""The ``in_checkout`` fixture: ``tmy.cli.main`` called in-process as from the checkout."""

from __future__ import annotations

import os
import subprocess
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


def shipped(folder: str) -> list[Path]:
    """The files under ``folder`` (``"rules"``) the checkout ships: git's tracked ones.

    An operator who follows the README adds their own rules to ``rules/``; the tests
    of what tmy ships (the starter set, the README's outputs) must not read those.
    Outside a git checkout (an unpacked archive) every file there is shipped.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", folder], cwd=REPO, capture_output=True, timeout=60
    )
    if listed.returncode != 0:
        return sorted(p for p in (REPO / folder).rglob("*") if p.is_file())
    names = filter(None, listed.stdout.decode().split("\0"))
    return sorted(REPO / name for name in names if (REPO / name).is_file())
