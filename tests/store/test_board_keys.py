"""tmy.store.board_keys: the store's twin of the engine's key scheme for ranked variables
must name the very key the engine writes (``variable_key``) for the board it syncs
(``board_id``), whatever the platform and user ids hold."""

from __future__ import annotations

import pytest

from tmy.engine.keys import board_id, escape_key_part, variable_key
from tmy.message import Message
from tmy.rulebook.model import VariableDecl
from tmy.store import board_keys
from tmy.store.board_keys import board_value_key


@pytest.mark.parametrize(
    ("platform", "user"),
    [
        ("console", "alice"),
        ("qq", "123456"),
        ("tele/gram", "a/b"),
        ("100%", "50%/x"),
        ("discord", "用户 ✓"),
        ("matrix", "@bob:example.org"),
    ],
)
@pytest.mark.parametrize("name", ["points", "check_in_days"])
def test_the_value_key_of_a_board_entry_is_the_engines_variable_key(
    platform: str, user: str, name: str
) -> None:
    decl = VariableDecl(name=name, scope="user", default=0, file="r.yaml", line=1, rank=True)
    message = Message(text="hi", user=user, platform=platform)
    assert board_value_key(board_id(platform, name), user) == variable_key(decl, message)


def test_the_escape_is_the_engines() -> None:
    for part in ("a/b", "100%", "%2F", "plain", ""):
        assert board_keys.escape_key_part(part) == escape_key_part(part)


def test_a_board_id_the_engine_did_not_make_has_no_value_key() -> None:
    assert board_value_key("opaque", "u") is None
    assert board_value_key("/points", "u") is None
    assert board_value_key("console/", "u") is None
    assert board_value_key("console/points", "\ud800") is None  # not a valid key
