"""The HTTP step (tmy/executors/http.py) against a real loopback upstream: bounded bodies,
references percent-encoded for their place in the URL, credentials kept out of errors and logs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.log_helpers import read_log
from tests.support.upstream import MB, Upstream
from tmy import logs
from tmy.errors import RuleErrors
from tmy.message import Reply
from tmy.testing import Bot

# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


RULE_HEAD = 'rules:\n  - id: r\n    triggers: ["go*"]\n    on_error: "E: {STEP_ERROR}"\n'


def _rules(steps: str) -> dict[str, str]:
    body = textwrap.indent(textwrap.dedent(steps).strip(), " " * 6)
    return {"x.yaml": RULE_HEAD + "    steps:\n" + body + "\n"}


async def run_steps(steps: str, text: str = "go", **settings: Any) -> Reply:
    async with Bot(_rules(steps), **settings) as bot:
        return await bot.ask(text)


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
