"""tmy.adapters.chatroles: a chat's roles asked once per ttl and one call at a time, a
failure remembered as nobody (Telegram and Feishu share it; test_telegram_chat shows
the ttl and a refusal through Telegram's ChatAdmins)."""

from __future__ import annotations

import asyncio

from tmy.adapters.chatroles import RETRY_AFTER, ChatRoles, Roles


async def test_runs_of_one_chat_wait_for_the_one_call_and_a_failure_counts_as_nobody() -> None:
    now = [0.0]
    calls: list[str] = []
    answers: list[Roles | None] = [{"u1": "owner"}, None]

    async def fetch(chat: str) -> Roles | None:
        calls.append(chat)
        await asyncio.sleep(0.01)
        return answers.pop(0)

    cache: ChatRoles[str] = ChatRoles(fetch, ttl=300, clock=lambda: now[0])
    found = await asyncio.gather(*(cache.roles("g") for _ in range(5)))
    assert found == [{"u1": "owner"}] * 5 and calls == ["g"]
    now[0] = 301
    assert await cache.roles("g") == {} and len(calls) == 2  # refused: nobody
    now[0] = 301 + RETRY_AFTER - 1
    assert await cache.roles("g") == {} and len(calls) == 2  # not asked again yet
