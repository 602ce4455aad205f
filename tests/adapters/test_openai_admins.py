"""Admin rights on the listener's ``/v1/*`` routes come from a credential, never a name.

A key holder may say whom it speaks for (``X-Tmy-User``, the body's ``user``, an
untrusted ``user_header``) — filters admit that user — but ``admins:`` judge the key's
own identity (``key:`` + 12 hex digits); a trusted ``user_header`` (the operator's
proxy) still vouches for its user; without keys no named user is an admin. A real
daemon (:func:`tmy.testing.serving`) on a loopback port, driven with httpx.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy.adapters.http.api import key_identity
from tmy.testing.bot import settings_for
from tmy.testing.serving import TEST_DEFAULTS, Daemon, serving

pytestmark = pytest.mark.slow  # a served daemon on a loopback port

ADMIN_KEY, USER_KEY = "sk-admin-key-0123", "sk-user-key-4567"
RULES = """
rules:
  - id: wipe
    triggers: [wipe]
    admin_only: true
    steps: [{plugin: ADJUST, input: "wiped"}]
  - id: who
    triggers: [who]
    steps: [{plugin: ADJUST, input: "{USER}@{PLATFORM}"}]
"""
# the names a caller might claim, on each platform, bare too; and the admin key's identity
ADMINS = (
    "openai:boss",
    "http:boss",
    "boss",
    f"openai:{key_identity(ADMIN_KEY)}",
    f"http:{key_identity(ADMIN_KEY)}",
)
COMMAND = ".tmy rules wipe"  # an admin command: its answer names the rule
OPENWEBUI = "X-OpenWebUI-User-Id"  # the default adapters.openai.user_header


@asynccontextmanager
async def daemon(
    keys: tuple[str, ...] = (ADMIN_KEY, USER_KEY), tmp: Path | None = None, **sections: Any
) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    """The served daemon and a client of its listener; ``sections``: raw config sections
    (``adapters``, which serving() cannot take by name: rules from ``tmp``, then)."""
    fields: dict[str, Any] = {"http_api_keys": keys, "admins": ADMINS, **TEST_DEFAULTS}
    if sections:
        assert tmp is not None
        (tmp / "rules").mkdir()
        (tmp / "rules" / "r.yaml").write_text(RULES)
        settings, _ = settings_for(tmp / "rules", tmp, **fields, **sections)
        served = serving(settings=settings)
    else:
        served = serving({"r.yaml": RULES}, **fields)
    async with served as d, httpx.AsyncClient(base_url=d.url, timeout=30) as client:
        yield d, client


async def complete(
    client: httpx.AsyncClient, text: str, key: str | None = None, stream: bool = False,
    **headers: str,
) -> str:  # fmt: skip
    """The answer of ``/v1/chat/completions`` (a streamed one: the raw event text)."""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body: dict[str, Any] = {"model": "tmy", "messages": [{"role": "user", "content": text}]}
    if "user" in headers:
        body["user"] = headers.pop("user")
    if stream:
        body["stream"] = True
    r = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.text if stream else r.json()["choices"][0]["message"]["content"]


async def message(client: httpx.AsyncClient, text: str, key: str | None = None, **body: str) -> str:
    """The answer of ``/v1/messages``."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = await client.post("/v1/messages", json={"text": text, **body}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["answer"]


def admin_answer(answer: str) -> bool:
    return answer == "wiped" or "wipe (" in answer


async def test_a_key_naming_an_admin_is_no_admin_on_chat_completions() -> None:
    async with daemon() as (_, client):
        claims: list[dict[str, str]] = [
            {"X-Tmy-User": "boss"},
            {"user": "boss"},  # the body's user
            {OPENWEBUI: "boss"},  # the user_header, not marked trusted
            {"X-Tmy-User": key_identity(ADMIN_KEY)},  # the admin key's identity, named
        ]
        for claim in claims:
            for text in ("wipe", COMMAND):
                answer = await complete(client, text, USER_KEY, **claim)
                assert not admin_answer(answer), (claim, text, answer)
            streamed = await complete(client, "wipe", USER_KEY, stream=True, **claim)
            assert "wiped" not in streamed, claim
        # the named user is still who speaks (filters and variables see it)
        assert await complete(client, "who", USER_KEY, **{"X-Tmy-User": "boss"}) == "boss@openai"


async def test_a_key_naming_an_admin_is_no_admin_on_messages() -> None:
    async with daemon() as (_, client):
        for body in ({"user": "boss"}, {"user": "boss", "platform": "openai"}):
            for text in ("wipe", COMMAND):
                answer = await message(client, text, USER_KEY, **body)
                assert not admin_answer(answer), (body, text, answer)
        named = {"user": key_identity(ADMIN_KEY)}
        assert not admin_answer(await message(client, "wipe", USER_KEY, **named))
        assert await message(client, "who", USER_KEY, user="boss") == "boss@http"


async def test_the_admin_key_is_an_admin_whoever_it_speaks_for() -> None:
    async with daemon() as (_, client):
        assert await complete(client, "wipe", ADMIN_KEY) == "wiped"  # as its own identity
        assert await complete(client, "wipe", ADMIN_KEY, **{"X-Tmy-User": "alice"}) == "wiped"
        assert await complete(client, "wipe", ADMIN_KEY, user="alice") == "wiped"
        assert "wiped" in await complete(client, "wipe", ADMIN_KEY, stream=True)
        assert admin_answer(await complete(client, COMMAND, ADMIN_KEY, **{"X-Tmy-User": "al"}))
        assert await message(client, "wipe", ADMIN_KEY) == "wiped"
        assert await message(client, "wipe", ADMIN_KEY, user="alice") == "wiped"
        assert admin_answer(await message(client, COMMAND, ADMIN_KEY, user="alice"))
        # its rights are per platform, as every admins: entry's
        assert await message(client, "wipe", ADMIN_KEY, platform="onebot") != "wiped"


async def test_a_trusted_user_header_naming_an_admin_makes_it_one(tmp_path: Path) -> None:
    trusted = {"openai": {"user_header_trusted": True}}
    async with daemon(tmp=tmp_path, adapters=trusted) as (_, client):
        assert await complete(client, "wipe", USER_KEY, **{OPENWEBUI: "boss"}) == "wiped"
        assert admin_answer(await complete(client, COMMAND, USER_KEY, **{OPENWEBUI: "boss"}))
        # the proxy's user wins over a claimed one, admin or not
        carol = {OPENWEBUI: "carol", "X-Tmy-User": "boss"}
        assert not admin_answer(await complete(client, "wipe", USER_KEY, **carol))


async def test_without_keys_no_named_user_is_an_admin() -> None:
    async with daemon(keys=()) as (_, client):
        for claim in ({"X-Tmy-User": "boss"}, {"user": "boss"}, {OPENWEBUI: "boss"}, {}):
            for text in ("wipe", COMMAND):
                assert not admin_answer(await complete(client, text, **claim)), (claim, text)
        for text in ("wipe", COMMAND):
            assert not admin_answer(await message(client, text, user="boss"))
            assert not admin_answer(await message(client, text, user="boss", platform="openai"))
