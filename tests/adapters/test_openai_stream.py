"""The OpenAI facade streams an LLM step's tokens as they come: the official ``openai``
SDK's streaming client against the real listener on loopback, the LLM step against a
fake provider that streams its answer in many small deltas."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai

from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.llm_helpers import on
from tmy.adapters.http import HttpAdapter
from tmy.adapters.openai import OpenAIFacade
from tmy.testing import Bot
from tmy.testing import serving as serve

ANSWER = "Streaming answers arrive piece by piece, as the model writes them."

RULES = """
rules:
  - id: live
    triggers: ["live *"]
    steps:
      - {plugin: LLM, stream: true}
  - id: whole
    triggers: ["whole *"]
    steps:
      - {plugin: LLM}
  - id: more
    triggers: ["more *"]
    steps:
      - {plugin: LLM, stream: true}
      - {plugin: ADJUST, input: "{STEP_RESULT} (checked)"}
  - id: other
    triggers: ["other *"]
    steps:
      - {plugin: LLM, stream: true}
      - {plugin: ADJUST, input: "something else"}
"""


@asynccontextmanager
async def serving(provider: FakeProvider) -> AsyncIterator[str]:
    async with Bot({"s.yaml": RULES}, llm=on(provider)) as bot:
        facade = OpenAIFacade()
        http = HttpAdapter("127.0.0.1:0")
        http.mount(facade.routes())
        await http.start(bot.engine.handle)
        await facade.start(bot.engine.handle)
        try:
            yield f"http://127.0.0.1:{http.port}"
        finally:
            await facade.stop()
            await http.stop()


async def chunks_of(base: str, text: str, **extra: Any) -> list[Any]:
    async with openai.AsyncOpenAI(
        base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=30
    ) as oai:
        stream = await oai.chat.completions.create(
            model="tmy", messages=[{"role": "user", "content": text}], stream=True, **extra
        )
        return [chunk async for chunk in stream]


def contents(chunks: list[Any]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


async def test_the_sdk_gets_a_streaming_llm_answer_in_several_chunks(
    provider: FakeProvider,
) -> None:
    provider.script("fake", [Reply(ANSWER)])
    async with serving(provider) as base:
        chunks = await chunks_of(base, "live tell me", stream_options={"include_usage": True})
    pieces = contents(chunks)
    assert len(pieces) > 5 and "".join(pieces) == ANSWER  # the fake sends 4 characters a delta
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].id == f"chatcmpl-{chunks[-2].model_extra['tmy']['trace_id']}"
    finish = chunks[-2]
    assert finish.choices[0].finish_reason == "stop" and finish.model_extra["tmy"]["rule"] == "live"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert provider.seen()[0]["stream"] is True


async def test_the_first_piece_arrives_while_the_model_is_still_writing(
    provider: FakeProvider,
) -> None:
    """The provider holds the rest of its answer until the client has the first piece:
    only a facade that forwards tokens as they come can finish this."""
    hold = asyncio.Event()
    provider.script("fake", [Reply(ANSWER, hold=hold)])
    async with (
        serving(provider) as base,
        openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=30) as oai,
    ):
        stream = await oai.chat.completions.create(
            model="tmy", messages=[{"role": "user", "content": "live x"}], stream=True
        )

        async def read() -> list[str]:
            got = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    got.append(chunk.choices[0].delta.content)
                    hold.set()  # the first piece is here: let the model go on
            return got

        pieces = await asyncio.wait_for(read(), 20)
    assert pieces[0] == ANSWER[:4] and "".join(pieces) == ANSWER


async def test_a_step_without_stream_is_one_chunk(provider: FakeProvider) -> None:
    provider.script("fake", [Reply(ANSWER)])
    async with serving(provider) as base:
        chunks = await chunks_of(base, "whole tell me")
    assert contents(chunks) == [ANSWER]


async def test_what_a_later_step_adds_comes_after_the_stream(provider: FakeProvider) -> None:
    provider.script("fake", [Reply(ANSWER), Reply(ANSWER)])
    async with serving(provider) as base:
        more = contents(await chunks_of(base, "more tell me"))
        other = contents(await chunks_of(base, "other tell me"))
    assert "".join(more) == f"{ANSWER} (checked)" and more[-1] == " (checked)"
    # a reply that no longer continues what streamed comes whole, after a blank line
    assert "".join(other) == f"{ANSWER}\n\nsomething else"


async def test_the_raw_events_end_with_stop_and_done(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("short answer")])
    async with serving(provider) as base:
        body = {"messages": [{"role": "user", "content": "live x"}], "stream": True}
        async with httpx.AsyncClient(timeout=30) as http:
            got = await http.post(f"{base}/v1/chat/completions", json=body)
    events = [e.removeprefix("data: ") for e in got.text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    decoded = [json.loads(e) for e in events[:-1]]
    assert decoded[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [d["choices"][0]["finish_reason"] for d in decoded][-1] == "stop"
    text = "".join(d["choices"][0]["delta"].get("content") or "" for d in decoded)
    assert text == "short answer"


async def test_the_served_daemon_streams_to_the_sdk(provider: FakeProvider) -> None:
    """The same through the app as ``serve`` builds it: the configured HTTP listener with
    the facade mounted (not a listener the test put together)."""
    provider.script("fake", [Reply(ANSWER)])
    async with serve({"s.yaml": RULES}, llm=on(provider)) as daemon:
        chunks = await chunks_of(daemon.url, "live tell me")
    pieces = contents(chunks)
    assert len(pieces) > 5 and "".join(pieces) == ANSWER
