"""Seed 004: ``save`` to a list position past the end stores the value there, padding with
nulls — a real engine on SQLite and Redis, persistent and run-local lists alike."""

from __future__ import annotations

import pytest

from tmy.testing import Bot

RULES = """
variables:
  slots: {scope: global, default: ["a", "b"]}
rules:
  - id: put                                    # "put 5 x" saves x at slots[5]
    triggers: ["put *"]
    steps:
      - plugin: ADJUST
        input: "?= QUESTION.split()[1]"
        save: "?= 'slots[' + QUESTION.split()[0] + ']'"
      - {plugin: ADJUST, input: "?= json_dumps(slots)"}
  - id: nested
    triggers: ["nested"]
    steps:
      - {plugin: ADJUST, input: "deep", save: "slots[4][k]"}
      - {plugin: ADJUST, input: "?= json_dumps(slots)"}
  - id: local
    triggers: ["local"]
    steps:
      - {plugin: ADJUST, input: "?= [1]", save: xs}
      - {plugin: ADJUST, input: 9, save: "xs[3]"}
      - {plugin: ADJUST, input: "?= json_dumps(xs)"}
  - id: far
    triggers: ["far"]
    on_error: "refused: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: 1, save: "slots[10000000000]"}
  - id: back
    triggers: ["back"]
    steps:
      - {plugin: ADJUST, input: 1, save: "slots[-3]"}
"""


async def test_a_save_past_the_end_pads_with_nulls(store_url: str) -> None:
    async with Bot({"main.yaml": RULES}, store=store_url) as b:
        assert await b.say("put 5 x") == '["a", "b", null, null, null, "x"]'
        assert await b.var("slots") == ["a", "b", None, None, None, "x"]
        assert await b.say("put 6 y") == '["a", "b", null, null, null, "x", "y"]'  # at len
        assert await b.say("put 2 z") == '["a", "b", "z", null, null, "x", "y"]'  # inside
        assert await b.say("nested") == '["a", "b", "z", null, {"k": "deep"}, "x", "y"]'
        assert await b.say("local") == "[1, null, null, 9]"


async def test_padding_is_bounded_and_a_negative_index_must_exist(store_url: str) -> None:
    async with Bot({"main.yaml": RULES}, store=store_url) as b:
        far = await b.ask("far")
        assert far.error == (
            "slots[10000000000]: index 10000000000 is too far past the end of a list of 2"
            " (a list may have at most 1,000,000 members)"
        )
        assert far.text == f"refused: {far.error}"
        back = await b.ask("back")
        assert back.error == "slots[-3]: index -3 is out of range for a list of 2"
        assert await b.var("slots") == ["a", "b"]


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_the_seed_004_example_save_at_an_index(store_url: str) -> None:
    """The seed's own words: ``lst[5]`` on a 2-item list, written by a rule."""
    text = """
variables:
  lst: {scope: global, default: [0, 1]}
rules:
  - id: five
    triggers: ["five"]
    steps:
      - {plugin: ADJUST, input: "fifth", save: "lst[5]"}
      - {plugin: ADJUST, input: "{lst[5]} / {lst[3]!r}"}
"""
    async with Bot({"main.yaml": text}, store=store_url) as b:
        assert await b.say("five") == "fifth / None"
        assert await b.var("lst") == [0, 1, None, None, None, "fifth"]
