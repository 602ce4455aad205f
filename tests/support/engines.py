"""An Engine on rules given as text: a real rulebook, the default executors, a real store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tmy.config import Settings
from tmy.engine.core import Engine
from tmy.engine.services import Services
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.store import Store


def engine_of(
    rules: str, store: Store, *, settings: Settings | None = None, **gates: Any
) -> Engine:
    """The engine of ``rules`` (one file, ``rules.yaml``) on ``store``; ``gates``: Engine's
    own keywords (commands, switch, dry_run …)."""
    registry = default_registry()
    rulebook = load_sources([(Path("rules.yaml"), rules)], registry)
    return Engine(rulebook, Services(settings or Settings(), store, registry), **gates)
