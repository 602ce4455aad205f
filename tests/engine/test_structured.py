"""Structured replies: a result map with images, files, mentions, a quote or buttons."""

from __future__ import annotations

import pytest

from tmy.engine.replies import outgoing_of
from tmy.engine.structured import outgoing_from_dict
from tmy.errors import EvalError
from tmy.message import Button, Outgoing
from tmy.testing import Bot


def test_a_map_with_parts_gives_text_and_outgoing() -> None:
    text, out = outgoing_of(
        {
            "text": "look",
            "image": "https://x/cat.png",
            "files": ["a.pdf", {"url": "https://x/b.pdf", "kind": "file"}],
            "mentions": [42, "u7"],
            "reply": True,
            "buttons": [
                {"text": "Again", "data": "again"},
                "More",
                {"text": "Docs", "url": "https://d"},
            ],
        }
    )
    assert text == "look"
    assert out.images == ["https://x/cat.png"]
    assert out.files == ["a.pdf", "https://x/b.pdf"]
    assert out.mentions == ["42", "u7"]
    assert out.reply_to == ""
    assert out.buttons == [
        [Button("Again", "again"), Button("More", "More"), Button("Docs", "", "https://d")]
    ]


def test_rows_of_buttons_and_a_reply_id() -> None:
    text, out = outgoing_of({"buttons": [["a", "b"], ["c"]], "reply": "m-9"})
    assert text == ""
    assert [[b.text for b in row] for row in out.buttons] == [["a", "b"], ["c"]]
    assert out.reply_to == "m-9"


@pytest.mark.parametrize(
    "value",
    [{"text": "only text"}, {"text": "x", "other": 1}, {}, ["image"], "text", {"name": "x"}],
)
def test_other_values_are_not_structured(value: object) -> None:
    assert outgoing_of(value) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"image": 5}, "reply images"),
        ({"image": "a", "images": ["b"]}, "not both"),
        ({"buttons": [{"data": "x"}]}, "reply button"),
        ({"buttons": [{"text": "t", "data": "x" * 65}]}, "at most 64 bytes"),
        ({"buttons": [{"text": "t", "data": "x", "url": "u"}]}, "data or url"),
        ({"buttons": "yes"}, "a list of rows"),
        ({"mention": True}, "user id"),
        ({"reply": 1.5}, "quote the message"),
        ({"images": ["a"] * 21}, "at most 20"),
    ],
)
def test_a_malformed_part_is_a_clear_error(value: dict, message: str) -> None:
    with pytest.raises(EvalError) as caught:
        outgoing_of(value)
    assert message in str(caught.value)


def test_outgoing_round_trips_through_its_dict() -> None:
    _, out = outgoing_of({"image": "i", "mention": "u", "reply": True, "buttons": ["b"]})
    assert outgoing_from_dict(out.as_dict()) == out
    assert outgoing_from_dict(Outgoing().as_dict()) is None
    assert outgoing_from_dict(None) is None


RULES = """
rules:
  - id: cat
    triggers: [cat]
    steps:
      - plugin: ADJUST
        input: {text: "a cat for {USER}", image: "https://x/cat.png", mention: "{USER}"}
        save: card
      - {plugin: ADJUST, input: "Here: ", save: PRE_ANSWER}
      - {plugin: ADJUST, input: " (enjoy)", save: POST_ANSWER}
      - {plugin: ADJUST, INPUT: card}
  - id: bad
    triggers: [bad]
    on_error: "sorry: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: {text: "x", buttons: [{url: "https://nowhere"}]}}
  - id: plain
    triggers: [plain]
    steps:
      - {plugin: ADJUST, input: {text: "x", colour: red}}
"""


async def test_the_reply_is_pre_answer_text_post_answer_with_the_parts() -> None:
    async with Bot({"s.yaml": RULES}) as bot:
        reply = await bot.ask("cat", user="u5")
        bad = await bot.ask("bad")
        plain = await bot.ask("plain")
    assert reply.error is None
    assert reply.text == "Here: a cat for u5 (enjoy)"
    assert reply.outgoing is not None
    assert reply.outgoing.images == ["https://x/cat.png"] and reply.outgoing.mentions == ["u5"]
    assert reply.as_dict()["outgoing"]["images"] == ["https://x/cat.png"]
    assert bad.error is not None and "reply button" in bad.error
    assert bad.text.startswith("sorry: reply button")
    assert bad.outgoing is None
    assert plain.outgoing is None and "colour" in plain.text  # renders as before
