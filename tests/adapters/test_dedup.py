"""OneBot de-duplication: exact across daemons sharing a store, and a same-daemon replay
answered by the in-process front without the store.

Two "daemons" are two Apps (each with its own store connection) on one store:
one SQLite file, or one Redis prefix (``store_url`` runs each test on both).
"""

from __future__ import annotations

from pathlib import Path

from tests.adapters.test_onebot import RULES, reverse, sent_text
from tests.support.onebot_fake import SELF_ID
from tmy.adapters.dedup import Deliveries
from tmy.store.base import Store
from tmy.testing import Bot

KEY = f"dedup/onebot/{SELF_ID}/77"


async def test_a_replay_to_a_second_daemon_on_the_same_store_does_not_run(
    store_url: str,
) -> None:
    async with (
        Bot({"ob.yaml": RULES}, store=store_url) as one,
        Bot({"ob.yaml": RULES}, store=store_url) as two,
        reverse(one, send_interval=0) as served_one,
        reverse(two, send_interval=0) as served_two,
    ):
        first = await served_one.connect()
        await first.group("hit", message_id=77)
        assert sent_text(await first.next_action()) == "1"
        other = await served_two.connect()
        await other.group("hit", message_id=77)  # the same message, to the other daemon
        await other.group("echo after", message_id=78)
        assert sent_text(await other.next_action()).endswith("|after")
        await other.no_action(0.2)
        assert [m.message_id for m in served_two.seen] == ["78"]  # 77 never reached the engine
        assert await one.var("hits") == 1


async def test_a_replay_to_the_same_daemon_is_refused_without_the_store(store_url: str) -> None:
    async with (
        Bot({"ob.yaml": RULES}, store=store_url) as one,
        Bot({"ob.yaml": RULES}, store=store_url) as two,
        reverse(one, send_interval=0) as served_one,
        reverse(two, send_interval=0) as served_two,
    ):
        first = await served_one.connect()
        await first.group("hit", message_id=77)
        assert sent_text(await first.next_action()) == "1"
        assert await one.app.store.delete(KEY) is True  # the store forgets the claim
        await first.group("hit", message_id=77)  # a replay to the same daemon
        await first.group("echo after", message_id=78)
        assert sent_text(await first.next_action()).endswith("|after")
        await first.no_action(0.2)
        assert await one.var("hits") == 1  # refused by the daemon's own memory
        assert KEY not in await one.app.store.keys("dedup/onebot/")  # never asked the store
        # the other daemon has only the store to go by: without the claim it runs
        other = await served_two.connect()
        await other.group("hit", message_id=77)
        assert sent_text(await other.next_action()) == "2"


async def test_an_id_the_front_forgot_still_meets_the_store(store: Store) -> None:
    here = Deliveries(store, "onebot", size=2)
    for ident in ("1", "2", "3", "4"):
        assert await here.first("9", ident) is True
    # "1" fell out of the two-id front: a replay is refused by the store's claim
    assert await here.first("9", "1") is False
    # an id still in the front is refused without the store (its key deleted)
    await store.delete("dedup/onebot/9/4")
    assert await here.first("9", "4") is False
    # an id out of the front whose key is gone is the store's to answer: a first claim
    await store.delete("dedup/onebot/9/2")
    assert await here.first("9", "2") is True
    elsewhere = Deliveries(store, "onebot")  # another daemon on the same store
    assert await elsewhere.first("9", "3") is False
    assert await elsewhere.first("9", "5") is True
    assert await here.first("9", "5") is False


async def test_without_a_store_the_front_is_the_whole_window() -> None:
    here = Deliveries(None, "onebot")
    assert await here.first("1", "5") is True
    assert await here.first("1", "5") is False
    assert await here.first("2", "5") is True
    assert await here.first("1", "") is True  # no id: nothing to compare
    assert await here.first("1", "") is True


async def test_arrivals_are_decided_in_order_one_batch_per_pass(store: Store) -> None:
    import asyncio

    from tmy.adapters.dedup import Arrivals

    accepted: list[str] = []
    refused: list[str] = []
    here = Arrivals(
        Deliveries(store, "onebot"),
        lambda chat, item: accepted.append(item),
        lambda chat, item: refused.append(item),
    )
    elsewhere = Deliveries(store, "onebot")  # another daemon: only the store tells it
    assert await elsewhere.first("9", "2") is True
    for ident in ("1", "2", "", "3", "1", "4"):
        here.put("9", ident, "group:1", f"m{ident}")
    assert accepted == [] and refused == ["m1"]  # the replay here is refused at once
    await asyncio.sleep(0.05)
    assert accepted == ["m1", "m", "m3", "m4"]  # in order; no id: nothing to compare
    assert refused == ["m1", "m2"]  # taken by the other daemon
    assert await elsewhere.first("9", "3") is False
    here.put("9", "5", "group:1", "m5")
    await here.close()  # a stop: what waits is forgotten
    await asyncio.sleep(0.05)
    assert "m5" not in accepted


async def test_arrivals_run_when_the_store_is_unreachable(tmp_path: Path) -> None:
    import asyncio

    from tmy.adapters.dedup import Arrivals
    from tmy.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "never-opened.db")  # every claim raises StoreError
    accepted: list[str] = []

    def accept(chat: str, item: str) -> None:
        accepted.append(item)

    def refuse(chat: str, item: str) -> None:
        raise AssertionError(f"{item} refused")

    here = Arrivals(Deliveries(store, "onebot"), accept, refuse)
    here.put("9", "1", "group:1", "a")
    here.put("9", "2", "group:1", "b")
    await asyncio.sleep(0.05)
    assert accepted == ["a", "b"]  # answering twice beats never answering
    without = Arrivals(Deliveries(None, "onebot"), accept, refuse)
    without.put("9", "1", "group:1", "c")  # no store: decided at once
    assert accepted == ["a", "b", "c"]
