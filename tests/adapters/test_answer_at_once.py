"""Answering at once: ChatQueues asking an idle chat's work in put() before it makes the
chat's lane (a work putting its own chat again waits its turn; the per-chat cap holds), a
work answering None as done (close() between it and its end leaves the slots right), and
the OneBot inbound work answering a FAQ as its event is read (a stop before a run begins
leaves nothing unawaited; order, quote and @ kept).

Real parts only: real ChatQueues, the real engine (tmy.testing.Bot), the OneBot adapter
against the fake NapCat of tests/support/onebot_fake.py.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from tests.support.log_helpers import read_log
from tests.support.onebot_fake import loopback
from tmy.adapters.fairness import ChatQueues
from tmy.message import Message
from tmy.testing import Bot

FAQ = "We open at 9"

RULES = f"""
rules:
  - id: faq
    triggers: ["hours"]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
  - id: echo
    triggers: ["echo *"]
    steps:
      - {{plugin: ADJUST, input: "{{QUESTION}}"}}
"""


def _queues(work: Any, **kw: Any) -> ChatQueues[Any]:
    kw.setdefault("in_flight", 4)
    return ChatQueues("fake", "message", work, per_chat=50, total=500, **kw)


def sent_segments(action: dict[str, Any]) -> list[dict[str, Any]]:
    return list(action["params"]["message"])


# -- ChatQueues: a work put() asks before the chat has a lane ------------------------------------


async def test_a_work_putting_its_own_chat_again_while_asked_waits_its_turn() -> None:
    calls: list[str] = []
    queues: ChatQueues[int]

    def work(chat: Hashable, item: int) -> None:
        calls.append(f"ask {item}")
        if item == 1:
            queues.put(chat, 2)  # a follow-up for the same chat (a work re-entering put)
        calls.append(f"done {item}")

    queues = _queues(work)
    queues.put("a", 1)
    assert await queues.join(1)
    assert calls == ["ask 1", "done 1", "ask 2", "done 2"]


async def test_a_reentrant_put_for_the_same_chat_keeps_per_chat_in_flight() -> None:
    gate = asyncio.Event()
    running = 0
    most = 0
    queues: ChatQueues[int]

    async def go_on() -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1

    def work(chat: Hashable, item: int) -> Any:
        if item == 1:
            queues.put(chat, 2)
        return go_on()

    queues = _queues(work, per_chat_in_flight=1)
    queues.put("a", 1)
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()
    assert await queues.join(1)
    assert most == 1 and queues.in_flight == 0


async def test_a_reentrant_put_for_another_chat_while_asked_keeps_the_books() -> None:
    """Found fine: another chat's item put from inside a work being asked (no lane yet for
    either) runs, and slots, lanes and the idle event come out right."""
    gate = asyncio.Event()
    done: list[tuple[Hashable, int]] = []
    queues: ChatQueues[int]

    async def go_on(chat: Hashable, item: int) -> None:
        await gate.wait()
        done.append((chat, item))

    def work(chat: Hashable, item: int) -> Any:
        if item == 1:
            queues.put("b", 2)  # goes on (a coroutine), made while "a" has no lane
            done.append((chat, item))
            return None
        return go_on(chat, item)

    queues = _queues(work, in_flight=2)
    queues.put("a", 1)
    assert queues.in_flight == 1 and not await queues.join(0.02)  # "b" is still running
    gate.set()
    assert await queues.join(1)
    assert done == [("a", 1), ("b", 2)] and queues.in_flight == 0 and not queues._lanes


async def test_a_work_raising_when_asked_in_put_is_logged_and_frees_its_slot(
    log_file: Path,
) -> None:
    """Found fine: a work that raises as put() asks it fails as before (on_fail, the
    <adapter>.message_failed line) and leaves no slot or lane held."""
    failed: list[tuple[int, str]] = []

    def work(chat: Hashable, item: int) -> None:
        raise RuntimeError(f"bug {item}")

    queues: ChatQueues[int] = ChatQueues(
        "fake", "message", work, per_chat=5, total=50, in_flight=1,
        on_fail=lambda item, exc: failed.append((item, str(exc))),
    )  # fmt: skip
    assert queues.put("a", 1)
    assert await queues.join(1)
    assert queues.put("b", 2)  # the one slot is free again
    assert await queues.join(1)
    assert failed == [(1, "bug 1"), (2, "bug 2")]
    assert queues.in_flight == 0 and not queues._lanes
    lines = [e for e in read_log(log_file) if e["event"] == "fake.message_failed"]
    assert len(lines) == 2


async def test_a_coroutine_answered_in_put_holds_the_chat_for_its_next_item() -> None:
    """Found fine: a work asked in put() that goes on (a coroutine) makes the lane: the
    chat's next item waits for it (order kept), then is done at once."""
    gate = asyncio.Event()
    order: list[int] = []

    def work(chat: Hashable, item: int) -> Any:
        if item == 0:

            async def first() -> None:
                await gate.wait()
                order.append(0)

            return first()
        order.append(item)
        return None

    queues = _queues(work)
    queues.put("a", 0)
    queues.put("a", 1)
    queues.put("a", 2)
    await asyncio.sleep(0.01)
    assert order == [] and queues.pending("a") == 2
    gate.set()
    assert await queues.join(1)
    assert order == [0, 1, 2] and queues.in_flight == 0


