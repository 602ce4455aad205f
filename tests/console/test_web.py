"""The page framework (tmy.console.web) on a real listener: pages as HTML or the same data
as JSON, every value escaped, forms in every encoding, commands on the console front,
changes logged, refusals and failures as pages; the console's mounting; the daemon's
refusal to start a console without a password."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jinja2
import pytest
from aiohttp import web

from tests.support.console import ADMIN_PASSWORD, console_daemon
from tests.support.log_helpers import read_log
from tmy import cli
from tmy.adapters.http import HttpAdapter
from tmy.command import ALL_FRONTS, Arg, Command, Result, args_by_name, offered
from tmy.config import load_settings
from tmy.console import page_modules
from tmy.console.feed import feed_of
from tmy.console.guard import COOKIE, mount
from tmy.console.web import (
    STATIC,
    TEMPLATES,
    ConsoleRequest,
    Refused,
    Route,
    Site,
    changed,
    page,
    redirect,
    run_command,
)
from tmy.errors import ConfigError
from tmy.testing import Daemon, serving

RULES = {
    "r.yaml": """
variables:
  greeting: {scope: global, default: hello}
rules:
  - id: hi
    triggers: [hi]
    steps: [{plugin: ADJUST, input: "{greeting}"}]
"""
}
TEST_PAGE = '{% extends "base.html" %}{% block content %}<p id="n">{{ name }}</p>{% endblock %}'
XSS = "<script>alert(1)</script>"


async def show(req: ConsoleRequest) -> web.StreamResponse:
    return await page(req, "t.html", {"name": req.query("name"), "n": 2}, title="T " + XSS)


async def echo_form(req: ConsoleRequest) -> web.StreamResponse:
    return web.json_response(await req.form())


async def change_logged(req: ConsoleRequest) -> web.StreamResponse:
    changed(req, "thing", key=(await req.form()).get("key"))
    return redirect(req, "t/page", name="done")


async def change_quiet(req: ConsoleRequest) -> web.StreamResponse:
    return redirect(req, "t/page")


async def refuse(req: ConsoleRequest) -> web.StreamResponse:
    raise Refused(404, f"no such thing: {req.query('id')}")


async def boom(req: ConsoleRequest) -> web.StreamResponse:
    raise RuntimeError("secret detail")


async def command(req: ConsoleRequest) -> web.StreamResponse:
    args = json.loads(req.query("args", "{}"))
    result = await run_command(req, req.query("name"), args)
    return web.json_response(result.as_json())


ROUTES = (
    Route("GET", "t/page", show),
    Route("POST", "t/form", echo_form),
    Route("POST", "t/change", change_logged, change=True),
    Route("POST", "t/quiet", change_quiet, change=True),
    Route("GET", "t/refuse", refuse),
    Route("GET", "t/boom", boom),
    Route("GET", "t/cmd", command),
)


class Served:
    def __init__(self, daemon: Daemon, site: Site, url: str, client: httpx.AsyncClient) -> None:
        self.daemon, self.site, self.url, self.http = daemon, site, url, client

    async def login(self, role: str = "admin") -> str:
        """A session for ``role``; its CSRF token."""
        session, cookie = self.site.auth.start(role)
        self.http.cookies.set(COOKIE, cookie, path="/console")
        return session.csrf


@asynccontextmanager
async def framework() -> AsyncIterator[Served]:
    """The test ROUTES mounted on a listener of their own, beside a console daemon."""
    async with console_daemon(RULES) as daemon:
        defs, site = mount(daemon.app, [("overview", ()), ("test", ROUTES)])
        site.templates.loader = jinja2.ChoiceLoader(
            [jinja2.DictLoader({"t.html": TEST_PAGE}), site.templates.loader]
        )
        listener = HttpAdapter("127.0.0.1:0")
        listener.mount(defs)
        await listener.start(daemon.engine.handle)
        try:
            url = f"http://127.0.0.1:{listener.port}"
            async with httpx.AsyncClient(base_url=url) as client:
                yield Served(daemon, site, url, client)
        finally:
            await listener.stop()


async def test_a_page_is_html_with_every_value_escaped_or_the_same_data_as_json() -> None:
    async with framework() as s:
        csrf = await s.login()
        html = await s.http.get("/console/t/page", params={"name": XSS})
        assert html.status_code == 200 and html.headers["Content-Type"].startswith("text/html")
        assert (
            XSS not in html.text
            and '<p id="n">&lt;script&gt;alert(1)&lt;/script&gt;</p>' in html.text
        )
        assert f'<meta name="csrf-token" content="{csrf}">' in html.text
        assert '<a href="/console/">Overview</a>' in html.text  # the nav: installed pages
        assert "&lt;script&gt;" in html.text.split("<title>")[1].split("</title>")[0]
        data = await s.http.get("/console/t/page", params={"name": XSS, "format": "json"})
        assert data.json() == {"name": XSS, "n": 2}


async def test_forms_arrive_in_every_encoding() -> None:
    async with framework() as s:
        csrf = await s.login()
        plain = await s.http.post("/console/t/form", data={"csrf": csrf, "a": "1", "b": "é"})
        assert plain.json() == {"csrf": csrf, "a": "1", "b": "é"}
        multi = await s.http.post(
            "/console/t/form", data={"csrf": csrf, "a": "x"}, files={"f": ("f.txt", b"bytes")}
        )
        assert multi.json() == {"csrf": csrf, "a": "x"}  # the upload is left out
        sent = {"box": True, "off": False, "none": None, "n": 3, "list": [1, "二"]}
        body = await s.http.post("/console/t/form", json=sent, headers={"X-CSRF-Token": csrf})
        assert body.json() == {"box": "on", "off": "", "none": "", "n": "3", "list": '[1, "二"]'}
        bad = await s.http.post(
            "/console/t/form",
            content=b"[1,",
            headers={"X-CSRF-Token": csrf, "Content-Type": "application/json"},
        )
        assert bad.status_code == 400 and "JSON object" in bad.json()["error"]


async def test_changes_are_logged_with_role_and_client(log_file: Path) -> None:
    async with framework() as s:
        csrf = await s.login()
        done = await s.http.post("/console/t/change", data={"csrf": csrf, "key": "k1"})
        assert done.status_code == 303 and done.headers["Location"] == "/console/t/page?name=done"
        quiet = await s.http.post("/console/t/quiet", data={"csrf": csrf})
        assert quiet.status_code == 303
        viewer = await s.login("viewer")
        refused = await s.http.post("/console/t/change", data={"csrf": viewer, "key": "k2"})
        assert refused.status_code == 403
    changes = [e for e in read_log(log_file) if e["event"] == "console.change"]
    assert [(e["what"], e.get("key")) for e in changes] == [("thing", "k1"), ("t/quiet", None)]
    assert all(e["role"] == "admin" and e["client"] == "127.0.0.1" for e in changes)
    assert changes[1]["status"] == 303


async def test_refusals_and_failures_are_pages_or_json(log_file: Path) -> None:
    async with framework() as s:
        await s.login()
        missing = await s.http.get("/console/t/refuse", params={"id": XSS})
        assert missing.status_code == 404 and XSS not in missing.text
        assert "no such thing: &lt;script&gt;" in missing.text
        as_json = await s.http.get("/console/t/refuse", params={"id": "7", "format": "json"})
        assert as_json.json() == {"error": "no such thing: 7"}
        failed = await s.http.get("/console/t/boom")
        assert failed.status_code == 500 and "secret detail" not in failed.text
        assert "log" in failed.text
    errors = [e for e in read_log(log_file) if e["event"] == "console.error"]
    assert errors and "secret detail" in errors[0]["error"]


async def test_commands_run_on_the_console_front(log_file: Path) -> None:
    async with framework() as s:
        await s.login()

        async def run(name: str, args: dict[str, Any]) -> dict[str, Any]:
            response = await s.http.get(
                "/console/t/cmd", params={"name": name, "args": json.dumps(args)}
            )
            return response.json()

        got = await run("vars", {"action": "set", "name": "greeting", "value": "salut"})
        assert got["ok"], got
        assert (await s.daemon.push("hi")).text == "salut"
        listed = await run("vars", {"action": "get", "name": "greeting"})
        assert listed["ok"] and "salut" in listed["text"]
        forced = await run(
            "vars", {"action": "set", "name": "greeting", "value": "1", "force": True}
        )
        assert forced["ok"]  # an argument the HTTP front has is the console's too
        misuse = await run("vars", {"action": "nope"})
        assert not misuse["ok"] and "action" in misuse["text"]
        unknown = await run("launch", {})
        assert unknown == {"ok": False, "text": "unknown command 'launch'", "data": None}
        explained = await run("explain", {"text": "hi"})
        assert explained["ok"] and explained["data"]["message"]["user"] == "console"
    commands = [e for e in read_log(log_file) if e["event"] == "console.command"]
    assert commands and commands[0]["role"] == "admin"


def test_the_console_front_takes_what_the_http_front_takes() -> None:
    assert "console" in ALL_FRONTS
    assert offered(frozenset({"cli", "http"}), "console")
    assert not offered(frozenset({"cli", "chat"}), "console")

    async def nothing(inv: Any) -> Result:
        return Result("")

    cmd = Command(
        "c",
        "",
        nothing,
        args=(Arg("a"), Arg("f", flag=True, takes_value=False, fronts=frozenset({"http"}))),
        fronts=frozenset({"cli", "http"}),
    )
    assert cmd.offered_on("console") and [a.name for a in cmd.args_for("console")] == ["a", "f"]
    assert args_by_name(cmd, {"a": 5}, "console") == {"a": "5", "f": False}


async def test_mounting_refuses_a_get_change_and_a_route_twice() -> None:
    async def nothing(req: ConsoleRequest) -> web.StreamResponse:
        return web.Response()

    async with console_daemon(RULES) as daemon:
        with pytest.raises(ValueError, match="a change must be a POST"):
            mount(daemon.app, [("x", (Route("GET", "x", nothing, change=True),))])
        twice = (Route("GET", "x", nothing), Route("GET", "x", nothing))
        with pytest.raises(ValueError, match="defined twice"):
            mount(daemon.app, [("x", twice)])


async def test_the_console_mounts_every_installed_page_behind_its_path() -> None:
    config = {"enabled": True, "password": "pw", "path": "/ops/tmy/"}
    async with (
        console_daemon(RULES, web_console=config) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as http,
    ):
        assert (await http.get("/console/login")).status_code == 404
        assert feed_of(daemon.app) is not None  # the engine reports runs to the console
        bare = await http.get("/ops/tmy")
        assert bare.status_code == 308 and bare.headers["Location"] == "/ops/tmy/"
        login = await http.post("/ops/tmy/login", data={"password": "pw"})
        assert (
            login.headers["Location"] == "/ops/tmy/"
            and "Path=/ops/tmy" in login.headers["set-cookie"]
        )
        css = await http.get("/ops/tmy/static/console.css")
        assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css")
        js = await http.get("/ops/tmy/static/console.js")
        assert "X-CSRF-Token" in js.text
        for bad in ("../web.py", "..%2Fweb.py", ".hidden", "nope.css"):
            assert (await http.get(f"/ops/tmy/static/{bad}")).status_code == 404
        for module in page_modules():
            for route in module.ROUTES:
                # (a live stream is followed in test_live.py: it lasts until it notices the
                # browser has gone)
                if route.method == "GET" and "{" not in route.path and "stream" not in route.path:
                    async with http.stream("GET", f"/ops/tmy/{route.path}") as response:
                        # past the guard (a page may still answer 404 for a missing id)
                        assert response.status_code not in (303, 401, 405), route.path
                        assert response.status_code < 500, route.path
                        kind = response.headers["Content-Type"]
                        if kind.startswith("text/html"):
                            body = (await response.aread()).decode()
                            assert 'name="csrf-token"' in body, route.path


async def test_the_daemon_refuses_a_console_without_a_password(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        async with serving(RULES, web_console={"enabled": True}):
            pass
    text = str(caught.value)
    assert "console.password" in text and "TMY_CONSOLE_PASSWORD" in text
    config = tmp_path / "tmy.yaml"
    (tmp_path / "rules").mkdir()
    config.write_text("rules: rules\nconsole:\n  enabled: true\n")
    settings = load_settings(config, env={}, http_listen="127.0.0.1:0", console=False, watch=False)
    with pytest.raises(
        ConfigError, match=rf"^{config}:3: console.enabled is true .*TMY_CONSOLE_PASSWORD"
    ):
        async with serving(settings=settings):
            pass
    with pytest.raises(ConfigError, match="needs the HTTP listener"):
        async with serving(
            RULES, web_console={"enabled": True, "password": "pw"}, http_enabled=False
        ):
            pass


@pytest.mark.slow
async def test_run_py_serve_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TMY_CONSOLE_PASSWORD", raising=False)
    (tmp_path / "rules").mkdir()
    config = tmp_path / "tmy.yaml"
    config.write_text(
        "rules: rules\nstore: sqlite:///t.db\nadapters:\n  console: {enabled: false}\n"
        "  http: {listen: '127.0.0.1:0'}\nconsole:\n  enabled: true\n"
    )
    code = await asyncio.to_thread(cli.main, ["serve", "--config", str(config)])
    err = capsys.readouterr().err
    assert code != 0 and "console.password" in err and "TMY_CONSOLE_PASSWORD" in err
    monkeypatch.setenv("TMY_CONSOLE_PASSWORD", ADMIN_PASSWORD)
    assert load_settings(config).web_console.admin is not None


def test_no_template_or_script_turns_escaping_off() -> None:
    """Every value shown is escaped: Jinja's autoescape stays on everywhere, and the
    scripts build elements with textContent, never from HTML text. (The pages' CSP
    would block an inline script or an on…= handler anyway.)"""
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        for bad in (r"\|\s*safe\b", r"autoescape\s+false", r"<script(?![^>]*\bsrc=)", r"\son\w+="):
            assert not re.search(bad, text), f"{template.name}: {bad}"
    for script in STATIC.glob("*.js"):
        text = script.read_text()
        for bad in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert bad not in text, f"{script.name}: {bad}"


async def test_mounting_takes_the_passwords_out_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept as hashes only: not left where plugins, steps and child processes read them."""
    monkeypatch.setenv("TMY_CONSOLE_PASSWORD", "from-env")
    monkeypatch.setenv("TMY_CONSOLE_VIEWER_PASSWORD", "viewer-env")
    async with serving(RULES, web_console={"enabled": True, "password": "pw"}):
        assert "TMY_CONSOLE_PASSWORD" not in os.environ
        assert "TMY_CONSOLE_VIEWER_PASSWORD" not in os.environ
