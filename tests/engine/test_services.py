"""Services (tmy/engine/services.py) and what an engine is given at construction.

A second engine (a dry run, a buffered scheduled run) is built with everything it
needs — ``fixed_now``, ``dry_run``, its derived services and their extension
state — rather than patched afterwards; a reload swaps rules and registry through
the engine.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest

from tmy.config import Settings
from tmy.engine.core import Engine
from tmy.engine.services import Services
from tmy.executors import default_registry
from tmy.message import Message
from tmy.rulebook.loader import load_sources
from tmy.store import Store
from tmy.store.overlay import OverlayStore

NOW_RULES = """
rules:
  - id: now
    triggers: ["now"]
    steps:
      - {plugin: ADJUST, input: "{NOW}"}
"""


def services_on(store: Store, state: dict[str, Any] | None = None) -> Services:
    view = MappingProxyType(state if state is not None else {})
    return Services(Settings(), store, default_registry(), view)


async def test_derive_shares_state_unless_told_and_makes_the_replaced_ones(store: Store) -> None:
    class Ext:  # an extension state that holds the services it runs on
        def __init__(self, services: Services) -> None:
            self.services = services

    real = services_on(store, {"a": "shared", "b": "live"})
    same = real.derive(OverlayStore(store))
    assert same.state is real.state and same.store is not real.store

    dry = real.derive(OverlayStore(store), state={"b": Ext})
    assert dry.state["a"] == "shared"
    assert isinstance(dry.state["b"], Ext) and dry.state["b"].services is dry
    assert real.state["b"] == "live"  # the real services' state is untouched
    with pytest.raises(TypeError):
        dry.state["c"] = 1  # type: ignore[index]  # read-only, like the app's


async def test_an_engine_is_built_with_its_clock_and_dry_run(store: Store) -> None:
    registry = default_registry()
    rulebook = load_sources([(Path("r.yaml"), NOW_RULES)], registry)
    pinned = Engine(
        rulebook, Services(Settings(), store, registry), fixed_now="2026-01-02T03:04:05+00:00"
    )
    assert pinned.dry_run is False
    assert (await pinned.handle(Message("now", user="u"))).text == "2026-01-02T03:04:05+00:00"
    pinned.pin_now("2027-01-01T00:00:00+00:00")
    assert (await pinned.handle(Message("now", user="u"))).text == "2027-01-01T00:00:00+00:00"
    pinned.pin_now(None)
    assert not (await pinned.handle(Message("now", user="u"))).text.startswith("2027-01-01")
    dry = Engine(rulebook, Services(Settings(), store, registry), dry_run=True)
    assert dry.dry_run is True and dry.fixed_now is None


async def test_a_reload_swaps_rules_and_registry_together(store: Store) -> None:
    registry = default_registry()
    rulebook = load_sources([(Path("r.yaml"), NOW_RULES)], registry)
    engine = Engine(rulebook, Services(Settings(), store, registry))
    new_registry = default_registry()
    new_rules = load_sources([(Path("r.yaml"), NOW_RULES)], new_registry)
    engine.replace_rulebook(new_rules, new_registry)
    assert engine.rulebook is new_rules and engine.services.registry is new_registry
    engine.replace_rulebook(rulebook)  # rules alone: the registry stays
    assert engine.rulebook is rulebook and engine.services.registry is new_registry


async def test_owns_http_says_whether_the_services_made_their_client(store: Store) -> None:
    """True without a client given (the services make and close their own), False with one."""
    assert Services(Settings(), store, default_registry()).owns_http is True
    async with httpx.AsyncClient() as client:
        given = Services(Settings(), store, default_registry(), http=client)
        assert given.owns_http is False and given.http is client