async def test_a_paced_queue_still_paces_an_item_done_at_once() -> None:
    """Found fine: with an interval the item done at once takes the old way (a lane, its end
    recorded): the chat's next item waits the interval; another chat's does not."""
    loop = asyncio.get_running_loop()
    at: list[tuple[Hashable, float]] = []

    def work(chat: Hashable, item: int) -> None:
        at.append((chat, loop.time()))

    queues = _queues(work, interval=0.1)
    start = loop.time()
    queues.put("a", 1)
    queues.put("a", 2)
    queues.put("b", 1)
    assert await queues.join(2)
    times = {chat: [t - start for c, t in at if c == chat] for chat in ("a", "b")}
    assert times["a"][0] < 0.05 and times["a"][1] >= 0.09
    assert times["b"][0] < 0.05


async def test_close_before_a_next_pass_end_leaves_the_slots_as_they_were() -> None:
    step: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    closing: list[asyncio.Task[None]] = []
    queues: ChatQueues[int]

    def work(chat: Hashable, item: int) -> Any:
        if item == 0:
            return step  # in flight on a Future: the chat's next item waits for a drain
        closing.append(asyncio.ensure_future(queues.close()))  # a stop made in this pass
        return None

    queues = _queues(work, in_flight=2)
    queues.put("a", 0)
    queues.put("a", 1)
    await asyncio.sleep(0)
    step.set_result(None)
    for _ in range(20):
        await asyncio.sleep(0)
        if closing:
            break
    assert closing
    await closing[0]
    for _ in range(5):
        await asyncio.sleep(0)
    assert queues.slots.free == queues.slots.size and queues.in_flight == 0


# -- OneBot: the inbound work answering at once ------------------------------------------------


async def test_onebot_faq_answered_at_once_keeps_the_quote_and_the_at() -> None:
    """Found fine: a FAQ answered as its event is read still carries quote_reply and
    at_sender; a run that awaits gets them too; neither in a private chat."""
    async with (
        Bot({"r.yaml": RULES}) as bot,
        loopback(bot.engine.handle, store=bot.app.store, quote_reply=True, at_sender=True) as (
            _,
            impl,
        ),
    ):
        await impl.group("hours", message_id=321, user=20002)
        assert sent_segments(await impl.next_action()) == [
            {"type": "reply", "data": {"id": "321"}},
            {"type": "at", "data": {"qq": "20002"}},
            {"type": "text", "data": {"text": f" {FAQ}"}},
        ]
        await impl.group("echo x", message_id=322, user=20003)
        assert sent_segments(await impl.next_action()) == [
            {"type": "reply", "data": {"id": "322"}},
            {"type": "at", "data": {"qq": "20003"}},
            {"type": "text", "data": {"text": " x"}},
        ]
        await impl.private("hours")
        assert [s["type"] for s in sent_segments(await impl.next_action())] == ["text"]


async def test_onebot_one_chats_faq_answers_keep_their_order() -> None:
    """Found fine: a burst of one chat's messages, FAQ answers and runs that await mixed,
    is answered in the order it came."""
    async with (
        Bot({"r.yaml": RULES}) as bot,
        loopback(bot.engine.handle, store=bot.app.store) as (_, impl),
    ):
        said = ["hours", "echo 1", "hours", "echo 2", "echo 3", "hours"]
        for i, text in enumerate(said):
            await impl.group(text, message_id=700 + i)
        got = []
        for _ in said:
            action = await impl.next_action()
            got.append("".join(s["data"]["text"] for s in action["params"]["message"]))
        assert got == [FAQ, "1", FAQ, "2", "3", FAQ]


async def test_onebot_a_stop_before_a_run_began_leaves_no_unawaited_coroutine() -> None:
    async with (
        Bot({"r.yaml": RULES}) as bot,
        loopback(bot.engine.handle, store=bot.app.store) as (adapter, impl),
    ):
        key = (str(impl.self_id), "group:30003")
        message = Message("echo late", user="20002", chat="group:30003", platform="onebot")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            adapter._inbound.put(key, (message, {}))  # a run to await: its task not begun
            await adapter._inbound.close()
            gc.collect()
        never = [w for w in seen if "never awaited" in str(w.message)]
        assert never == [], [str(w.message) for w in never]
