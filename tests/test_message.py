"""Messages and their ids (tmy/message.py): ids the engine refuses whatever adapter sent them."""

from __future__ import annotations

from tmy.testing import Bot

# -- from test_hardening_access.py (issue 7 hardening: who may do what, what a caller may send)


HTTP_RULES = """
rules:
  - id: who
    triggers: ["who"]
    steps:
      - {plugin: ADJUST, input: "{USER}@{PLATFORM}/{CHAT}"}
  - id: big
    triggers: ["big"]
    steps:
      - {plugin: ADJUST, input: "?= 'x' * 60000"}
"""


async def test_engine_refuses_bad_ids_from_any_adapter() -> None:
    async with Bot({"h.yaml": HTTP_RULES}) as bot:
        reply = await bot.ask("who", user="u" * 10_000)
        assert reply.rule is None and "user" in reply.error and "limit is 256" in reply.error
        reply = await bot.ask("who", chat="bad\ud800")
        assert reply.rule is None and "surrogate" in reply.error
        assert (await bot.ask("who", user="ann")).text == "ann@test/private:ann"
