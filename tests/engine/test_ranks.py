"""Leaderboards end to end on real stores: a ``rank: true`` variable's board follows every
write, ``top()`` and ``rank_of()`` read it, one board per platform."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

from tmy.engine.keys import board_id
from tmy.testing import Bot

RULES = """
variables:
  points: {scope: user, default: 0, rank: true}
rules:
  - id: add
    triggers: ["add *"]
    steps:
      - {plugin: ADJUST, input: "?= points + int(QUESTION)", save: points}
  - id: set
    triggers: ["set *"]
    steps:
      - {plugin: ADJUST, input: "?= int(QUESTION) if QUESTION != 'none' else None", save: points}
  - id: top
    triggers: ["top *"]
    steps:
      - {plugin: ADJUST, input: "?= top('points', int(QUESTION))"}
  - id: rank
    triggers: [rank]
    steps:
      - {plugin: ADJUST, input: "?= rank_of('points')"}
  - id: add-then-top
    triggers: ["bump *"]
    steps:
      - {plugin: ADJUST, input: "?= points + int(QUESTION)", save: points}
      - {plugin: ADJUST, input: "?= [rank_of('points'), top('points', 1)[0]['name']]"}
"""

SPAN_RULES = """
variables:
  points: {scope: user, default: 0, rank: true}
  last: {scope: user, default: ""}
rules:
  - id: checkin
    triggers: [checkin]
    steps:
      - {plugin: ADJUST, input: "already", stop: "?= last == 'done' and points > 2"}
      - {plugin: ADJUST, input: "?= points + 1", save: points}
      - {plugin: ADJUST, input: done, save: last}
      - {plugin: ADJUST, input: "?= [points, rank_of('points'), top('points', 5)]"}
"""

LOCKED_RULES = (
    SPAN_RULES
    + """
  - id: set
    triggers: ["set *"]
    steps:
      - {plugin: ADJUST, input: "?= int(QUESTION)", save: points}
  - id: grant
    triggers: ["grant *"]
    steps:
      - {plugin: GRANT}
      - {plugin: ADJUST, input: "?= top('points', 1)"}
  - id: rank
    triggers: [rank]
    steps:
      - {plugin: ADJUST, input: "?= rank_of('points')"}
"""
)

GRANT = """
from tmy import Registry


async def grant(value, cfg, ctx):
    await ctx.set("points", int(ctx.message.text.split()[1]))
    return value


def register(registry: Registry) -> None:
    registry.add("GRANT", grant, doc="sets points from a plugin")
"""


async def result(bot: Bot, text: str, **kw: Any) -> Any:
    """The last step's result (a list or None, not its text)."""
    reply = await bot.ask(text, **kw)
    assert reply.error is None, reply.error
    return reply.steps[-1].result


async def test_top_and_rank_of_after_several_users(store_url: str) -> None:
    async with Bot({"r.yaml": RULES}, store=store_url) as bot:
        for user, name, amount in [
            ("u1", "Ann", 5), ("u2", "Bob", 12), ("u3", "Cy", 7), ("u4", "Di", 12),
            ("u1", "Ann", 4),
        ]:  # fmt: skip
            await bot.say(f"add {amount}", user=user, user_name=name)
        top3 = await result(bot, "top 3", user="u5")
        assert top3 == [  # ties: member descending, as ZREVRANGE orders them
            {"user": "u4", "name": "Di", "value": 12},
            {"user": "u2", "name": "Bob", "value": 12},
            {"user": "u1", "name": "Ann", "value": 9},
        ]
        assert all(type(e["value"]) is int for e in top3)  # 12, not 12.0
        assert await bot.say("top 3", user="u5") == (
            '[{"user": "u4", "name": "Di", "value": 12}, {"user": "u2", "name": "Bob", '
            '"value": 12}, {"user": "u1", "name": "Ann", "value": 9}]'
        )
        assert [e["user"] for e in await result(bot, "top 10")] == ["u4", "u2", "u1", "u3"]
        # 1224 ranking: the two 12s share rank 1, then 3, 4
        assert [await result(bot, "rank", user=u) for u in ("u2", "u4", "u1", "u3")] == [1, 1, 3, 4]
        assert await result(bot, "rank", user="u5") is None  # no value yet
        assert await bot.say("rank", user="u5") == ""


async def test_the_last_name_seen_and_a_platform_without_names(store_url: str) -> None:
    async with Bot({"r.yaml": RULES}, store=store_url) as bot:
        await bot.say("add 1", user="u1", user_name="Ann")
        await bot.say("add 1", user="u1", user_name="Annie")  # renamed on the platform
        await bot.say("add 1", user="u2")  # no display name: the id stands in
        await bot.say("add 5", user="u1")  # a message without a name keeps the last one
        assert await result(bot, "top 2") == [
            {"user": "u1", "name": "Annie", "value": 7},
            {"user": "u2", "name": "u2", "value": 1},
        ]


