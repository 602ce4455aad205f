"""The sample rules (examples/basics.yaml) end to end, on both stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]


def samples(store: str) -> Bot:
    """examples/basics.yaml with the example plugin (UPPER), as it runs once copied to rules/."""
    return Bot(REPO / "examples" / "basics.yaml", plugins=REPO / "plugins", store=store)


# -- from test_audit_issue2.py (issue 2 audit: each failed before its fix)


async def test_every_sample_feature_works_on_both_stores(store_url: str) -> None:
    ann: dict[str, Any] = {"user": "ann", "user_name": "Ann"}
    async with samples(store_url) as bot:
        jokes = await bot.var("jokes")  # rotating list: LOOPBACK on a global, stored
        assert [await bot.say("joke", user=u) for u in "abcd"] == [*jokes, jokes[0]]
        assert await bot.var("jokes") == [*jokes[1:], jokes[0]]
        assert await bot.say("hello", **ann) == "Hello Ann, this is visit number 1."
        assert await bot.say("hi", **ann) == "Hello Ann, this is visit number 2."
        assert await bot.var("visits", user="bob") == 0  # per user
        assert await bot.say("echo  Hello There ") == "Hello There"  # prefix + QUESTION
        bare = await bot.ask("echo")
        assert (bare.error, bare.text) == ("nothing to echo", "Say something after 'echo'.")
        assert await bot.say("parity 7") == "7 is odd"  # when: branch
        assert await bot.say("parity 8") == "8 is even"
        assert (await bot.ask("parity x")).text == "'x' is not a whole number."
        assert await bot.say("note buy milk", **ann) == "Noted for Ann: buy milk"  # nested global
        assert await bot.var("notes") == {"ann": {"last": "buy milk"}}
        assert await bot.say("recall", user="ann") == "Your last note: buy milk"
        nothing = await bot.ask("recall", user="bob")
        assert nothing.text == "You have no note yet."
        assert "ann" not in (nothing.error or "")  # no other user's id in the error
        guard = await bot.ask("todo add", user="ann")  # STEP_ERROR guard
        assert (guard.error, guard.text) == ("say what to add", "Cannot add: say what to add.")
        assert await bot.say("todo add eggs", user="ann") == 'Added. ["eggs"]'
        assert await bot.say("todo next", user="ann") == "Next: eggs"  # SHIFT, per user
        assert (await bot.ask("todo next", user="ann")).text == "Your todo list is empty."
        status = await bot.say("status", **ann)  # PRE_ANSWER accumulation with ADJUST
        assert status.startswith("user: Ann\nvisits: 2\njokes in rotation: [")
        assert status.endswith(" (via test)") and "\ntime: " in status
        assert await bot.say("shout hey") == "HEY!!!"  # the example plugin
        assert await bot.say("many thanks", chat="g1") == (  # suffix trigger, chat scope
            "You're welcome! Thanks in this chat so far: 1."
        )
        assert (await bot.say("Thank you", chat="g1")).endswith("so far: 2.")
        assert (await bot.say("thanks", chat="g2")).endswith("so far: 1.")
