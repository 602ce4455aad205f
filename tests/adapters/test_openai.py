"""The OpenAI-compatible facade, driven by the official ``openai`` package on loopback.

A real :class:`HttpAdapter` on ``127.0.0.1:0`` mounts the facade's routes and
serves a :class:`tmy.testing.Bot`'s engine; the LLM rule runs on the TESTONLY
mock. Also here: item 2's API keys on ``/v1/messages`` and their config.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tmy.adapters.http import HttpAdapter
from tmy.adapters.openai import OpenAIFacade, from_settings
from tmy.adapters.openai import stream as facade_module
from tmy.config import Settings, load_settings
from tmy.daemon import build_adapters
from tmy.errors import AdapterError, ConfigError
from tmy.message import Attachment, Target
from tmy.testing import Bot

KEY = "sk-tmy-test-key"

RULES = """
variables:
  hits: {scope: global, default: 0}
  visits: {scope: user, default: 0}
rules:
  - id: greet
    triggers: ["hi*"]
    steps:
      - plugin: ADJUST
        input: "hello {USER_NAME} ({USER}@{PLATFORM}/{CHAT}) {QUESTION}"
  - id: ai
    triggers: ["ai *"]
    steps:
      - {plugin: LLM, history: 5}
  - id: look
    triggers: ["look *"]
    steps:
      - {plugin: LLM, vision: true}
  - id: fail
    triggers: [fail]
    on_error: "failed, sorry"
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0"}
  - id: addressed
    triggers: [ping]
    mention: true
    private: false
    steps:
      - {plugin: ADJUST, input: "pong in {CHAT}"}
  - id: visits
    triggers: [visit]
    steps:
      - {plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {plugin: ADJUST, input: "{USER} visit {visits}"}
  - id: slow
    triggers: ["slow *"]
    steps:
      - {plugin: HTTP, url: "{QUESTION}", result: text}
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
      - {plugin: ADJUST, input: "slept, hit {hits}"}
"""


@asynccontextmanager
async def serving(
    keys: tuple[str, ...] = (), **options: Any
) -> AsyncIterator[tuple[str, Bot, OpenAIFacade]]:
    """(base URL of the listener, the bot, the facade) with the facade mounted and started."""
    async with Bot({"o.yaml": RULES}, max_message_chars=1000) as bot:
        facade = OpenAIFacade(api_keys=keys, max_message_chars=1000, **options)
        http = HttpAdapter("127.0.0.1:0", max_message_chars=1000, api_keys=keys)
        http.mount(facade.routes())
        await http.start(bot.engine.handle)
        await facade.start(bot.engine.handle)
        try:
            yield f"http://127.0.0.1:{http.port}", bot, facade
        finally:
            await facade.stop()
            await http.stop()


def client(base: str, key: str = KEY, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30, **kw)


def user_says(text: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
async def open_facade() -> AsyncIterator[tuple[str, Bot, OpenAIFacade]]:
    async with serving() as served:
        yield served


@pytest.fixture
async def keyed_facade() -> AsyncIterator[tuple[str, Bot, OpenAIFacade]]:
    async with serving((KEY, "sk-second")) as served:
        yield served


# -- answers through the official client --------------------------------------------------------


async def test_the_openai_package_gets_the_answer(keyed_facade) -> None:
    base, _, _ = keyed_facade
    async with client(base) as oai:
        done = await oai.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "ignored: the rules decide"},
                {"role": "user", "content": "an earlier question"},
                {"role": "assistant", "content": "an earlier answer"},
                {"role": "user", "content": "hi there"},
            ],
            user="ann",
        )
    assert done.choices[0].message.content == "hello ann (ann@openai/private:ann) there"
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].finish_reason == "stop"
    assert done.object == "chat.completion"
    assert done.model == "gpt-4o-mini"  # whatever model was asked for is echoed
    extension = done.model_extra["tmy"]
    assert extension["rule"] == "greet" and extension["failed"] is False
    assert done.id == f"chatcmpl-{extension['trace_id']}"
    assert done.usage is not None and done.usage.total_tokens == 0  # no LLM step ran


async def test_streaming_gets_role_content_and_stop_then_done(keyed_facade) -> None:
    base, _, _ = keyed_facade
    async with client(base) as oai:
        stream = await oai.chat.completions.create(
            model="tmy", messages=user_says("hi stream"), user="bo", stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "hello bo (bo@openai/private:bo) stream"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["tmy"]["rule"] == "greet"
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for


async def test_llm_rule_streams_with_a_usage_chunk_counted_from_the_llm_step(keyed_facade) -> None:
    base, _, _ = keyed_facade
    async with client(base) as oai:
        stream = await oai.chat.completions.create(
            model="tmy",
            messages=user_says("ai MOCK:RESPONSE:mocked answer"),
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        plain = await oai.chat.completions.create(
            model="tmy", messages=user_says("ai MOCK:RESPONSE:mocked answer")
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "mocked answer"
    )
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.prompt_tokens > 0 and last.usage.completion_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    assert plain.choices[0].message.content == "mocked answer"
    assert plain.usage.prompt_tokens > 0 and plain.usage.completion_tokens > 0


async def test_raw_stream_is_server_sent_events_ending_in_done(open_facade) -> None:
    base, _, _ = open_facade
    body = {"model": "tmy", "messages": user_says("hi raw"), "stream": True}
    async with httpx.AsyncClient(timeout=30) as http:
        got = await http.post(f"{base}/v1/chat/completions", json=body)
    assert got.status_code == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    events = [line for line in got.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0].removeprefix("data: "))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}


async def test_models_are_listed_and_retrievable(keyed_facade) -> None:
    base, _, _ = keyed_facade
    async with client(base) as oai:
        models = [m async for m in oai.models.list()]
        one = await oai.models.retrieve("tmy")
        with pytest.raises(openai.NotFoundError):
            await oai.models.retrieve("gpt-4o")
    assert [m.id for m in models] == ["tmy"]
    assert models[0].owned_by == "tmy" and models[0].object == "model"
    assert one.id == "tmy"


# -- who is speaking, and where -----------------------------------------------------------------


async def test_user_field_and_x_tmy_user_header_reach_user(open_facade) -> None:
    base, _, _ = open_facade
    async with client(base) as oai:
        by_field = await oai.chat.completions.create(
            model="tmy", messages=user_says("hi"), user="cat"
        )
        header_wins = await oai.chat.completions.create(
            model="tmy",
            messages=user_says("hi"),
            user="cat",
            extra_headers={"X-Tmy-User": "dog"},
        )
        nobody = await oai.chat.completions.with_raw_response.create(
            model="tmy", messages=user_says("hi")
        )
        open_webui = await oai.chat.completions.create(
            model="tmy",
            messages=user_says("hi"),
            extra_headers={"X-OpenWebUI-User-Id": "u-42", "X-OpenWebUI-User-Name": "Ann%20Lee"},
        )
        named = await oai.chat.completions.create(
            model="tmy", messages=[{"role": "user", "content": "hi", "name": "Eve"}], user="e1"
        )
    assert by_field.choices[0].message.content == "hello cat (cat@openai/private:cat) "
    assert header_wins.choices[0].message.content == "hello dog (dog@openai/private:dog) "
    # no user and no keys: a throwaway identity for this one request (nothing shared)
    assert nobody.headers["X-Tmy-Identity"] == "anonymous-ephemeral"
    said = nobody.parse().choices[0].message.content
    assert said.startswith("hello anonymous (anonymous-ephemeral-")
    assert open_webui.choices[0].message.content == "hello Ann Lee (u-42@openai/private:u-42) "
    assert named.choices[0].message.content == "hello Eve (e1@openai/private:e1) "


async def test_x_tmy_chat_puts_the_message_in_a_group_where_it_counts_as_addressed(
    open_facade,
) -> None:
    base, _, _ = open_facade
    async with client(base) as oai:
        group = await oai.chat.completions.create(
            model="tmy", messages=user_says("ping"), extra_headers={"X-Tmy-Chat": "team"}
        )
        private = await oai.chat.completions.create(model="tmy", messages=user_says("ping"))
    # `mention: true` + `private: false`: answered in the group (the API addresses the bot)
    assert group.choices[0].message.content == "pong in team"
    # private: false keeps it out of DMs: no rule ran, so the unmatched reply
    assert private.choices[0].message.content == "No rule matched this message."


async def test_content_parts_are_joined_and_pictures_become_attachments(open_facade) -> None:
    base, _, _ = open_facade
    parts = [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "parts"},
    ]
    async with client(base) as oai:
        done = await oai.chat.completions.create(model="tmy", messages=user_says(parts), user="p")
        only_image = await oai.chat.completions.create(model="tmy", messages=user_says(parts[1:2]))
        with pytest.raises(openai.BadRequestError) as nothing:
            await oai.chat.completions.create(
                model="tmy", messages=user_says([{"type": "input_audio", "input_audio": {}}])
            )
        with pytest.raises(openai.BadRequestError) as bad_url:
            await oai.chat.completions.create(
                model="tmy",
                messages=user_says([{"type": "image_url", "image_url": {"url": "file:///x"}}]),
            )
    # "hi\nparts": the prefix trigger "hi*" fires; QUESTION is the rest, trimmed
    assert done.choices[0].message.content == "hello p (p@openai/private:p) parts"
    # a picture alone reads "[image]": no rule here takes it
    assert only_image.choices[0].message.content == "No rule matched this message."
    assert "no text or image part" in nothing.value.body["message"]
    assert "must be an http(s) or data: URL" in bad_url.value.body["message"]


async def test_pictures_reach_an_llm_step_through_the_facade(open_facade) -> None:
    base, _, _ = open_facade
    parts = [
        {"type": "text", "text": "look MOCK:IMAGES"},
        {"type": "image_url", "image_url": {"url": "https://cdn.example/a.png"}},
        {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
    ]
    async with client(base) as oai:
        done = await oai.chat.completions.create(model="tmy", messages=user_says(parts))
    assert done.choices[0].message.content == "2 images"


def test_an_image_url_part_is_an_image_attachment() -> None:
    from tmy.adapters.openai.facade import picture

    assert picture("https://cdn.example/a.png") == Attachment(
        "image", url="https://cdn.example/a.png"
    )
    inline = picture("data:image/png;base64,AAAA")
    assert (inline.kind, inline.mime, inline.size, inline.inline) == (
        "image",
        "image/png",
        3,
        False,
    )


# -- answers that are not a normal reply ---------------------------------------------------------


async def test_unmatched_message_answers_the_unmatched_reply_never_empty(open_facade) -> None:
    base, _, _ = open_facade
    async with client(base) as oai:
        done = await oai.chat.completions.create(model="tmy", messages=user_says("nothing here"))
        stream = await oai.chat.completions.create(
            model="tmy", messages=user_says("nothing here"), stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert done.choices[0].message.content == "No rule matched this message."
    assert done.choices[0].finish_reason == "stop"
    assert done.model_extra["tmy"]["rule"] is None
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == "No rule matched this message."
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_the_unmatched_reply_is_configurable() -> None:
    async with serving(unmatched_reply="Try 'hi'.") as (base, _, _), client(base) as oai:
        done = await oai.chat.completions.create(model="tmy", messages=user_says("what"))
        matched = await oai.chat.completions.create(model="tmy", messages=user_says("hi"))
    assert done.choices[0].message.content == "Try 'hi'."
    assert matched.choices[0].message.content.startswith("hello ")


async def test_tools_and_response_format_are_ignored_not_refused(open_facade) -> None:
    base, _, _ = open_facade
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    async with client(base) as oai:
        done = await oai.chat.completions.create(
            model="tmy",
            messages=user_says("hi"),
            user="t",
            tools=[tool],
            response_format={"type": "json_object"},
        )
    assert done.choices[0].message.content == "hello t (t@openai/private:t) "
    assert done.choices[0].message.tool_calls is None


# -- one identity per person ---------------------------------------------------------------------


async def test_without_a_user_each_api_key_is_its_own_identity(keyed_facade) -> None:
    base, _, _ = keyed_facade
    said = {}
    for key in (KEY, "sk-second", KEY):
        async with client(base, key=key) as oai:
            raw = await oai.chat.completions.with_raw_response.create(
                model="tmy", messages=user_says("visit")
            )
        assert raw.headers["X-Tmy-Identity"] == "api-key"
        said.setdefault(key, []).append(raw.parse().choices[0].message.content)
    first, again = said[KEY]
    (second,) = said["sk-second"]
    user = first.split(" ")[0]
    assert user.startswith("key:") and len(user) == len("key:") + 12
    assert KEY not in first and "second" not in second
    assert first == f"{user} visit 1" and again == f"{user} visit 2"  # stable per key
    assert second.split(" ")[0] != user and second.endswith(" visit 1")  # not shared


async def test_without_keys_or_a_user_nothing_is_shared_between_requests(open_facade) -> None:
    base, _, _ = open_facade
    async with client(base) as oai:
        one = await oai.chat.completions.create(model="tmy", messages=user_says("visit"))
        two = await oai.chat.completions.create(model="tmy", messages=user_says("visit"))
    # each request is a fresh identity: no earlier turn of another client is seen
    assert one.choices[0].message.content.endswith(" visit 1")
    assert two.choices[0].message.content.endswith(" visit 1")
    assert one.choices[0].message.content != two.choices[0].message.content


async def test_a_request_without_a_user_or_key_keeps_no_history_or_memory(open_facade) -> None:
    """An ephemeral identity lasts one request: nothing may pile up under one-off ids."""
    base, bot, _ = open_facade
    store = bot.app.store
    async with client(base) as oai:
        for _ in range(2):
            await oai.chat.completions.create(model="tmy", messages=user_says("ai hello"))
        assert await store.keys("llmhist/") == []
        await oai.chat.completions.create(model="tmy", messages=user_says("ai hello"), user="cat")
    # a named user's turn is kept: the check above would have seen an ephemeral one
    assert await store.keys("llmhist/") == ["llmhist/openai/private:cat/cat"]


async def test_a_trusted_user_header_cannot_be_overridden_by_the_body_or_x_tmy_user() -> None:
    options = {"user_header": "X-Forwarded-User", "user_header_trusted": True}
    async with serving(**options) as (base, _, _), client(base) as oai:
        raw = await oai.chat.completions.with_raw_response.create(
            model="tmy",
            messages=user_says("hi"),
            user="mallory",
            extra_headers={"X-Forwarded-User": "alice", "X-Tmy-User": "mallory"},
        )
        no_proxy = await oai.chat.completions.create(
            model="tmy", messages=user_says("hi"), user="bob"
        )
    assert raw.headers["X-Tmy-Identity"] == "trusted-header"
    assert raw.parse().choices[0].message.content == "hello alice (alice@openai/private:alice) "
    assert no_proxy.choices[0].message.content == "hello bob (bob@openai/private:bob) "


async def test_an_untrusted_user_header_comes_after_the_body_user() -> None:
    async with serving(user_header="X-Forwarded-User") as (base, _, _), client(base) as oai:
        body_wins = await oai.chat.completions.create(
            model="tmy",
            messages=user_says("hi"),
            user="bob",
            extra_headers={"X-Forwarded-User": "alice"},
        )
        header = await oai.chat.completions.create(
            model="tmy", messages=user_says("hi"), extra_headers={"X-Forwarded-User": "al"}
        )
    assert body_wins.choices[0].message.content == "hello bob (bob@openai/private:bob) "
    assert header.choices[0].message.content == "hello al (al@openai/private:al) "


def test_the_openai_section_of_the_config_reaches_the_facade(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text(
        "adapters:\n  openai:\n    user_header: X-Auth-User\n    user_header_trusted: true\n"
        "    unmatched_reply: nope\n",
        encoding="utf-8",
    )
    facade = from_settings(load_settings(config, env={}))
    assert facade is not None
    assert (facade.user_header, facade.user_header_trusted) == ("X-Auth-User", True)
    assert facade.unmatched_reply == "nope"
    default = from_settings(Settings())
    assert default is not None and default.user_header == "X-OpenWebUI-User-Id"
    assert default.user_header_trusted is False


async def test_failed_run_answers_with_the_rules_error_reply(open_facade) -> None:
    base, _, _ = open_facade
    async with client(base) as oai:
        done = await oai.chat.completions.create(model="tmy", messages=user_says("fail"))
    assert done.choices[0].message.content == "failed, sorry"
    assert done.model_extra["tmy"] == {
        "rule": "fail",
        "trace_id": done.model_extra["tmy"]["trace_id"],
        "failed": True,
    }
    assert "division" not in done.model_dump_json()  # the error detail stays in the log


# -- API keys -----------------------------------------------------------------------------------


async def test_a_bad_key_gets_authentication_error(keyed_facade) -> None:
    base, _, _ = keyed_facade
    async with client(base, key="sk-wrong") as oai:
        with pytest.raises(openai.AuthenticationError) as refused:
            await oai.chat.completions.create(model="tmy", messages=user_says("hi"))
        with pytest.raises(openai.AuthenticationError):
            await oai.chat.completions.create(model="tmy", messages=user_says("hi"), stream=True)
        with pytest.raises(openai.AuthenticationError):
            await oai.models.list()
    assert refused.value.status_code == 401
    assert refused.value.body == {
        "message": "invalid API key",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    async with client(base, key="sk-second") as oai:  # any configured key works
        done = await oai.chat.completions.create(model="tmy", messages=user_says("hi"), user="k")
    assert done.choices[0].message.content.startswith("hello k")


async def test_no_key_when_keys_are_configured_gets_authentication_error(keyed_facade) -> None:
    base, _, _ = keyed_facade
    async with client(base, key="unsent") as oai:  # the package insists on a key: drop it
        with pytest.raises(openai.AuthenticationError) as refused:
            await oai.chat.completions.create(
                model="tmy",
                messages=user_says("hi"),
                extra_headers={"Authorization": openai.Omit()},
            )
    assert "missing API key" in refused.value.body["message"]
    async with httpx.AsyncClient(timeout=30) as http:
        bare = await http.post(f"{base}/v1/chat/completions", json={"messages": user_says("hi")})
        models = await http.get(f"{base}/v1/models")
    assert bare.status_code == 401 and models.status_code == 401
    assert bare.json()["error"]["code"] == "invalid_api_key"
    assert "missing API key" in bare.json()["error"]["message"]
    assert bare.headers["WWW-Authenticate"] == "Bearer"


async def test_without_configured_keys_no_key_is_needed(open_facade) -> None:
    base, _, _ = open_facade
    async with client(base, key="anything") as oai:
        done = await oai.chat.completions.create(model="tmy", messages=user_says("hi"), user="z")
    async with httpx.AsyncClient(timeout=30) as http:
        bare = await http.post(
            f"{base}/v1/chat/completions", json={"messages": user_says("hi"), "user": "z"}
        )
        models = await http.get(f"{base}/v1/models")
    assert done.choices[0].message.content == bare.json()["choices"][0]["message"]["content"]
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tmy"


async def test_v1_messages_needs_the_bearer_key_when_keys_are_configured(keyed_facade) -> None:
    base, _, _ = keyed_facade
    body = {"text": "hi", "user": "m"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        missing = await http.post("/v1/messages", json=body)
        wrong = await http.post(
            "/v1/messages", json=body, headers={"Authorization": "Bearer sk-wrong"}
        )
        basic = await http.post(
            "/v1/messages", json=body, headers={"Authorization": f"Basic {KEY}"}
        )
        right = await http.post(
            "/v1/messages", json=body, headers={"Authorization": f"Bearer {KEY}"}
        )
        health = await http.get("/healthz")  # health stays open for probes
    assert missing.status_code == 401 and "missing API key" in missing.json()["error"]
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid API key"
    assert basic.status_code == 401
    assert right.status_code == 200 and right.json()["answer"].startswith("hello m")
    assert health.status_code == 200


async def test_v1_messages_is_open_without_keys(open_facade) -> None:
    base, _, _ = open_facade
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        got = await http.post("/v1/messages", json={"text": "hi", "user": "m"})
    assert got.status_code == 200 and got.json()["answer"].startswith("hello m")


def test_api_keys_come_from_the_config_file_and_tmy_http_api_keys(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters:\n  http:\n    api_keys: [from-file]\n", encoding="utf-8")
    assert load_settings(config, env={}).http_api_keys == ("from-file",)
    env = {"TMY_HTTP_API_KEYS": " k1, k2 ,,"}
    assert load_settings(config, env=env).http_api_keys == ("k1", "k2")  # env wins
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n", encoding="utf-8")
    assert load_settings(empty, env={}).http_api_keys == ()
    assert from_settings(load_settings(empty, env=env)).api_keys == ("k1", "k2")
    for bad in ("api_keys: sk-one", "api_keys: ['']", "api_keys: [1]"):
        config.write_text(f"adapters:\n  http:\n    {bad}\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=r"adapters\.http\.api_keys"):
            load_settings(config, env={})


# -- requests the facade refuses ----------------------------------------------------------------


async def post_raw(base: str, content: bytes | str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{base}/v1/chat/completions",
            content=content,
            headers={"Content-Type": "application/json", **headers},
        )


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{not json", "could not parse"),
        ("[1, 2]", "must be a JSON object"),
        ("{}", "'messages' is required"),
        ('{"messages": []}', "'messages' is required"),
        ('{"messages": ["hi"]}', "messages[0] must be an object"),
        ('{"messages": [{"role": "system", "content": "x"}]}', "no message with role 'user'"),
        ('{"messages": [{"role": "user", "content": null}]}', "must be a string or an array"),
        ('{"messages": [{"role": "user"}]}', "must be a string or an array"),
        ('{"messages": [{"role": "user", "content": ["hi"]}]}', "content part 0"),
        ('{"messages": [{"role": "user", "content": "hi"}], "model": 4}', "'model' must be"),
        ('{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', "'stream' must"),
        ('{"messages": [{"role": "user", "content": "hi"}], "user": ["x"]}', "'user' must be"),
        ('{"messages": [{"role": "user", "content": "hi"}], "user": "\\ud800"}', "surrogate"),
        ('{"messages": [{"role": "user", "content": "hi"}], "user": "' + "u" * 300 + '"}', "limit"),
        ('{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ],
)
async def test_malformed_requests_get_a_400_in_openais_shape(
    open_facade, body: str, says: str
) -> None:
    base, _, _ = open_facade
    error = error_of(await post_raw(base, body), 400)
    assert error["type"] == "invalid_request_error"
    assert says in error["message"]


async def test_the_openai_package_raises_bad_request_for_a_too_long_message(open_facade) -> None:
    base, _, _ = open_facade
    async with client(base) as oai:
        with pytest.raises(openai.BadRequestError) as refused:
            await oai.chat.completions.create(model="tmy", messages=user_says("hi " + "x" * 2000))
    assert refused.value.body["code"] == "context_length_exceeded"
    assert "limit 1000" in refused.value.body["message"]


async def test_a_body_over_the_listener_cap_is_a_413_in_openais_shape(open_facade) -> None:
    base, _, _ = open_facade
    huge = json.dumps({"messages": user_says("x" * (2 * 1024 * 1024))})
    error = error_of(await post_raw(base, huge), 413)
    assert error["type"] == "invalid_request_error"


async def test_bad_x_tmy_chat_header_is_refused(open_facade) -> None:
    base, _, _ = open_facade
    body = json.dumps({"messages": user_says("hi")})
    error = error_of(await post_raw(base, body, **{"X-Tmy-Chat": "c" * 300}), 400)
    assert "'chat'" in error["message"]


# -- the adapter contract -----------------------------------------------------------------------


async def test_health_send_and_a_facade_that_is_not_started() -> None:
    facade = OpenAIFacade()
    assert facade.health()["state"] == "stopped"
    with pytest.raises(AdapterError, match="cannot send"):
        await facade.send(Target("openai", "x"), "hello")
    async with serving() as (base, _, started):
        assert started.health()["state"] == "connected"
        assert started.health()["last_event"] is None
        async with client(base) as oai:
            await oai.chat.completions.create(model="tmy", messages=user_says("hi"))
        assert started.health()["last_event"] is not None
        await started.stop()  # the listener is still up; the facade takes no new messages
        error = error_of(await post_raw(base, json.dumps({"messages": user_says("hi")})), 503)
        assert error["code"] == "service_unavailable"
        assert started.health()["state"] == "stopped"


def test_from_settings_follows_the_http_listener() -> None:
    assert from_settings(Settings(http_enabled=False)) is None
    facade = from_settings(Settings(http_api_keys=("a",), max_message_chars=7, max_id_chars=9))
    assert isinstance(facade, OpenAIFacade)
    assert (facade.api_keys, facade.max_chars, facade.max_id_chars) == (("a",), 7, 9)
    names = [a.name for a in build_adapters(Settings(console=False))]
    assert names[0] == "http" and "openai" in names
    assert "openai" not in [a.name for a in build_adapters(Settings(http_enabled=False))]


# -- long runs while streaming ------------------------------------------------------------------


@asynccontextmanager
async def slow_server(delay: float) -> AsyncIterator[str]:
    """A loopback HTTP server that answers after ``delay`` seconds (the HTTP step's target)."""

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(delay)
        return web.Response(text="zz")

    app = web.Application()
    app.router.add_get("/", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def test_stream_sends_keep_alive_comments_during_a_long_run(
    open_facade, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade_module, "STREAM_KEEPALIVE", 0.05)
    base, _, _ = open_facade
    async with slow_server(0.5) as url:
        body = {"messages": user_says(f"slow {url}"), "stream": True}
        async with httpx.AsyncClient(timeout=30) as http:
            raw = await http.post(f"{base}/v1/chat/completions", json=body)
        async with client(base) as oai:
            stream = await oai.chat.completions.create(
                model="tmy", messages=user_says(f"slow {url}"), stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert raw.text.startswith(": keep-alive\n\n")
    assert raw.text.endswith("data: [DONE]\n\n")
    assert text == "slept, hit 2"  # the official client skips the comments


async def test_a_client_that_leaves_mid_stream_does_not_cancel_the_run(
    open_facade, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade_module, "STREAM_KEEPALIVE", 0.05)  # the facade sees it go
    base, bot, _ = open_facade
    async with slow_server(0.5) as url:
        body = {"messages": user_says(f"slow {url}"), "stream": True}
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("POST", f"{base}/v1/chat/completions", json=body) as got,
        ):
            assert got.status_code == 200  # headers are out; now hang up
        for _ in range(200):
            if await bot.var("hits") == 1:
                break
            await asyncio.sleep(0.05)
        assert await bot.var("hits") == 1
        async with client(base) as oai:  # and the facade keeps serving
            done = await oai.chat.completions.create(model="tmy", messages=user_says("hi"))
        assert done.choices[0].message.content.startswith("hello")
