"""Review of issue 8 (chat platforms): defects found by running the daemon for real.

Each test drives real parts on loopback: the HTTP listener with the OpenAI
facade and the OneBot reverse endpoint mounted, a raw socket or a test-side
WebSocket client playing NapCat, the real engine and store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from tests.support.onebot_fake import SELF_ID, connect_reverse
from tmy.adapters.http import HttpAdapter
from tmy.adapters.onebot import OneBotAdapter, OneBotConfig
from tmy.adapters.openai import OpenAIFacade
from tmy.config import load_settings
from tmy.daemon import Daemon, build_adapters
from tmy.errors import AdapterError, ConfigError
from tmy.message import Target
from tmy.testing import Bot

RULES = """
rules:
  - id: hello
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: "hi {USER}"}
"""

KEY = "sk-review-key"


@asynccontextmanager
async def keyed_listener(bot: Bot) -> AsyncIterator[HttpAdapter]:
    """The daemon's one listener with API keys, the OpenAI facade mounted."""
    facade = OpenAIFacade(api_keys=(KEY,))
    http = HttpAdapter("127.0.0.1:0", api_keys=(KEY,))
    http.mount(facade.routes())
    await facade.start(bot.engine.handle)
    await http.start(bot.engine.handle)
    try:
        yield http
    finally:
        await http.stop()
        await facade.stop()


async def raw_request(port: int, method: str, path: str, headers: bytes, body: bytes) -> int:
    """Send one HTTP/1.1 request byte for byte (headers a client library would refuse)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
            + headers
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    return int(status_line.split()[1])


# -- 1. API keys: a header that is not UTF-8 ----------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/messages", b'{"text": "hello"}'),
        ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hello"}]}'),
        ("GET", "/v1/models", b""),
    ],
)
async def test_an_authorization_header_that_is_not_utf8_is_a_401_not_a_500(
    method: str, path: str, body: bytes
) -> None:
    """Issue 8, item 2: a wrong key is '401 with a JSON error'. Bytes that are not
    UTF-8 (aiohttp hands them over as lone surrogates) made ``api_key_problem``
    raise UnicodeEncodeError: an unlogged 500 with aiohttp's plain-text page."""
    async with Bot({"r.yaml": RULES}) as bot, keyed_listener(bot) as http:
        status = await raw_request(
            http.port, method, path, b"Authorization: Bearer \xff\xfe\r\n", body
        )
        # the listener keeps serving the right key afterwards
        good = await raw_request(
            http.port, method, path, f"Authorization: Bearer {KEY}\r\n".encode(), body
        )
    assert status == 401
    assert good == 200


# -- 2. send(target) to a group with a user: "someone to @" ---------------------------------------


async def test_send_to_a_group_naming_a_user_ats_that_user() -> None:
    """``Target`` documents ``user`` as "a private chat, or someone to @"; the OneBot
    adapter dropped it for a group target, so a cron/admin message meant for one
    member of a group reached the group without the @."""
    async with Bot({"r.yaml": RULES}) as bot:
        adapter = OneBotAdapter(OneBotConfig(send_interval=0), store=bot.app.store)
        http = HttpAdapter("127.0.0.1:0")
        http.mount(adapter.routes())
        await adapter.start(bot.engine.handle)
        await http.start(bot.engine.handle)
        session = aiohttp.ClientSession()
        try:
            impl = await connect_reverse(
                session, f"ws://127.0.0.1:{http.port}/onebot/v11/ws", SELF_ID
            )
            for _ in range(500):
                if adapter.health()["self_ids"]:
                    break
                await asyncio.sleep(0.01)
            await adapter.send(Target("onebot", "group:30003", "20002"), "your turn")
            action = await impl.next_action()
        finally:
            await adapter.stop()
            await http.stop()
            await session.close()
    assert action["params"]["group_id"] == 30003
    segments = action["params"]["message"]
    assert {"type": "at", "data": {"qq": "20002"}} in segments, json.dumps(segments)


# -- 3. TMY_HTTP_API_KEYS that holds no key -------------------------------------------------------


def test_tmy_http_api_keys_with_no_usable_key_is_a_config_error(tmp_path) -> None:
    """An operator who sets TMY_HTTP_API_KEYS means "require a key". A value with
    only separators or blanks (a shell quoting slip: ``TMY_HTTP_API_KEYS=" , "``)
    silently yielded no keys, i.e. an open listener: fail closed, naming the variable."""
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters: {http: {api_keys: [sk-from-the-file]}}\n")
    assert load_settings(config, env={}).http_api_keys == ("sk-from-the-file",)
    with pytest.raises(ConfigError, match="TMY_HTTP_API_KEYS"):
        load_settings(config, env={"TMY_HTTP_API_KEYS": " , "})


# -- 4. an adapter route that shadows (or is shadowed by) a built-in route -------------------------


async def test_a_onebot_path_that_collides_with_a_listener_route_is_refused(tmp_path) -> None:
    """``adapters.onebot.path: /healthz`` (or /v1/messages …) started without a word,
    and the reverse endpoint was never reachable: NapCat got a 200 JSON page and
    retried forever. A colliding route must be refused at start, naming the path."""
    config = tmp_path / "tmy.yaml"
    config.write_text(
        "adapters:\n"
        "  console: {enabled: false}\n"
        "  http: {listen: '127.0.0.1:0'}\n"
        "  onebot: {enabled: true, path: /healthz}\n"
    )
    settings = load_settings(config, env={}).with_(
        rules=tmp_path / "rules", store=f"sqlite:///{tmp_path / 'db.sqlite'}"
    )
    (tmp_path / "rules").mkdir()
    async with Bot({"r.yaml": RULES}) as bot:
        daemon = Daemon(bot.app, build_adapters(settings, console=False, store=bot.app.store))
        try:
            with pytest.raises((AdapterError, ConfigError), match="/healthz"):
                await daemon.start()
        finally:
            await daemon.stop()
