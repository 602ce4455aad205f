"""What the engine counts and caches per message, on every way a message can take: each
message counted once as matched or unmatched (received is their sum), run series only
for rules that ran, the chat switch's verdicts per platform and chat within one bound,
the ids' part of a FAQ line kept per unambiguous key (and the bench's log teardown).

Real parts only: real rulebooks, a real SQLite store, the real App (tmy.testing.Bot),
logging into a real buffer.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.engines import engine_of
from tmy import logs, metrics
from tmy.engine import switch as switch_module
from tmy.engine.switch import ChatSwitch
from tmy.message import Event, Message
from tmy.store import Store
from tmy.testing import Bot

pytestmark = pytest.mark.usefixtures("nothing_bound")

FAQ = "We open at 9"
ROOT = Path(__file__).resolve().parents[2]


def _lines(buffer: io.BytesIO, event: str) -> list[dict[str, Any]]:
    logs.flush()
    found = [orjson.loads(x) for x in buffer.getvalue().splitlines() if x.strip()]
    return [e for e in found if e.get("event") == event]


# == tmy_messages_received is matched + unmatched: one count per message on every path ======

COUNT_RULES = f"""
rules:
  - id: faq
    triggers: ["hours"]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
  - id: slow
    triggers: ["slow"]
    cooldown: {{seconds: 30, per: user, reply: "wait"}}
    steps:
      - {{plugin: ADJUST, input: "fast"}}
  - id: talk
    triggers: ["talk*"]
    session: {{seconds: 60, debounce: 0.05}}
    steps:
      - {{plugin: ADJUST, input: "heard {{QUESTION}}"}}
  - id: welcome
    events: [member_join]
    steps:
      - {{plugin: ADJUST, input: "welcome"}}
"""


async def test_every_message_is_counted_once_matched_or_unmatched_on_every_path() -> None:
    """Received is summed at scrape from matched and unmatched: each path that answers a
    message (the FAQ way, the general way, unmatched, a command, an event and an event no
    rule wants, a session follow-up, a debounced burst, a cooldown, a switched-off chat)
    must count it exactly once, as one of the two."""
    platform = "review-count"
    matched, unmatched = metrics.message_meters(platform)

    def received() -> float:
        sample = ("tmy_messages_received_total", {"platform": platform})
        return metrics.REGISTRY.get_sample_value(*sample) or 0.0

    def now() -> tuple[float, float, float]:
        return (received(), matched.value, unmatched.value)

    async with Bot({"r.yaml": COUNT_RULES}) as bot:

        async def ask(text: str, want: tuple[int, int], **kw: Any) -> None:
            before = now()
            await bot.ask(text, platform=platform, **kw)
            after = now()
            got = tuple(b - a for a, b in zip(before, after, strict=True))
            assert got == (1, *want), (text, kw)

        await ask("hours", (1, 0), chat="g1")  # unknown: the general way
        await ask("hours", (1, 0), chat="g1")  # the FAQ way
        await ask("nothing at all", (0, 1), chat="g1")
        await ask("slow", (1, 0), chat="g1")
        await ask("slow", (1, 0), chat="g1")  # cooled
        await ask("talk", (1, 0), user="s1", chat="g2", private=False)  # opens a session
        await ask("and more", (1, 0), user="s1", chat="g2", private=False)  # a burst of one
        await ask("unrelated", (0, 1), user="s2", chat="g2", private=False)
        await ask(".tmy off", (0, 1), chat="g3", is_admin=True)
        await ask("hours", (1, 0), chat="g3")  # switched off: matched, no run
        await ask("hours", (1, 0), chat="g3")  # the cached "off"
        await ask("", (1, 0), chat="g4", event=Event("member_join", "raw.join"))
        await ask("", (0, 1), chat="g4", event=Event("poke", "raw.poke"))


# == the kept user/chat/platform part of the line, keyed by NUL-joined ids =================

LINE_RULES = f"""
rules:
  - id: faq
    triggers: ["hours"]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
"""


async def test_ids_holding_nul_that_join_alike_log_their_own_fields(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """ "a\\0b" in chat "c" and "a" in chat "b\\0c" make one key (NUL is the separator):
    neither is plain, so each line must still name its own message's ids."""
    engine = engine_of(LINE_RULES, store)
    pairs = [("a\0b", "c"), ("a", "b\0c"), ("a\0b", "c"), ("a", "b\0c"), ("ab", "c")]
    for user, chat in pairs:
        reply = await engine.handle(Message("hours", user=user, chat=chat, platform="t"))
        assert reply.text == FAQ
    lines = _lines(log_buffer, "run.done")
    assert [(x["user"], x["chat"], x["platform"]) for x in lines] == [(u, c, "t") for u, c in pairs]


# == ChatSwitch.verdicts: platform -> chat -> (off, until) ==================================


async def test_the_chat_switch_keeps_at_most_its_cap_of_verdicts_in_all(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(switch_module, "_OFF_CACHE_MAX", 4)
    switch = ChatSwitch(store)
    for p in range(4):
        for c in range(4):
            await switch.is_off(Message("x", user="u", chat=f"c{c}", platform=f"p{p}"))
    kept = sum(len(chats) for chats in switch.verdicts.values())
    assert kept <= 4


async def test_a_switch_verdict_is_per_platform_and_chat(store: Store) -> None:
    """The two-level cache must not mix chats of one name on two platforms."""
    switch = ChatSwitch(store)
    await switch.set(Message("x", user="u", chat="g", platform="p1", is_admin=True), True)
    assert switch.cached(Message("x", user="u", chat="g", platform="p1")) is True
    assert switch.cached(Message("x", user="u", chat="g", platform="p2")) is None
    assert await switch.is_off(Message("x", user="u", chat="g", platform="p2")) is False
    assert switch.cached(Message("x", user="u", chat="g", platform="p1")) is True


# == a constant plan keeps its rule's run counter ===========================================

NEVER_RAN = """
rules:
  - id: review_never_ran
    triggers: ["quiet hours"]
    steps:
      - {plugin: ADJUST, input: "shh"}
"""


async def test_a_rule_matched_only_in_a_switched_off_chat_exports_no_runs(store: Store) -> None:
    switch = ChatSwitch(store)
    here = Message("quiet hours", user="u", chat="off-chat", platform="review-off")
    await switch.set(Message("x", user="u", chat="off-chat", platform="review-off"), True)
    engine = engine_of(NEVER_RAN, store, switch=switch)
    reply = await engine.handle(here)
    assert reply.rule is None and reply.reason is not None and "switched off" in reply.reason
    sample = ("tmy_runs_total", {"rule": "review_never_ran", "outcome": "ok"})
    assert metrics.REGISTRY.get_sample_value(*sample) is None


# == the logs renames left no stale reader ==================================================


def test_bench_stops_logging_into_a_folder_it_removes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("review_bench_common", ROOT / "bench/common.py")
    assert spec is not None and spec.loader is not None
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    folder = tmp_path / "bench-run"
    logs.configure("info", folder / "tmy.log")
    try:
        common._stop_logging_into(folder)
        path = getattr(getattr(logs.SINK, "stream", None), "path", None)
        assert path is None or folder not in Path(path).parents
    finally:
        logs.configure("warning", stream=io.BytesIO())
