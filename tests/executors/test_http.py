"""The HTTP step (tmy/executors/http.py) against a real loopback upstream: bounded bodies,
references percent-encoded for their place in the URL, credentials kept out of errors and logs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.support.log_helpers import read_log
from tests.support.steps import run_steps
from tests.support.upstream import MB, Upstream
from tmy import logs
from tmy.errors import RuleErrors
from tmy.testing import Bot

# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


async def test_http_step_stops_reading_an_endless_body(upstream: Upstream) -> None:
    reply = await run_steps(
        f'- {{plugin: HTTP, url: "{upstream.url}/forever", max_response_bytes: 1000000}}'
    )
    assert reply.error is not None
    assert "too large" in reply.error
    assert f"{upstream.url}/forever" in reply.error and "1000000" in reply.error
    assert "timed out" not in reply.error  # the cap, not the step timeout, ended it


async def test_http_step_default_cap_and_declared_length(upstream: Upstream) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{upstream.url}/forever"}}')
    assert reply.error is not None and "too large" in reply.error
    assert str(5 * MB) in reply.error  # the default cap
    # a Content-Length over the cap is refused before the body is read
    big = await run_steps(
        f'- {{plugin: HTTP, url: "{upstream.url}/big", max_response_bytes: 1000000}}'
    )
    assert big.error is not None and "too large" in big.error
    fits = await run_steps(f'- {{plugin: HTTP, url: "{upstream.url}/big", result: status}}')
    assert fits.error is None and fits.steps[0].result == 200


@pytest.mark.parametrize("bad", ["0", "-5", "true", "'lots'", "1.5"])
async def test_http_max_response_bytes_is_checked_at_load(bad: str) -> None:
    with pytest.raises(RuleErrors, match="max_response_bytes"):
        await run_steps(
            f"- {{plugin: HTTP, url: 'http://127.0.0.1:9/x', max_response_bytes: {bad}}}"
        )


async def test_query_value_cannot_add_parameters(upstream: Upstream) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{upstream.url}/tagged?tag={{QUESTION}}"}}',
                            "go x&s=4")  # fmt: skip
    assert reply.error is None, reply.error
    assert upstream.hits[-1]["query"] == [("tag", "x&s=4")]


async def test_path_reference_stays_inside_its_segment(upstream: Upstream) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{upstream.url}/weather/{{QUESTION}}"}}',
                            "go ../stats#")  # fmt: skip
    assert reply.error is None, reply.error
    assert upstream.paths() == ["/weather/../stats#"]  # one segment, decoded by the server
    assert upstream.hits[0]["city"] == "../stats#"
    assert reply.text == "weather in ../stats#"


@pytest.mark.parametrize("value", ["..", "."])
async def test_dot_segment_from_a_reference_is_refused(upstream: Upstream, value: str) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{upstream.url}/weather/{{QUESTION}}"}}',
                            f"go {value}")  # fmt: skip
    assert reply.error is not None and "'.' or '..'" in reply.error
    assert upstream.hits == []


async def test_text_is_encoded_and_decoded_back(upstream: Upstream) -> None:
    url = f"{upstream.url}/weather/{{QUESTION}}?q={{QUESTION}}&lang=de#{{QUESTION}}"
    reply = await run_steps(f'- {{plugin: HTTP, url: "{url}"}}', "go Zürich am See?/+%20")
    assert reply.error is None, reply.error
    hit = upstream.hits[-1]
    assert hit["city"] == "Zürich am See?/+%20"
    assert hit["query"] == [("q", "Zürich am See?/+%20"), ("lang", "de")]


async def test_leading_reference_is_the_rules_own_base(upstream: Upstream) -> None:
    """A URL that starts with a reference takes it as written (the rule's own endpoint)."""
    reply = await run_steps(f"""
        - {{plugin: ADJUST, input: "{upstream.url}/weather", save: base}}
        - {{plugin: HTTP, url: "{{base}}/{{QUESTION}}"}}
    """, "go a/b")  # fmt: skip
    assert reply.error is None, reply.error
    assert upstream.hits[-1]["city"] == "a/b"


async def test_reference_in_the_host_must_be_a_host(upstream: Upstream) -> None:
    port = upstream.url.rsplit(":", 1)[1]
    ok = await run_steps(f'- {{plugin: HTTP, url: "http://{{QUESTION}}:{port}/stats"}}',
                         "go 127.0.0.1")  # fmt: skip
    assert ok.error is None, ok.error
    bad = await run_steps(f'- {{plugin: HTTP, url: "http://{{QUESTION}}:{port}/stats"}}',
                          "go 127.0.0.1/weather#")  # fmt: skip
    assert bad.error is not None and "host" in bad.error
    assert upstream.paths() == ["/stats"]


async def test_raw_url_opts_out_of_encoding(upstream: Upstream) -> None:
    reply = await run_steps(
        f'- {{plugin: HTTP, url: "{upstream.url}/tagged?{{QUESTION}}", raw_url: true}}',
        "go a=1&b=2",
    )
    assert reply.error is None, reply.error
    assert upstream.hits[-1]["query"] == [("a", "1"), ("b", "2")]


async def test_http_step_credentials_are_redacted(upstream: Upstream, log_file: Path) -> None:
    token = "tok-CONSTANT-1234567"
    computed = "tok-COMPUTED-7654321"
    reply = await run_steps(f"""
        - plugin: HTTP
          url: "{upstream.url}/echo-auth"
          headers: {{Authorization: "Bearer {token}"}}
          on_error: continue
        - plugin: ADJUST
          input: "{computed}"
          save: key
        - plugin: HTTP
          url: "{upstream.url}/echo-auth"
          headers: {{X-Api-Key: "{{key}}"}}
    """)
    assert upstream.hits[0]["headers"]["Authorization"] == f"Bearer {token}"
    first, last = reply.steps[0].error, reply.steps[-1].error
    assert first is not None and "bad credentials" in first and token not in first
    assert last is not None and "bad credentials" in last and computed not in last
    logs.flush()
    assert token not in log_file.read_text()


async def test_weather_tool_example_keeps_the_city_in_its_segment(upstream: Upstream) -> None:
    """docs/llm.md's forecast tool, with the model (the mock) asking for a hostile city."""
    rules = f"""
rules:
  - id: forecast
    tool:
      description: "Today's weather forecast for a city."
      parameters:
        type: object
        properties: {{city: {{type: string}}}}
        required: [city]
    steps:
      - plugin: HTTP
        url: "{upstream.url}/weather/{{city}}?format=3"
  - id: assistant
    triggers: ["assistant *"]
    steps:
      - {{plugin: LLM, tools: [forecast]}}
"""
    async with Bot({"w.yaml": rules}) as bot:
        reply = await bot.ask('assistant MOCK:TOOL:forecast:{"city": "../stats?x=1#"}')
    assert reply.error is None, reply.error
    assert upstream.paths() == ["/weather/../stats?x=1#"]
    assert upstream.hits[0]["query"] == [("format", "3")]
    assert "weather in ../stats?x=1#" in reply.text


# -- from test_review_issue7.py (review of the issue 7 hardening: attacks that still got through)


async def test_a_secret_in_a_literal_url_query_is_redacted(
    hostile: dict[str, Any], log_file: Path
) -> None:
    key = "k3y-LIVE-0123456789"
    rules = f"""
rules:
  - id: w
    triggers: ["w *"]
    steps:
      - plugin: HTTP
        url: "{hostile["url"]}/err?q={{QUESTION}}&api_key={key}"
"""
    async with Bot({"w.yaml": rules}) as bot:
        reply = await bot.ask("w paris")
    assert reply.error is not None and "cannot serve" in reply.error
    assert key not in reply.error
    assert not [e for e in read_log(log_file) if key in json.dumps(e)]


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """A loopback HTTP server; yields its base URL."""
    release = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "method": request.method,
                "params": dict(request.query),
                "body": await request.text(),
                "type": request.content_type,
                "token": request.headers.get("X-Token"),
            }
        )

    async def text(request: web.Request) -> web.Response:
        return web.Response(text="plain 文本")

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="nothing here")

    async def slow(request: web.Request) -> web.Response:
        try:
            await asyncio.wait_for(release.wait(), 10)
        except TimeoutError:
            pass
        return web.Response(text="late")

    async def bad_json(request: web.Request) -> web.Response:
        return web.Response(text="{broken", content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/text", text)
    app.router.add_get("/missing", missing)
    app.router.add_get("/slow", slow)
    app.router.add_get("/bad-json", bad_json)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        release.set()
        await runner.cleanup()


async def test_http_get_decodes_json(server: str) -> None:
    reply = await run_steps(f"""
      - {{plugin: HTTP, url: "{server}/echo"}}
      - {{plugin: ADJUST, input: "{{STEP_RESULT[method]}} {{STEP_RESULT[params]}}"}}
    """)
    assert reply.steps[0].result["method"] == "GET"
    assert reply.text == "GET {}"
    assert reply.steps[0].extra["status"] == 200


async def test_http_text_response(server: str) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{server}/text"}}')
    assert (reply.error, reply.text) == (None, "plain 文本")


async def test_http_params_and_headers_are_templated_and_encoded(server: str) -> None:
    reply = await run_steps(
        f"""
      - plugin: HTTP
        url: "{server}/echo"
        params: {{q: "{{QUESTION}}", n: 2}}
        headers: {{X-Token: "t-{{USER}}"}}
    """,
        text="go a&b=c d",
    )
    result = reply.steps[0].result
    assert result["params"] == {"q": "a&b=c d", "n": "2"}
    assert result["token"] == "t-tester"


async def test_http_post_body_comes_from_the_input(server: str) -> None:
    reply = await run_steps(f"""
      - {{plugin: HTTP, url: "{server}/echo", method: POST, input: {{k: "{{QUESTION}}"}}}}
      - {{plugin: ADJUST, save: first}}
      - {{plugin: HTTP, url: "{server}/echo", method: POST, input: "raw {{QUESTION}}"}}
      - {{plugin: HTTP, url: "{server}/echo", json: [1, 2]}}
      - {{plugin: ADJUST, input: "?= [first, STEP_RESULT]"}}
    """, text="go v")  # fmt: skip
    first, third = reply.steps[0].result, reply.steps[2].result
    assert (first["method"], first["type"], first["body"]) == ("POST", "application/json",
                                                              '{"k":"v"}')  # fmt: skip
    assert (third["method"], third["body"]) == ("POST", "raw v")
    fourth = reply.steps[3].result
    assert (fourth["method"], fourth["body"]) == ("POST", "[1,2]")  # a json: body means POST


async def test_http_404_is_a_step_error_with_the_status(server: str) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{server}/missing"}}')
    assert reply.error is not None
    assert "404" in reply.error and "nothing here" in reply.error
    assert reply.text == f"E: {reply.error}"
    assert reply.steps[0].extra["status"] == 404


async def test_http_status_without_failing(server: str) -> None:
    reply = await run_steps(f"""
      - {{plugin: HTTP, url: "{server}/missing", fail_on_status: false, result: status}}
      - {{plugin: HTTP, url: "{server}/missing", fail_on_status: false, save: body}}
      - {{plugin: HTTP, url: "{server}/text", result: full}}
    """)  # fmt: skip
    assert reply.steps[0].result == 404
    assert reply.steps[1].result == "nothing here"
    full = reply.steps[2].result
    assert (full["status"], full["body"]) == (200, "plain 文本")
    assert full["headers"]["content-type"].startswith("text/plain")


async def test_http_timeout_is_a_clear_error(server: str) -> None:
    async with asyncio.timeout(30):  # no-hang bound, not a timing assertion
        reply = await run_steps(f'- {{plugin: HTTP, url: "{server}/slow", timeout: 0.3}}')
    assert reply.error is not None
    assert "timed out" in reply.error and "0.3" in reply.error


async def test_http_non_json_when_json_is_required(server: str) -> None:
    reply = await run_steps(f'- {{plugin: HTTP, url: "{server}/text", result: json}}')
    assert reply.error is not None and "not JSON" in reply.error and "plain" in reply.error
    broken = await run_steps(f'- {{plugin: HTTP, url: "{server}/bad-json"}}')
    assert broken.error is not None and "not JSON" in broken.error


async def test_http_connection_refused_is_a_clear_error() -> None:
    reply = await run_steps('- {plugin: HTTP, url: "http://127.0.0.1:9/x", timeout: 5}')
    assert reply.error is not None and "http://127.0.0.1:9/x" in reply.error


@pytest.mark.parametrize(
    ("step", "hint"),
    [
        ("- {plugin: HTTP, url: 'ftp://x'}", "http://"),
        ("- {plugin: HTTP, url: 'http://x', method: FETCH}", "method"),
        ("- {plugin: HTTP, url: 'http://x', result: xml}", "result"),
    ],
)
async def test_http_config_is_checked_at_load_time(step: str, hint: str) -> None:
    with pytest.raises(RuleErrors, match=rf"x\.yaml:\d+: .*{hint}"):
        await run_steps(step)
