"""Store keys of a conversation's state: ids escaped so two triples never share a key."""

from __future__ import annotations

import itertools

import pytest

from tmy.engine.keys import conversation_key
from tmy.message import Message
from tmy.store.board_keys import escape_key_part

IDS = ["u1", "a/b", "a", "b/c", "50%", "%2F", "x%2Fy", "/", "营业/ü", "private:a"]


def test_plain_ids_are_the_key_as_they_are() -> None:
    message = Message("hi", user="u1", chat="private:u1", platform="qq")
    assert conversation_key("llmhist", message) == "llmhist/qq/private:u1/u1"


@pytest.mark.parametrize(("user", "chat", "platform"), itertools.product(IDS, IDS, IDS[:4]))
def test_every_triple_is_escaped_part_by_part(user: str, chat: str, platform: str) -> None:
    message = Message("hi", user=user, chat=chat, platform=platform)
    ids = (message.platform, message.chat, message.user)  # an empty chat: the user's private
    parts = [escape_key_part(part) for part in ids]
    assert conversation_key("k", message) == "k/" + "/".join(parts)


def test_no_two_triples_share_a_key() -> None:
    triples = list(itertools.product(IDS, IDS, IDS[:4]))
    keys = {conversation_key("k", Message("hi", user=u, chat=c, platform=p)) for u, c, p in triples}
    assert len(keys) == len(triples)
