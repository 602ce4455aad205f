"""Access to the web console: the lock-out, sessions and CSRF tokens (tmy.console.auth), and
every access rule on a served daemon — no page without a login, no POST without its CSRF
token, no change from the viewer, the login form's answers, the cookie's flags."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from tests.support.console import (
    ADMIN_PASSWORD,
    VIEWER_PASSWORD,
    console_daemon,
    csrf_of,
    logged_in,
)
from tests.support.log_helpers import read_log
from tmy.config.console import parse_console
from tmy.console import auth, page_modules
from tmy.console.auth import FREE_FAILURES, MAX_DELAY, Auth, LockOut, csrf_ok
from tmy.console.guard import COOKIE

RULES = {
    "r.yaml": "rules:\n- id: hi\n  triggers: [hi]\n  steps: [{plugin: ADJUST, input: hello}]\n"
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the lock-out, sessions, tokens -------------------------------------------------------------


def test_the_lock_out_starts_after_a_few_failures_and_doubles() -> None:
    clock = Clock()
    lock = LockOut(clock)
    for _ in range(FREE_FAILURES - 1):
        assert lock.failed("1.2.3.4") == 0 and lock.wait("1.2.3.4") == 0
    assert lock.failed("1.2.3.4") == 2.0  # the fifth in a row
    assert lock.wait("1.2.3.4") == 2.0 and lock.wait("5.6.7.8") == 0  # per address
    clock.now += 1.5
    assert lock.wait("1.2.3.4") == pytest.approx(0.5)
    clock.now += 1
    assert lock.failed("1.2.3.4") == 4.0
    for _ in range(30):
        delay = lock.failed("1.2.3.4")
    assert delay == MAX_DELAY
    lock.succeeded("1.2.3.4")
    assert lock.wait("1.2.3.4") == 0 and lock.failed("1.2.3.4") == 0


def test_the_lock_out_remembers_a_bounded_number_of_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(auth, "MAX_TRACKED", 3)
    lock = LockOut(Clock())
    for n in range(5):
        for _ in range(FREE_FAILURES):
            lock.failed(f"10.0.0.{n}")
    assert len(lock._clients) == 3 and lock.wait("10.0.0.0") == 0 and lock.wait("10.0.0.4") > 0


CONFIG = parse_console({"enabled": True, "password": "adm", "viewer_password": "vwr"})


def test_each_password_logs_in_as_its_role() -> None:
    a = Auth(CONFIG)
    assert a.role_of("adm") == "admin" and a.role_of("vwr") == "viewer"
    assert a.role_of("") is None and a.role_of("ADM") is None and a.role_of("adm ") is None


def test_a_session_cookie_is_signed_ends_and_can_be_ended() -> None:
    clock = Clock()
    a = Auth(CONFIG, clock)
    session, cookie = a.start("admin")
    assert a.session(cookie) == session and session.role == "admin"
    sid, signature = cookie.split(".")
    assert a.session(f"{sid}.{'0' * len(signature)}") is None  # forged
    assert a.session(sid) is None and a.session("") is None and a.session(None) is None
    _, other_cookie = Auth(CONFIG, clock).start("admin")  # another start's key
    assert a.session(other_cookie) is None
    a.end(session)
    assert a.session(cookie) is None  # logged out on the server, not only in the browser
    _, late_cookie = a.start("viewer")
    clock.now += auth.SESSION_SECONDS
    assert a.session(late_cookie) is None


def test_sessions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "MAX_SESSIONS", 2)
    a = Auth(CONFIG)
    cookies = [a.start("admin")[1] for _ in range(3)]
    assert a.session(cookies[0]) is None and a.session(cookies[2]) is not None


def test_csrf_tokens_are_per_session() -> None:
    a = Auth(CONFIG)
    one, _ = a.start("admin")
    two, _ = a.start("admin")
    assert csrf_ok(one, one.csrf) and not csrf_ok(one, two.csrf)
    assert not csrf_ok(one, "") and not csrf_ok(one, None) and not csrf_ok(one, "é")


# -- on the listener ----------------------------------------------------------------------------


def console_urls() -> list[tuple[str, str, bool]]:
    """(method, sub path, change) of every console route the installed pages define."""
    out = [("POST", "logout", False)]
    for module in page_modules():
        for route in module.ROUTES:
            out.append((route.method, re.sub(r"\{[^}]*\}", "x", route.path), route.change))
    return out


async def test_every_console_url_needs_a_login() -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        urls = console_urls()
        assert len(urls) > 1
        for method, sub, _ in urls:
            url = f"/console/{sub}"
            response = await http.request(
                method, url, data={"text": "hi"} if method == "POST" else None
            )
            if method == "GET":
                assert response.status_code == 303, url
                location = response.headers["Location"]
                assert location.startswith("/console/login"), url
                data = await http.get(url, params={"format": "json"})
                assert data.status_code == 401 and "not logged in" in data.json()["error"], url
                stream = await http.get(url, headers={"Accept": "text/event-stream"})
                assert stream.status_code == 401, url
            else:
                assert response.status_code == 401, url
            assert "hello" not in response.text
        # a forged or foreign cookie is no login either
        http.cookies.set(COOKIE, "abc.def", path="/console")
        assert (await http.get("/console/rules")).status_code == 303


async def test_a_wrong_password_answers_the_form_again_and_the_right_one_the_overview(
    log_file: Path,
) -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        form = await http.get("/console/login")
        assert form.status_code == 200 and 'name="password"' in form.text
        assert 'type="password"' in form.text and 'name="viewport"' in form.text
        wrong = await http.post("/console/login", data={"password": "nope"})
        assert wrong.status_code == 401 and "Wrong password" in wrong.text
        assert 'name="password"' in wrong.text and COOKIE not in wrong.headers.get("set-cookie", "")
        right = await http.post("/console/login", data={"password": ADMIN_PASSWORD})
        assert right.status_code == 303 and right.headers["Location"] == "/console/"
        cookie = right.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie and "Path=/console" in cookie
        assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
        rules = await http.get("/console/rules")
        assert rules.status_code == 200 and 'name="csrf-token"' in rules.text
        assert ">admin<" in rules.text
    lines = read_log(log_file)
    text = log_file.read_text()
    assert ADMIN_PASSWORD not in text and "nope" not in text  # no password is ever logged
    failed = [e for e in lines if e["event"] == "console.login_failed"]
    assert failed and failed[0]["client"] == "127.0.0.1"
    assert [e["role"] for e in lines if e["event"] == "console.login"] == ["admin"]


async def test_a_script_logging_in_gets_json_for_every_answer() -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        asked = await http.get("/console/login?format=json")
        assert asked.status_code == 200 and asked.json()["path"] == "/console/login"
        wrong = await http.post("/console/login?format=json", data={"password": "nope"})
        assert (wrong.status_code, wrong.json()) == (401, {"error": "Wrong password."})
        right = await http.post("/console/login?format=json", data={"password": ADMIN_PASSWORD})
        assert right.status_code == 200 and right.json()["role"] == "admin"


async def test_the_cookie_is_secure_over_tls_and_next_stays_in_the_console() -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        tls = await http.post(
            "/console/login",
            data={"password": ADMIN_PASSWORD, "next": "rules?page=2"},
            headers={"X-Forwarded-Proto": "https"},
        )
        assert "Secure" in tls.headers["set-cookie"]
        assert tls.headers["Location"] == "/console/rules?page=2"
        for evil in ("//evil.example/", "https://evil.example", "/etc", "../admin"):
            response = await http.post(
                "/console/login", data={"password": ADMIN_PASSWORD, "next": evil}
            )
            assert response.headers["Location"] == "/console/", evil
        sent_on = await http.get("/console/variables", follow_redirects=False)
        assert sent_on.status_code == 200
        http.cookies.clear()
        bounced = await http.get("/console/rules?page=2")
        assert bounced.headers["Location"] == "/console/login?next=rules%3Fpage%3D2"
        login = await http.get(bounced.headers["Location"])
        assert 'name="next" value="rules?page=2"' in login.text


async def test_repeated_failures_lock_the_address_out_even_for_the_right_password() -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        for _ in range(FREE_FAILURES - 1):
            assert (await http.post("/console/login", data={"password": "x"})).status_code == 401
        locked = await http.post("/console/login", data={"password": "x"})
        assert locked.status_code == 429 and int(locked.headers["Retry-After"]) >= 1
        assert "try again in" in locked.text
        right = await http.post("/console/login", data={"password": ADMIN_PASSWORD})
        assert right.status_code == 429 and COOKIE not in right.headers.get("set-cookie", "")
        json_locked = await http.post(
            "/console/login", params={"format": "json"}, data={"password": ADMIN_PASSWORD}
        )
        assert json_locked.status_code == 429 and "try again" in json_locked.json()["error"]


async def test_a_burst_of_guesses_sent_at_once_gets_no_more_tries() -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        guesses = [http.post("/console/login", data={"password": f"g{n}"}) for n in range(20)]
        answers = [r.status_code for r in await asyncio.gather(*guesses)]
        assert answers.count(401) == FREE_FAILURES - 1 and answers.count(429) == 21 - FREE_FAILURES


async def test_a_post_without_the_csrf_token_is_refused() -> None:
    async with console_daemon(RULES) as daemon, logged_in(daemon) as client:
        for method, sub, _ in console_urls():
            if method != "POST":
                continue
            missing = await client.post(sub, {"csrf": None})
            assert missing.status_code == 403 and "CSRF" in missing.text, sub
            wrong = await client.post(sub, {"csrf": "not-the-token"})
            assert wrong.status_code == 403, sub
            cross = await client.post(
                sub, {"csrf": None}, headers={"Origin": "https://evil.example"}
            )
            assert cross.status_code == 403, sub
        # a cross-site page cannot post even with a token it somehow had
        cross = await client.post("logout", headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        json_post = await client.http.post(
            client.url("logout"), json={}, headers={"X-CSRF-Token": "bad"}
        )
        assert json_post.status_code == 403 and "CSRF" in json_post.json()["error"]
        ok = await client.http.post(client.url("logout"), headers={"X-CSRF-Token": client.csrf})
        assert ok.status_code == 303


async def test_the_viewer_gets_403_on_every_change(log_file: Path) -> None:
    async with console_daemon(RULES) as daemon, logged_in(daemon, viewer=True) as client:
        changes = [sub for method, sub, change in console_urls() if change]
        assert changes
        for sub in changes:
            response = await client.post(sub, {"text": "hi", "value": "1"})
            assert response.status_code == 403 and "viewer" in response.text, sub
        pages = [sub for method, sub, change in console_urls() if method == "GET"]
        assert (await client.get(pages[0])).status_code == 200  # reading is allowed
    refused = [e for e in read_log(log_file) if e["event"] == "console.refused"]
    assert len(refused) == len(changes) and all(e["role"] == "viewer" for e in refused)


async def test_logging_out_ends_the_session_on_the_server() -> None:
    async with console_daemon(RULES) as daemon, logged_in(daemon) as client:
        cookie = client.http.cookies.get(COOKIE)
        page = await client.get("variables")
        assert csrf_of(page.text) == client.csrf
        out = await client.post("logout")
        assert out.status_code == 303 and out.headers["Location"] == "/console/login"
        async with httpx.AsyncClient(base_url=daemon.url) as again:
            again.cookies.set(COOKIE, cookie or "", path="/console")
            assert (await again.get("/console/variables")).status_code == 303


async def test_the_answers_carry_the_security_headers() -> None:
    async with console_daemon(RULES) as daemon, logged_in(daemon) as client:
        for response in (await client.get("variables"), await client.http.get("/console/login")):
            csp = response.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert response.headers["X-Frame-Options"] == "DENY"
            assert response.headers["Cache-Control"] == "no-store"
            assert response.headers["X-Content-Type-Options"] == "nosniff"


async def test_the_viewer_password_logs_in_as_viewer() -> None:
    async with console_daemon(RULES) as daemon, httpx.AsyncClient(base_url=daemon.url) as http:
        response = await http.post(
            "/console/login", params={"format": "json"}, data={"password": VIEWER_PASSWORD}
        )
        assert response.json()["role"] == "viewer"
        page = await http.get("/console/variables")
        assert ">viewer<" in page.text
