"""Hardening of what tmy reads and writes over the network (issue 7, defects 6, 9 and 11).

* 6 — response bodies are bounded: an HTTP step (``max_response_bytes``) and the
  LLM client (``llm.max_response_bytes``, plain bodies and SSE streams) stop
  reading at the cap with a "too large" error, and the daemon's memory stays
  bounded (checked on a real ``run.py ask`` subprocess).
* 9 — references in an HTTP step's ``url`` are percent-encoded for their
  position, so a user cannot add query parameters or leave the path segment.
* 11 — configured secrets never reach ``STEP_ERROR``, the reply's ``error``
  field or the log, even when an upstream echoes them back.

Every server here is a real aiohttp server on loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tmy import logs
from tmy.adapters.http import HttpAdapter
from tmy.errors import RuleErrors
from tmy.message import Reply
from tmy.testing import Bot

REPO = Path(__file__).resolve().parent.parent
MB = 1024 * 1024
PEAK_RSS_LIMIT_KB = 600 * 1024


@dataclass
class Upstream:
    """What the loopback server saw."""

    url: str = ""
    limit: int | None = 64 * MB  # bytes an "endless" body stops at (None: truly endless)
    hits: list[dict[str, Any]] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [h["path"] for h in self.hits]


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


async def _endless(request: web.Request, up: Upstream, first: bytes, chunk: bytes, ctype: str):
    response = web.StreamResponse(headers={"Content-Type": ctype})
    await response.prepare(request)
    sent = 0
    try:
        await response.write(first)
        while up.limit is None or sent < up.limit:
            await response.write(chunk)
            sent += len(chunk)
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client stopped reading and went away: what it should do
    return response


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()

    def record(request: web.Request, **extra: Any) -> None:
        up.hits.append(
            {
                "path": request.path,
                "raw_path": request.raw_path,
                "query": list(request.query.items()),
                "headers": dict(request.headers),
                **extra,
            }
        )

    async def forever(request: web.Request) -> web.StreamResponse:
        record(request)
        return await _endless(request, up, b"", b"x" * 65536, "application/octet-stream")

    async def big(request: web.Request) -> web.Response:
        record(request)
        return web.Response(body=b"y" * (2 * MB), content_type="text/plain")

    async def weather(request: web.Request) -> web.Response:
        record(request, city=request.match_info["city"])
        return web.Response(text=f"weather in {request.match_info['city']}")

    async def stats(request: web.Request) -> web.Response:
        record(request)
        return web.Response(text="SECRET STATS")

    async def tagged(request: web.Request) -> web.Response:
        record(request)
        return web.json_response(list(request.query.items()))

    async def echo_auth(request: web.Request) -> web.Response:
        record(request)
        said = f"{request.headers.get('Authorization')} {request.headers.get('X-Api-Key')}"
        return web.Response(status=401, text=f"bad credentials: {said}")

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        record(request, model=body.get("model"))
        model = body.get("model")
        if model == "endless-json":
            head = b'{"id": "x", "choices": [{"index": 0, "message": {"content": "'
            return await _endless(request, up, head, b"a" * 65536, "application/json")
        if model == "endless-sse":
            delta = {"choices": [{"index": 0, "delta": {"content": "la " * 2000}}]}
            return await _endless(request, up, b"", _sse(delta) * 8, "text/event-stream")
        if model == "echo-key":
            said = request.headers.get("Authorization", "")
            return web.json_response(
                {"error": {"message": f"Incorrect API key provided: {said}", "type": "auth"}},
                status=400,
            )
        return web.json_response(
            {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {}}
        )

    app = web.Application()
    app.router.add_get("/forever", forever)
    app.router.add_get("/big", big)
    app.router.add_get("/weather/{city}", weather)
    app.router.add_get("/stats", stats)
    app.router.add_get("/tagged", tagged)
    app.router.add_route("*", "/echo-auth", echo_auth)
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    up.url = f"http://127.0.0.1:{port}"
    try:
        yield up
    finally:
        await runner.cleanup()


RULE_HEAD = 'rules:\n  - id: r\n    triggers: ["go*"]\n    on_error: "E: {STEP_ERROR}"\n'


def _rules(steps: str) -> dict[str, str]:
    body = textwrap.indent(textwrap.dedent(steps).strip(), " " * 6)
    return {"x.yaml": RULE_HEAD + "    steps:\n" + body + "\n"}


async def run_steps(steps: str, text: str = "go", **settings: Any) -> Reply:
    async with Bot(_rules(steps), **settings) as bot:
        return await bot.ask(text)


def _llm(up: Upstream, model: str, **extra: Any) -> dict[str, Any]:
    spec = {"base_url": f"{up.url}/v1", "model": model, **extra.pop("spec", {})}
    return {"models": {"m": spec}, "default": "m", "retries": 0, **extra}


LLM_STEP = "- {plugin: LLM, deadline: 30}"


# -- 6: bounded response bodies --------------------------------------------------------------


async def test_http_step_stops_reading_an_endless_body(upstream: Upstream) -> None:
    started = time.monotonic()
    reply = await run_steps(
        f'- {{plugin: HTTP, url: "{upstream.url}/forever", max_response_bytes: 1000000}}'
    )
    assert reply.error is not None
    assert "too large" in reply.error
    assert f"{upstream.url}/forever" in reply.error and "1000000" in reply.error
    assert time.monotonic() - started < 20  # the cap, not the step timeout, ended it


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


async def test_llm_body_that_never_ends_is_too_large(upstream: Upstream) -> None:
    llm = _llm(upstream, "endless-json", max_response_bytes=1_000_000)
    reply = await run_steps(LLM_STEP, llm=llm)
    assert reply.error is not None
    assert "too large" in reply.error and "1000000" in reply.error and "endless-json" in reply.error


async def test_llm_sse_stream_that_never_ends_is_too_large(upstream: Upstream) -> None:
    llm = _llm(upstream, "endless-sse", max_response_bytes=1_000_000, spec={"stream": True})
    started = time.monotonic()
    reply = await run_steps(LLM_STEP, llm=llm)
    assert reply.error is not None
    assert "too large" in reply.error and "endless-sse" in reply.error, reply.error
    assert "deadline" not in reply.error
    assert time.monotonic() - started < 20


def test_llm_max_response_bytes_is_validated() -> None:
    from tmy.config.llm import load_config
    from tmy.errors import ConfigError

    assert load_config({}, env={}).max_response_bytes == 8 * MB
    assert load_config({"max_response_bytes": 1000}, env={}).max_response_bytes == 1000
    with pytest.raises(ConfigError, match="max_response_bytes"):
        load_config({"max_response_bytes": 0}, env={})


def _peak_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


@pytest.mark.timeout(120)
async def test_daemon_memory_stays_bounded_against_endless_bodies(
    upstream: Upstream, tmp_path: Path
) -> None:
    """``run.py ask`` against endless bodies (HTTP step, LLM SSE): peak RSS < 600 MB."""
    upstream.limit = None  # truly endless: only the client can stop it
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        textwrap.dedent(f"""
        rules:
          - id: fetch
            triggers: ["fetch"]
            steps:
              - {{plugin: HTTP, url: "{upstream.url}/forever", timeout: 50}}
          - id: talk
            triggers: ["talk"]
            steps:
              - {{plugin: LLM, deadline: 50}}
        """)
    )
    config = tmp_path / "tmy.yaml"
    config.write_text(
        json.dumps(
            {
                "rules": str(rules),
                "plugins": str(tmp_path / "plugins"),
                "store": f"sqlite:///{tmp_path / 'tmy.db'}",
                "limits": {"step_timeout": 55},
                "llm": _llm(upstream, "endless-sse", spec={"stream": True}),
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    for text in ("fetch", "talk"):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "run.py", "--config", str(config), "ask", text, "--json",
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        peak = 0
        deadline = time.monotonic() + 90
        while proc.returncode is None:
            peak = max(peak, _peak_kb(proc.pid))
            if peak > PEAK_RSS_LIMIT_KB or time.monotonic() > deadline:
                proc.kill()
                break
            try:
                await asyncio.wait_for(proc.wait(), 0.05)
            except TimeoutError:
                pass
        out, err = await proc.communicate()
        assert peak < PEAK_RSS_LIMIT_KB, f"{text}: peak RSS {peak // 1024} MB"
        result = json.loads(out)
        assert "too large" in (result["error"] or ""), (text, result["error"], err[-2000:])


# -- 9: references in URLs are encoded for their position ------------------------------------


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


# -- 11: secrets are redacted ----------------------------------------------------------------

API_KEY = "sk-test-5ecret-K3y-0123456789"


async def test_echoed_api_key_is_redacted(
    upstream: Upstream, log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMY_TEST_ECHO_KEY", API_KEY)
    llm = _llm(upstream, "echo-key", spec={"api_key_env": "TMY_TEST_ECHO_KEY"})
    rules = _rules(LLM_STEP)
    async with Bot(rules, llm=llm) as bot:
        http = HttpAdapter("127.0.0.1:0")
        await http.start(bot.engine.handle)
        try:
            async with httpx.AsyncClient() as client:
                got = await client.post(
                    f"http://127.0.0.1:{http.port}/v1/messages", json={"text": "go"}
                )
        finally:
            await http.stop()
        reply = await bot.ask("go")
    assert upstream.hits[0]["headers"]["Authorization"] == f"Bearer {API_KEY}"  # it was sent
    error = got.json()["error"]
    assert "Incorrect API key provided" in error and "***" in error
    assert API_KEY not in error
    assert reply.error is not None and API_KEY not in reply.error and "***" in reply.error
    assert API_KEY not in reply.text and API_KEY not in (reply.steps[0].error or "")
    assert API_KEY not in json.dumps(reply.steps[0].extra, default=str)
    logs.flush()
    text = log_file.read_text()
    assert "Incorrect API key provided" in text
    assert API_KEY not in text


async def test_password_in_base_url_is_not_logged(
    log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tmy.llm
    from tmy.app import SERVE_NOTICES

    password = "hunter2-pa55word"
    llm = {"models": {"m": {"base_url": f"http://bob:{password}@127.0.0.1:9/v1", "model": "x"}},
           "default": "m", "retries": 0}  # fmt: skip
    async with Bot(_rules(LLM_STEP), llm=llm) as bot:
        monkeypatch.setattr(tmy.llm, "_announced", False)
        for notice in SERVE_NOTICES:  # what serve logs at start: the model's endpoint
            notice(bot.engine.services)
        reply = await bot.ask("go")  # nothing listens on port 9: the error names the endpoint
    logs.flush()
    text = log_file.read_text()
    assert '"llm.model"' in text and "bob:***@127.0.0.1:9" in text
    assert password not in text
    assert reply.error is not None and password not in reply.error


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


def test_redaction_registry() -> None:
    from tmy import redact

    redact.add_url("redis://default:St0re-Pa55@127.0.0.1:6379/0")
    assert redact.redact("AUTH failed for St0re-Pa55!") == "AUTH failed for ***!"
    assert redact.safe_url("redis://default:St0re-Pa55@h:1/0") == "redis://default:***@h:1/0"
    assert redact.safe_url("http://h/x?a=b@c") == "http://h/x?a=b@c"
    redact.add("ab")  # too short to be a secret: not registered
    assert redact.redact("abc") == "abc"
    line = logs._render(None, "info", {"event": "x", "detail": 'key "St0re-Pa55"'})
    assert b"St0re-Pa55" not in line


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