async def test_writes_in_the_run_refresh_what_top_sees(store_url: str) -> None:
    async with Bot({"r.yaml": RULES}, store=store_url) as bot:
        await bot.say("add 10", user="u1", user_name="Ann")
        # the run reads the board after its own write: u2 is first now
        assert await result(bot, "bump 11", user="u2", user_name="Bob") == [1, "Bob"]


async def test_a_value_that_is_no_longer_a_number_leaves_the_board(store_url: str) -> None:
    async with Bot({"r.yaml": RULES}, store=store_url) as bot:
        await bot.say("set 3", user="u1")
        await bot.say("set 2", user="u2")
        assert [e["user"] for e in await result(bot, "top 5")] == ["u1", "u2"]
        await bot.say("set none", user="u1")  # saved None: not a score
        assert await result(bot, "top 5") == [{"user": "u2", "name": "u2", "value": 2}]
        assert await result(bot, "rank", user="u1") is None
        await bot.say("set 1", user="u1")  # plain set (not an atomic update) syncs too
        assert [e["value"] for e in await result(bot, "top 5")] == [2, 1]


async def test_one_board_per_platform(store_url: str) -> None:
    async with Bot({"r.yaml": RULES}, store=store_url) as bot:
        await bot.say("add 3", user="u1", user_name="Ann")
        await bot.say("add 9", user="u1", user_name="Ann", platform="discord")
        await bot.say("add 5", user="u2", user_name="Bob", platform="discord")
        assert await result(bot, "top 5") == [{"user": "u1", "name": "Ann", "value": 3}]
        assert await result(bot, "top 5", platform="discord") == [
            {"user": "u1", "name": "Ann", "value": 9},
            {"user": "u2", "name": "Bob", "value": 5},
        ]
        assert await result(bot, "rank", user="u2") is None
        assert await result(bot, "rank", user="u2", platform="discord") == 2


async def test_an_atomic_span_syncs_its_board_when_it_flushes(store_url: str) -> None:
    async with Bot({"c.yaml": SPAN_RULES}, store=store_url) as bot:
        assert bot.engine.rulebook.by_id["checkin"].atomic_vars  # the span path, not an update
        assert await result(bot, "checkin", user="u1", user_name="Ann") == [
            1, 1, [{"user": "u1", "name": "Ann", "value": 1}],
        ]  # fmt: skip
        await bot.say("checkin", user="u2", user_name="Bob")
        got = await result(bot, "checkin", user="u2", user_name="Bob")
        bob, ann = (
            {"user": "u2", "name": "Bob", "value": 2},
            {"user": "u1", "name": "Ann", "value": 1},
        )
        assert got == [2, 1, [bob, ann]]


async def test_concurrent_increments_leave_the_board_equal_to_the_values(store_url: str) -> None:
    users = [f"u{i}" for i in range(8)]
    async with Bot({"r.yaml": RULES}, store=store_url) as bot:
        async with asyncio.timeout(100):
            replies = await asyncio.gather(*(
                bot.ask(f"add {1 + i % 3}", user=users[i % 8], user_name=f"N{i % 8}")
                for i in range(240)
            ))  # fmt: skip
        assert [r.error for r in replies] == [None] * 240
        values = {u: await bot.var("points", user=u) for u in users}
        assert sum(values.values()) == sum(1 + i % 3 for i in range(240))
        store = bot.engine.services.store
        board = await store.rank_top(board_id("test", "points"), 100)
        assert {member: score for member, score, _ in board} == values
        assert {member: name for member, _, name in board} == {u: f"N{u[1:]}" for u in users}
        ordered = sorted(values.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        assert [(e["user"], e["value"]) for e in await result(bot, "top 8")] == ordered


async def test_locked_writes_and_a_plugins_ctx_set_sync_the_board(
    store_url: str, tmp_path: Path
) -> None:
    (tmp_path / "grant.py").write_text(textwrap.dedent(GRANT), encoding="utf-8")
    async with Bot({"c.yaml": LOCKED_RULES}, store=store_url, plugins=tmp_path) as bot:
        assert "points" in bot.engine.rulebook.locked_variables  # set takes the lock: fenced
        await bot.say("set 4", user="u1", user_name="Ann")
        await bot.say("set 6", user="u2", user_name="Bob")
        assert await result(bot, "grant 9", user="u1", user_name="Ann") == [
            {"user": "u1", "name": "Ann", "value": 9}
        ]
        assert [await result(bot, "rank", user=u) for u in ("u1", "u2", "u3")] == [1, 2, None]
        board = await bot.engine.services.store.rank_top(board_id("test", "points"), 10)
        assert board == [("u1", 9, "Ann"), ("u2", 6, "Bob")]
