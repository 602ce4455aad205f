"""Reading the daemon's JSON log back in tests (the ``log_file`` fixture lives in conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tmy import logs


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every event written to ``path`` so far (buffered lines flushed first)."""
    logs.flush()
    return [json.loads(line) for line in path.read_text().splitlines()]
