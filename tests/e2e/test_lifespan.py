"""The one lifespan (tmy/app.py): what opens in which order, and that it closes in reverse.

Two recording extensions and a recording adapter write what happens to one
list; the app must open store -> extension lifespans (in order, each seeing the
states of those before it) -> engine -> adapters -> extension serving parts,
and close them in reverse, also when opening fails half-way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tmy import AdapterError, ConfigError, Extension, Target
from tmy.app import App
from tmy.config import Settings
from tmy.cron import EXTENSION as CRON
from tmy.testing import LoopbackAdapter

RULES = {"r.yaml": "rules: [{id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hello}]}]"}


def recording(name: str, events: list[str], *, fail: bool = False) -> Extension:
    @contextlib.asynccontextmanager
    async def lifespan(services: Any) -> AsyncIterator[str]:
        events.append(f"{name} open (sees {sorted(services.state)})")
        if fail:
            raise RuntimeError(f"{name} cannot start")
        try:
            yield f"{name} state"
        finally:
            events.append(f"{name} close")

    @contextlib.asynccontextmanager
    async def serving(services: Any) -> AsyncIterator[None]:
        events.append(f"{name} serving")
        try:
            yield
        finally:
            events.append(f"{name} serving ends")

    return Extension(name=name, lifespan=lifespan, serving=serving)


class RecordingAdapter(LoopbackAdapter):
    def __init__(self, events: list[str]) -> None:
        super().__init__("memo")
        self.events = events

    async def start(self, handle: Any) -> None:
        self.events.append("adapter start")
        await super().start(handle)

    async def stop(self) -> None:
        self.events.append("adapter stop")
        await super().stop()


def settings(tmp_path: Path) -> Settings:
    return Settings(
        plugins=tmp_path / "none",
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_enabled=False,
        console=False,
        watch=False,
    )


async def test_extensions_open_in_order_and_close_in_reverse(tmp_path: Path) -> None:
    events: list[str] = []
    exts = (recording("one", events), recording("two", events))
    async with App(settings(tmp_path), extensions=exts, rule_texts=RULES) as app:
        assert dict(app.state) == {"one": "one state", "two": "two state"}
        assert app.engine is not None and app.engine.services.state is app.state
        assert (await app.engine.handle(_hi())).text == "hello"
        assert app.adapters is None and app.cron is None  # not serving
        with pytest.raises(AdapterError, match="no running adapter"):
            await app.send(Target("memo", "c"), "x")
        events.append("in use")
    assert events == [
        "one open (sees [])",
        "two open (sees ['one'])",
        "in use",
        "two close",
        "one close",
    ]
    with pytest.raises(TypeError):
        app.state["three"] = 3  # type: ignore[index]


async def test_serving_starts_adapters_then_serving_parts_and_stops_them_first(
    tmp_path: Path,
) -> None:
    events: list[str] = []
    memo = RecordingAdapter(events)
    exts = (recording("one", events), CRON)
    async with App(settings(tmp_path), extensions=exts, rule_texts=RULES, adapters=[memo]) as app:
        assert app.cron is not None and app.adapters is not None
        await app.send(Target("memo", "c"), "posted")
        assert [s.text for s in memo.sent] == ["posted"]
        report = await app.health()
        assert report["status"] == "ok" and report["adapters"]["memo"]["state"] == "connected"
        assert report["cron"]["outbox"]["pending"] == 0
        events.append("in use")
    assert events == [
        "one open (sees [])",
        "adapter start",
        "one serving",
        "in use",
        "one serving ends",
        "adapter stop",
        "one close",
    ]


async def test_a_failing_extension_closes_what_opened_before_it(tmp_path: Path) -> None:
    events: list[str] = []
    exts = (recording("one", events), recording("bad", events, fail=True))
    app = App(settings(tmp_path), extensions=exts, rule_texts=RULES)
    with pytest.raises(RuntimeError, match="bad cannot start"):
        await app.__aenter__()
    assert events == ["one open (sees [])", "bad open (sees ['one'])", "one close"]
    assert app.engine is None


def test_two_extensions_with_one_name_are_refused(tmp_path: Path) -> None:
    events: list[str] = []
    with pytest.raises(ConfigError, match="extension 'one' is claimed by both"):
        App(settings(tmp_path), extensions=(recording("one", events), recording("one", events)))


def _hi() -> Any:
    from tmy import Message

    return Message("hi", user="ann", platform="test")


async def test_a_given_http_client_is_used_and_left_open(tmp_path: Path) -> None:
    import httpx

    async with httpx.AsyncClient() as client:
        async with App(settings(tmp_path), rule_texts=RULES, http=client) as app:
            assert app.engine is not None and app.engine.services.http is client
        assert not client.is_closed  # closed by whoever made it
