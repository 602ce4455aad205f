"""Executors: HTTP against a real aiohttp server on loopback, ADJUST, and user plugins."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tmy.errors import ConfigError, RuleErrors
from tmy.executors import default_registry
from tmy.executors.plugins import load_plugins
from tmy.message import Reply
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]


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


async def run_step(step: str, text: str = "go", **kw: Any) -> Reply:
    head = 'rules:\n  - id: r\n    triggers: ["go*"]\n    on_error: "E: {STEP_ERROR}"\n'
    steps = textwrap.indent(textwrap.dedent(step).strip(), " " * 6)
    async with Bot({"x.yaml": head + "    steps:\n" + steps + "\n"}, **kw) as bot:
        return await bot.ask(text)


# -- HTTP -----------------------------------------------------------------------------


async def test_http_get_decodes_json(server: str) -> None:
    reply = await run_step(f"""
      - {{plugin: HTTP, url: "{server}/echo"}}
      - {{plugin: ADJUST, input: "{{STEP_RESULT[method]}} {{STEP_RESULT[params]}}"}}
    """)
    assert reply.steps[0].result["method"] == "GET"
    assert reply.text == "GET {}"
    assert reply.steps[0].extra["status"] == 200


async def test_http_text_response(server: str) -> None:
    reply = await run_step(f'- {{plugin: HTTP, url: "{server}/text"}}')
    assert (reply.error, reply.text) == (None, "plain 文本")


async def test_http_params_and_headers_are_templated_and_encoded(server: str) -> None:
    reply = await run_step(
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
    reply = await run_step(f"""
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
    reply = await run_step(f'- {{plugin: HTTP, url: "{server}/missing"}}')
    assert reply.error is not None
    assert "404" in reply.error and "nothing here" in reply.error
    assert reply.text == f"E: {reply.error}"
    assert reply.steps[0].extra["status"] == 404


async def test_http_status_without_failing(server: str) -> None:
    reply = await run_step(f"""
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
        reply = await run_step(f'- {{plugin: HTTP, url: "{server}/slow", timeout: 0.3}}')
    assert reply.error is not None
    assert "timed out" in reply.error and "0.3" in reply.error


async def test_http_non_json_when_json_is_required(server: str) -> None:
    reply = await run_step(f'- {{plugin: HTTP, url: "{server}/text", result: json}}')
    assert reply.error is not None and "not JSON" in reply.error and "plain" in reply.error
    broken = await run_step(f'- {{plugin: HTTP, url: "{server}/bad-json"}}')
    assert broken.error is not None and "not JSON" in broken.error


async def test_http_connection_refused_is_a_clear_error() -> None:
    reply = await run_step('- {plugin: HTTP, url: "http://127.0.0.1:9/x", timeout: 5}')
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
        await run_step(step)


# -- ADJUST ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["text", 3, [1, {"a": None}], {"k": [True]}])
async def test_adjust_returns_its_input_unchanged(value: Any) -> None:
    import json

    reply = await run_step(f"- {{plugin: ADJUST, input: {json.dumps(value)}}}")
    assert reply.steps[0].input == value
    assert reply.steps[0].result == value


# -- user plugins ---------------------------------------------------------------------

GOOD_PLUGIN = """
import asyncio
from tmy.executors.registry import Option


async def shout(value, cfg, ctx):
    return value.upper() + cfg["suffix"]


async def crash(value, cfg, ctx):
    return {}["missing"]


async def slow(value, cfg, ctx):
    await asyncio.sleep(10)


def register(registry):
    registry.add("SHOUT", shout, takes=str,
                 options={"suffix": Option(str, default="", doc="appended")})
    registry.add("NEED", shout, options={"suffix": Option(str, required=True)})
    registry.add("CRASH", crash)
    registry.add("SLOW", slow)
"""


def plugin_dir(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


async def test_plugin_executor_with_options(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    reply = await run_step('- {plugin: SHOUT, suffix: "!{USER}"}', "go hey", plugins=folder)
    assert reply.text == "HEY!tester"


async def test_shipped_example_plugin_loads() -> None:
    reply = await run_step("- {plugin: UPPER}", "go shipped", plugins=REPO / "plugins")
    assert reply.text == "SHIPPED"


@pytest.mark.parametrize(
    ("step", "hint"),
    [
        ("- {plugin: SHOUT, sufix: x}", "did you mean 'suffix'"),
        ("- {plugin: SHOUT, suffix: 5}", "'suffix' must be str"),
        ("- {plugin: NEED}", "needs 'suffix:'"),
    ],
)
async def test_plugin_options_are_validated_at_load_time(
    tmp_path: Path, step: str, hint: str
) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    with pytest.raises(RuleErrors, match=rf"x\.yaml:\d+: .*{hint}"):
        await run_step(step, plugins=folder)


async def test_a_crashing_plugin_fails_the_step_not_the_bot(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    rules = "rules:\n  - {id: c, triggers: [c], steps: [{plugin: CRASH}]}\n"
    rules += "  - {id: ok, triggers: [ok], steps: [{plugin: SHOUT}]}\n"
    async with Bot({"x.yaml": rules}, plugins=folder) as bot:
        reply = await bot.ask("c")
        assert reply.error is not None and "KeyError" in reply.error
        assert await bot.say("ok") == ""


async def test_step_timeout_stops_a_slow_executor(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    async with asyncio.timeout(30):
        reply = await run_step("- {plugin: SLOW, timeout: 0.2}", plugins=folder)
    assert reply.error is not None and "timed out" in reply.error and "r/0" in reply.error


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("x = 1\ndef register(registry):\n    registry.add('X', None\n", "SyntaxError"),
        ("import no_such_module_anywhere\n", "ModuleNotFoundError"),
        ("x = 1\n", "register(registry)"),
        ("def register(registry):\n    raise RuntimeError('boom')\n", "boom"),
        ("def register(registry):\n    registry.add('ADJUST', None)\n", "registered twice"),
        ("def register(registry):\n    registry.add('bad name', None)\n", "'bad name'"),
    ],
)
def test_plugin_loading_errors_name_the_file(tmp_path: Path, source: str, hint: str) -> None:
    folder = plugin_dir(tmp_path, broken=source)
    with pytest.raises(ConfigError) as info:
        load_plugins(folder, default_registry())
    assert str(folder / "broken.py") in str(info.value)
    assert hint in str(info.value)


def test_plugin_syntax_error_gives_the_line(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, broken="a = 1\nb = (\n")
    with pytest.raises(ConfigError, match=r"broken\.py:\d+"):
        load_plugins(folder, default_registry())


def test_files_starting_with_underscore_are_skipped(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, _helper="raise RuntimeError('never imported')\n",
                        good=GOOD_PLUGIN)  # fmt: skip
    registry = default_registry()
    loaded = load_plugins(folder, registry)
    assert loaded == [str(folder / "good.py")]
    assert "SHOUT" in registry


async def test_bot_start_fails_on_a_broken_plugin(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, broken="raise ValueError('bad plugin')\n")
    with pytest.raises(ConfigError, match=r"broken\.py.*bad plugin"):
        await run_step("- {plugin: ADJUST}", plugins=folder)
