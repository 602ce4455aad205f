"""Who is an admin: ``platform:user`` entries parsed once, never spoofable from another platform."""

from __future__ import annotations

from tmy.testing import Bot

# -- from test_hardening_access.py (issue 7 hardening: who may do what, what a caller may send)


ADMIN_RULES = """
rules:
  - id: admin
    triggers: [reload]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "reloaded"}
"""


async def test_platform_user_admin_cannot_be_spoofed_from_another_platform() -> None:
    admins = frozenset({"telegram:42", "7", "matrix:@ops:example.org"})
    async with Bot({"a.yaml": ADMIN_RULES}, admins=admins) as bot:
        # the attack: a user id that spells the listed platform:user, on another platform
        assert (await bot.ask("reload", user="telegram:42", platform="http")).rule is None
        # a bare id never matches a user id containing the separator
        assert (await bot.ask("reload", user="x:7", platform="http")).rule is None
        assert (await bot.ask("reload", user="7:", platform="http")).rule is None
        # the real ones
        assert (await bot.ask("reload", user="42", platform="telegram")).rule == "admin"
        assert (await bot.ask("reload", user="42", platform="http")).rule is None
        assert (await bot.ask("reload", user="7", platform="discord")).rule == "admin"
        # an id containing ':' is reachable only through its platform:user entry
        ops = await bot.ask("reload", user="@ops:example.org", platform="matrix")
        assert ops.rule == "admin"
        assert (await bot.ask("reload", user="@ops:example.org", platform="http")).rule is None


def test_admins_parses_entries_once() -> None:
    from tmy.engine.core import Admins

    admins = Admins(frozenset({"telegram:42", "7", ":odd", "trailing:"}))
    assert admins.admits("telegram", "42")
    assert not admins.admits("http", "telegram:42")
    assert admins.admits("any", "7")
    # malformed entries are bare ids; they can never match an id containing ':'
    assert not admins.admits("", "odd")
    assert not admins.admits("x", "trailing:")
    assert not Admins(frozenset())


async def test_a_chat_admin_passes_admin_only_rules_in_their_chat_only() -> None:
    async with Bot({"a.yaml": ADMIN_RULES}) as bot:
        # the adapter sets chat_admin per message: true in the group where the user is owner
        own = await bot.ask("reload", user="9", chat="group:1", platform="onebot",
                            private=False, chat_admin=True)  # fmt: skip
        other = await bot.ask("reload", user="9", chat="group:2", platform="onebot",
                              private=False)  # fmt: skip
    assert own.rule == "admin"
    assert other.rule is None and other.reason == (
        "rule 'admin' matched but it answers admins only (admin_only)"
    )


async def test_admin_as_judges_a_credential_instead_of_the_named_user() -> None:
    """``Message.admin_as``: admins: judge that identity (an API key's), "" no one; both
    the planned path (a constant rule) and the general one (a ``.tmy`` command)."""
    admins = frozenset({"openai:boss", "boss", "openai:key:0123456789ab", ""})
    cases = [
        ("boss", None, True),  # no credential in play: the user himself
        ("boss", "", False),  # named, no credential: no one (not even an "" entry)
        ("boss", "key:ffffffffffff", False),  # named by a key admins: do not list
        ("alice", "key:0123456789ab", True),  # the admin key's, whoever it names
    ]
    async with Bot({"a.yaml": ADMIN_RULES}, admins=admins) as bot:
        for text, admitted in (("reload", "reloaded"), (".tmy rules admin", "admin (")):
            for user, admin_as, admin in cases:
                reply = await bot.ask(text, user=user, platform="openai", admin_as=admin_as)
                assert (admitted in reply.text) is admin, (text, user, admin_as, reply)
