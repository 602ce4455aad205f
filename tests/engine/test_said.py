"""What a message brings to a FAQ line (tmy/engine/said.py): the ids' part kept per
joined ids, written only when nothing needs escaping, split as the message's own fields."""

from __future__ import annotations

import orjson
import pytest

from tmy.engine import said
from tmy.message import Message


def test_said_ids_are_the_plain_ids_part_of_the_line_and_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kept parts of joined ids are written only for ids plain() lets through as they are,
    split as the message's own fields (a NUL in an id cannot pass for a separator), and
    their number is bounded."""
    said.SAID_IDS.clear()
    monkeypatch.setattr(said.SAID_IDS, "kept", 3)
    cases = [
        ("u1", "g1", "test"),
        ('we"ird', "g1", "test"),
        ("a\\b", "", "test"),
        ("tab\t", "x", "p"),
        ("é", "g", "p"),
        ("u1", "g1", "test"),
        ("del\x7f", "g", "p"),
        ("a\0b", "c", "p"),  # "a\0b\0c\0p": three NULs, never taken for ("a", "b\0c", …)
        ("a", "b\0c", "p"),
    ]
    for user, chat, platform in cases:
        message = Message("hi", user=user, chat=chat, platform=platform)
        ids = said.joined_ids(message.user, message.chat, message.platform)
        part = said.SAID_IDS[ids]
        if said.plain(message.user + message.chat + message.platform):
            assert part is not None
            fields = orjson.loads("{" + part + "}")
            assert fields == {"user": user, "chat": message.chat, "platform": platform}
        else:
            assert part is None
        assert len(said.SAID_IDS) <= 3
    assert said.SAID_IDS["u1\0g1\0test"] == '"user":"u1","chat":"g1","platform":"test"'
