"""``input: PICK``: one uniformly random member of the list INPUT points to, removed —
atomically on a persistent list (a lottery without replacement), reproducibly under a seed."""

from __future__ import annotations

import asyncio
import random

from tmy.testing import Bot
from tmy.values import randomness

PRIZES = [f"p{i}" for i in range(10)]

RULES = f"""
variables:
  prizes: {{scope: global, default: {PRIZES}}}
  held: {{scope: global, default: {PRIZES}}}
  state: {{scope: global, default: {{drawn: 0}}}}
rules:
  - id: draw
    triggers: [draw]
    steps:
      - {{plugin: ADJUST, input: PICK, INPUT: prizes}}
  - id: draw-computed
    triggers: [draw2]
    steps:
      - {{plugin: ADJUST, input: "?= 'PICK' if INPUT else 'none left'", INPUT: prizes}}
  - id: local
    triggers: [local]
    steps:
      - {{plugin: ADJUST, input: "?= [1, 2, 3, 4, 5]", save: bag}}
      - {{plugin: ADJUST, input: PICK, INPUT: bag, save: got}}
      - {{plugin: ADJUST, input: "{{got}} of {{bag}}"}}
  - id: draw-in-span
    triggers: [span]
    steps:
      - {{plugin: ADJUST, input: "?= state['drawn']", stop: "?= state['drawn'] >= 3"}}
      - {{plugin: ADJUST, input: PICK, INPUT: held, save: "state[last]"}}
      - {{plugin: ADJUST, input: "?= state['drawn'] + 1", save: "state[drawn]"}}
      - {{plugin: ADJUST, input: "{{state[last]}}"}}
"""


def expected_draws(seed: int, members: list[str], n: int) -> list[str]:
    """What n PICKs under ``seed`` must give: one r = random() per draw, index int(r * len)."""
    rng = random.Random(seed)
    left = list(members)
    return [left.pop(int(rng.random() * len(left))) for _ in range(n)]


async def test_concurrent_picks_hand_out_every_member_exactly_once(store_url: str) -> None:
    async with Bot({"p.yaml": RULES}, store=store_url) as bot:
        async with asyncio.timeout(60):
            replies = await asyncio.gather(*(bot.ask("draw", user=f"u{i}") for i in range(10)))
        assert [r.error for r in replies] == [None] * 10
        assert sorted(r.text for r in replies) == PRIZES
        assert await bot.var("prizes") == []
        late = await bot.ask("draw")
        assert late.error == "input PICK: the list prizes is empty"


async def test_a_seed_gives_the_same_draws_every_time(store_url: str) -> None:
    want = expected_draws(42, PRIZES, 10)
    assert sorted(want) == PRIZES and want != PRIZES  # a real shuffle, not the list's order
    for _ in range(2):  # a fresh store each time: the same seed, the same order
        async with Bot({"p.yaml": RULES}, store=store_url) as bot:
            await bot.engine.services.store.delete("var/global/prizes")
            with randomness.seeded(42):
                drawn = [await bot.say("draw") for _ in range(10)]
            assert drawn == want


async def test_a_computed_pick_and_the_explain_note(store_url: str) -> None:
    notes: list[tuple[str, object]] = []
    async with Bot({"p.yaml": RULES}, store=store_url) as bot:
        with randomness.seeded(7), randomness.recording(lambda c, v: notes.append((c, v))):
            got = await bot.say("draw2")
        assert got == expected_draws(7, PRIZES, 1)[0]
        assert notes == [("PICK prizes", got)]
        assert sorted([*await bot.var("prizes"), got]) == PRIZES


async def test_pick_on_a_local_list_lasts_for_the_run() -> None:
    async with Bot({"p.yaml": RULES}) as bot:
        with randomness.seeded(3):
            text = await bot.say("local")
        rng = random.Random(3)
        bag = [1, 2, 3, 4, 5]
        got = bag.pop(int(rng.random() * 5))
        assert text == f"{got} of {bag}"


async def test_pick_inside_an_atomic_span_is_held_and_flushed(store_url: str) -> None:
    async with Bot({"p.yaml": RULES}, store=store_url) as bot:
        async with asyncio.timeout(60):
            replies = await asyncio.gather(*(bot.ask("span", user=f"u{i}") for i in range(6)))
        drawn = [r.text for r in replies if r.text in PRIZES]
        assert len(drawn) == 3 and len(set(drawn)) == 3  # the guard let exactly three through
        assert sorted([*await bot.var("held"), *drawn]) == PRIZES
        assert (await bot.var("state"))["drawn"] == 3
