"""A scheduled rule's structured reply (images, buttons …) reaches the adapter as ``outgoing=``,
from the first post and from the outbox's resend; a plain reply is still ``send(target, text)``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cron.scheduled import history, wait_for
from tmy.errors import AdapterError
from tmy.message import Button, Outgoing, Target
from tmy.testing import LoopbackAdapter, serving

RULES = """
rules:
  - id: card
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0, send_retry: 60,
               send_to: [{platform: onebot, chat: "group:5"}]}
    steps:
      - plugin: ADJUST
        input: {text: "daily cat", image: "https://x/cat.png", buttons: [More]}
  - id: plain
    schedule: {cron: "0 0 1 1 *", misfire_grace: 0,
               send_to: [{platform: onebot, chat: "group:5"}]}
    steps:
      - {plugin: ADJUST, input: "just text"}
"""


class RichAdapter(LoopbackAdapter):
    """A platform that sends structured parts natively, refusing its first ``refuse`` sends."""

    def __init__(self, refuse: int = 0) -> None:
        super().__init__("onebot")
        self.refuse = refuse
        self.calls: list[tuple[str, Outgoing | None]] = []

    async def send(self, target: Any, text: str, outgoing: Outgoing | None = None) -> None:
        self.calls.append((text, outgoing))
        if len(self.calls) <= self.refuse:
            raise AdapterError("onebot: no bot account connected")
        await super().send(target, text)


def _expected() -> Outgoing:
    return Outgoing(images=["https://x/cat.png"], buttons=[[Button("More", "More")]])


async def test_a_structured_scheduled_reply_goes_out_with_its_parts() -> None:
    onebot = RichAdapter()
    async with serving({"r.yaml": RULES}, adapters=(onebot,), http_enabled=False,
                       timezone="UTC") as daemon:  # fmt: skip
        scheduler = daemon.app.cron
        assert scheduler is not None
        [fired] = await scheduler.fire_now(daemon.engine.rulebook.by_id["card"], by="test")
        [plain] = await scheduler.fire_now(daemon.engine.rulebook.by_id["plain"], by="test")
        post = await onebot.pop(timeout=5)
    assert fired.entry["sent"] == "ok" and plain.entry["sent"] == "ok"
    assert (post.target, post.text) == (Target("onebot", "group:5"), "daily cat")
    assert onebot.calls == [("daily cat", _expected()), ("just text", None)]


async def test_app_send_passes_outgoing_only_when_there_is_some() -> None:
    onebot = RichAdapter()
    async with serving({"r.yaml": RULES}, adapters=(onebot,), http_enabled=False) as daemon:
        await daemon.app.send(Target("onebot", "g"), "a", _expected())
        await daemon.app.send(Target("onebot", "g"), "b", Outgoing())
        await daemon.app.send(Target("onebot", "g"), "c")
    assert onebot.calls == [("a", _expected()), ("b", None), ("c", None)]


@pytest.mark.slow  # the resend waits for the outbox's first backoff (2 s)
@pytest.mark.timeout(60)
async def test_the_outbox_resends_the_parts_too() -> None:
    onebot = RichAdapter(refuse=1)
    async with serving({"r.yaml": RULES}, adapters=(onebot,), http_enabled=False,
                       timezone="UTC") as daemon:  # fmt: skip
        scheduler, store = daemon.app.cron, daemon.app.store
        assert scheduler is not None
        await scheduler.fire_now(daemon.engine.rulebook.by_id["card"], by="test")
        await onebot.pop(timeout=15)

        async def resent() -> Any:
            return [r for r in await history(store, "card") if "attempt" in r]

        assert await wait_for(resent, 5)
    assert onebot.calls == [("daily cat", _expected()), ("daily cat", _expected())]


async def test_an_adapter_whose_send_takes_only_text_still_gets_the_text() -> None:
    onebot = LoopbackAdapter("onebot")  # send(target, text): no outgoing= keyword
    async with serving({"r.yaml": RULES}, adapters=(onebot,), http_enabled=False,
                       timezone="UTC") as daemon:  # fmt: skip
        scheduler = daemon.app.cron
        assert scheduler is not None
        [fired] = await scheduler.fire_now(daemon.engine.rulebook.by_id["card"], by="test")
        post = await onebot.pop(timeout=5)
    assert fired.entry["sent"] == "ok"
    assert (post.target, post.text) == (Target("onebot", "group:5"), "daily cat")
