"""The web console in a real headless chromium against a real ``run.py serve`` process.

One daemon and one browser for the whole module (the tests share them and each leaves the
daemon as it found it). Debian's chromium (``/usr/bin/chromium``) is driven by Playwright;
without it these skip with a loud reason, or fail when ``CI`` is set (.ci/run installs it).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support import browser as harness
from tests.support.browser import (
    PASSWORD,
    REPO,
    VIEWER_PASSWORD,
    ServedConsole,
    chromium,
    launch,
    log_in,
    serve_console,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console-browser")]

RULES = """
variables:
  greeting: {scope: global, default: "hello"}
  limit: {scope: global, default: 3}
rules:
  - id: greet
    triggers: [greet]
    steps:
      - {plugin: ADJUST, input: "{greeting}, {USER_NAME}"}
  - id: secret
    triggers: [secret]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "the secret"}
  - id: limit
    triggers: [limit]
    steps:
      - {plugin: ADJUST, input: "limit {limit}"}
"""

BROKEN = "rules:\n  - id: bad\n    triggers: [bad]\n    steps:\n      - {plugin: NOPE}\n"
XSS = "<script>alert(1)</script>"
XSS_USER = "<img src=x onerror=alert(2)>"
PAGES = ("", "rules", "playground", "live", "variables", "schedules", "memory", "chats")
SUBMIT = "button[type=submit], input[type=submit], button:not([type])"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedConsole]:
    with serve_console(tmp_path_factory.mktemp("console"), {"r.yaml": RULES}) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium()  # skips (or fails in CI) before Playwright is touched
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium_browser = launch(playwright, path)
        yield chromium_browser
        chromium_browser.close()


@pytest.fixture(scope="module")
def dialogs() -> list[str]:
    """Every alert/confirm/prompt a console tab opened (a script that ran)."""
    return []


@pytest.fixture(scope="module")
def page(browser: Any, served: ServedConsole, dialogs: list[str]) -> Iterator[Any]:
    """A logged-in admin's tab, shared by the module's tests."""
    context = browser.new_context()
    context.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    log_in(tab, served)
    yield tab
    context.close()


def submit(page: Any, form: str) -> Any:
    """Click the submit button of the form matching ``form``; the response it navigated to."""
    with page.expect_navigation() as navigation:
        page.locator(form).locator(SUBMIT).first.click()
    return navigation.value


def ask(served: ServedConsole, text: str = "greet", user: str = "ann", name: str = "Ann") -> str:
    """The answer over ``/v1/messages``, as a user of the HTTP adapter gets it."""
    return served.message(text, user=user, user_name=name)["answer"]


# -- logging in and the pages


def test_log_in_refuses_a_wrong_password_then_admits_the_right_one(browser, served) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(served.url("rules"))
        assert tab.url.startswith(served.url("login")), "not logged in: sent to the login page"
        tab.fill("input[name=password]", "not-the-password")
        wrong = submit(tab, "form:has(input[name=password])")
        assert wrong.status == 401
        assert tab.locator("input[name=password]").count() == 1, "the form again"
        assert tab.locator(".error, [role=alert]").count() >= 1, "with an error"
        assert context.cookies() == [], "no session for a wrong password"
        log_in(tab, served)
        (cookie,) = context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["path"] == served.path and not cookie["secure"], "plain HTTP here"
        assert PASSWORD not in cookie["value"]
    finally:
        context.close()


@pytest.mark.parametrize("wrong_first", [False, True], ids=["at once", "after a wrong password"])
def test_logging_in_returns_to_the_page_asked_for(browser, served, wrong_first: bool) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(served.url("rules"))
        if wrong_first:
            tab.fill("input[name=password]", "not-the-password")
            submit(tab, "form:has(input[name=password])")
        tab.fill("input[name=password]", PASSWORD)
        submit(tab, "form:has(input[name=password])")
        assert tab.url == served.url("rules"), "back on the page asked for"
        tab.goto(served.url("login") + "?next=//evil.example/x")  # logged in: sent on
        assert tab.url.rstrip("/") == served.url("").rstrip("/"), "never off the console"
    finally:
        context.close()


def test_logging_out_ends_the_session(browser, served) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        log_in(tab, served)
        kept = context.cookies()
        submit(tab, "form[action$='/logout']")
        assert tab.url.startswith(served.url("login"))
        tab.goto(served.url("variables"))
        assert tab.url.startswith(served.url("login")), "logged out"
        context.add_cookies(kept)  # the old cookie, replayed, is worth nothing
        tab.goto(served.url("variables"))
        assert tab.url.startswith(served.url("login")), "the session ended on the server"
    finally:
        context.close()


def test_the_overview_loads(page, served: ServedConsole) -> None:
    assert ask(served) == "hello, Ann"
    response = page.goto(served.url(""))
    assert response.status == 200
    body = page.inner_text("main") if page.locator("main").count() else page.inner_text("body")
    assert "Health: ok" in body
    assert "adapter http" in body and "connected" in body, "the adapters and their state"
    assert "store" in body, "the store's state"
    assert page.locator("table:has-text('Busiest rules'), section:has-text('Busiest rules')")
    busiest = page.locator("tr", has_text="greet").first
    assert busiest.is_visible(), "greet among the busiest rules"
    data = page.request.get(served.url("") + "?format=json").json()
    assert data["status"] == "ok" and data["last_hour"]["runs"] >= 1
    for sub in PAGES[1:]:
        assert page.locator(f"nav a[href$='/{sub}']").count() == 1, f"no nav link to {sub}"


def test_every_page_renders_and_answers_json(page, served: ServedConsole) -> None:
    for sub in PAGES:
        response = page.goto(served.url(sub))
        assert response.status == 200, f"{sub or 'overview'}: {response.status}"
        assert page.locator("meta[name=viewport]").count() == 1, "readable on a phone"
        assert page.locator("meta[name=csrf-token]").get_attribute("content")
        data = page.request.get(served.url(sub) + "?format=json")
        assert data.ok, f"{sub}?format=json: {data.status}"
        assert data.headers["content-type"].startswith("application/json")
        assert isinstance(data.json(), dict)


def test_every_page_fits_a_phone_screen(browser, served: ServedConsole) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        tab = context.new_page()
        log_in(tab, served)
        for sub in PAGES:
            tab.goto(served.url(sub))
            wide = tab.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, f"{sub or 'overview'} is {wide}px wide on a 390px phone"
    finally:
        context.close()


# -- the playground


def test_the_playground_explains_a_matching_message(page, served: ServedConsole) -> None:
    page.goto(served.url("playground"))
    page.fill("[name=text]", "greet")
    page.fill("[name=user]", "pat")
    page.fill("[name=user_name]", "Pat")
    submit(page, "form:has([name=text])")
    body = page.inner_text("body")
    assert "hello, Pat" in body, "the reply"
    assert "greet" in body and "r.yaml:" in body, "the winning rule and where it is"
    assert "ADJUST" in body and "greet/0" in body, "each step"
    assert page.input_value("[name=user]") == "pat", "the form keeps the sender"


def test_the_playground_explains_a_filtered_message(page, served: ServedConsole) -> None:
    page.goto(served.url("playground") + "?text=secret&user=pat")
    assert page.input_value("[name=text]") == "secret", "prefilled from the query"
    submit(page, "form:has([name=text])")
    body = page.inner_text("body")
    assert "admin_only" in body and "secret" in body, "which rule matched and why it did not run"
    assert "the secret" not in body, "no reply for someone who is not an admin"
    page.check("[name=admin]")
    submit(page, "form:has([name=text])")
    assert "the secret" in page.inner_text("body"), "the same message from an admin"


def test_the_playground_works_with_javascript_off(browser, served: ServedConsole) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        log_in(tab, served)
        tab.goto(served.url("playground") + "?text=greet&user=nojs&user_name=NoJS")
        submit(tab, "form:has([name=text])")
        assert "hello, NoJS" in tab.inner_text("body")
    finally:
        context.close()


# -- variables and rules


def test_a_variable_edited_in_the_page_changes_the_next_answer(page, served) -> None:
    assert ask(served) == "hello, Ann"
    page.goto(served.url("variables"))
    with page.expect_navigation():
        page.get_by_role("link", name="greeting").first.click()
    page.fill("form[action$='variables/set'] [name=value]", '"howdy"')
    submit(page, "form[action$='variables/set']")
    assert ask(served) == "howdy, Ann"
    changes = served.wait_log("console.change")
    assert any(
        c.get("what") == "variables.set" and c.get("role") == "admin" and c.get("client")
        for c in changes
    ), changes
    page.goto(served.url("variables/view") + "?scope=global&name=greeting")
    submit(page, "form[action$='variables/del']")
    assert ask(served) == "hello, Ann", "deleted: back to the default"


def test_a_variable_of_the_wrong_type_is_refused_in_the_page(page, served) -> None:
    page.goto(served.url("variables/view") + "?scope=global&name=limit")
    page.fill("form[action$='variables/set'] [name=value]", "lots")
    response = submit(page, "form[action$='variables/set']")
    assert response.status == 400, response.status
    assert "int" in page.inner_text(".error, [role=alert]"), "the declared type, as vars set"
    assert served.message("limit")["answer"] == "limit 3"


def test_a_broken_rule_file_shows_its_line_while_the_old_rule_answers(page, served) -> None:
    broken = served.rules / "broken.yaml"
    broken.write_text(BROKEN, encoding="utf-8")
    try:
        page.goto(served.url("rules"))
        submit(page, "form[action$='rules/reload']")
        body = page.inner_text("body")
        assert "broken.yaml:5" in body and "NOPE" in body, body
        assert ask(served) == "hello, Ann", "the old rules keep answering"
        assert served.message("bad")["rule"] is None
    finally:
        broken.unlink()
    page.goto(served.url("rules"))
    submit(page, "form[action$='rules/reload']")
    assert "broken.yaml" not in page.inner_text("body")


# -- live runs


def test_a_run_over_v1_messages_shows_in_the_live_view_within_2_s(page, served) -> None:
    page.goto(served.url("live"))
    page.get_by_text("Following new runs").wait_for()  # the stream is open
    sent = time.monotonic()
    ask(served, user="liveuser7", name="Live Seven")
    row = page.locator("#live-runs tr.fresh", has_text="liveuser7")
    row.wait_for(timeout=2_000)
    assert time.monotonic() - sent < 2.0
    assert "greet" in row.inner_text() and "hello, Live Seven" in row.inner_text()
    with page.expect_navigation():
        row.get_by_role("link", name="trace").click()
    trace = page.inner_text("body")
    assert "greet/0" in trace and "ADJUST" in trace and "liveuser7" in trace, trace
    with page.expect_navigation():
        page.get_by_role("link", name="Replay in the playground").click()
    assert page.input_value("[name=text]") == "greet"
    assert page.input_value("[name=user]") == "liveuser7"


# -- access


def _console_routes() -> list[tuple[str, str]]:
    """(method, path) of every console route: each page module's ROUTES, and logout."""
    from tmy.console import page_modules

    found = {("POST", "logout")}
    for module in page_modules():
        found.update((route.method, route.path) for route in module.ROUTES)
    return sorted(found)


def test_every_console_url_refuses_a_visitor_who_is_not_logged_in(served) -> None:
    routes = _console_routes()
    for sub in PAGES:
        assert ("GET", sub) in routes, f"the page {sub!r} is not a console route"
    refused = []
    with httpx.Client(base_url=served.base, follow_redirects=False, timeout=10) as client:
        for method, sub in routes:
            url = f"{served.path}/{sub}"
            if method == "GET":
                page = client.get(url, params={"id": "greet"}, headers={"Accept": "text/html"})
                data = client.get(url, params={"format": "json", "id": "greet"})
                to = urlsplit(page.headers.get("location", "")).path
                to_login = page.status_code == 401 or (
                    page.status_code == 303 and to == f"{served.path}/login"
                )
                if not to_login or data.status_code != 401:
                    refused.append((method, sub, page.status_code, data.status_code))
            else:
                post = client.post(url, data={"csrf": "x", "text": "greet", "name": "greeting"})
                if post.status_code != 401:
                    refused.append((method, sub, post.status_code))
                assert "hello" not in post.text
    assert refused == [], "answered without a login"
    assert ask(served) == "hello, Ann", "nothing changed"


@pytest.fixture
def pending_rule(served: ServedConsole) -> Iterator[str]:
    """A rule file written but not loaded: only a reload that goes through makes it answer."""
    path = served.rules / "pending.yaml"
    path.write_text(
        "rules:\n  - id: pending\n    triggers: [pending]\n"
        "    steps: [{plugin: ADJUST, input: reloaded}]\n",
        encoding="utf-8",
    )
    yield "pending"
    path.unlink()
    httpx.post(f"{served.base}/admin/reload", json={}, timeout=10)  # the module's rules again


def test_a_post_without_the_csrf_token_is_refused(page, served, pending_rule) -> None:
    page.goto(served.url("rules"))
    refused = page.request.post(served.url("rules/reload"), form={"x": "1"})
    assert refused.status == 403, refused.status
    forged = page.request.post(served.url("rules/reload"), form={"csrf": "forged"})
    assert forged.status == 403, forged.status
    assert served.message(pending_rule)["rule"] is None, "the rules were not reloaded"
    token = page.get_attribute("meta[name=csrf-token]", "content")
    done = page.request.post(served.url("rules/reload"), form={"csrf": token})
    assert done.ok, "with the page's token it goes through"
    assert served.message(pending_rule)["answer"] == "reloaded"


def test_a_cross_site_form_post_is_refused(page, served, pending_rule) -> None:
    """A page on another site (localhost is not 127.0.0.1) posting a form to the console
    in the logged-in browser: no session cookie goes with it (SameSite=Strict), no token."""
    attacker = page.context.new_page()
    try:
        attacker.route(
            "http://localhost:9/evil",
            lambda route: route.fulfill(
                content_type="text/html",
                body=f'<form method=post action="{served.url("rules/reload")}">'
                "<input name=x value=1></form><script>document.forms[0].submit()</script>",
            ),
        )
        with attacker.expect_response(lambda r: r.url.endswith("rules/reload")) as got:
            attacker.goto("http://localhost:9/evil")
        assert got.value.status in (401, 403), got.value.status
    finally:
        attacker.close()
    assert served.message(pending_rule)["rule"] is None, "the rules were not reloaded"


def test_a_viewer_reads_but_every_change_is_refused(browser, served, pending_rule) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        log_in(tab, served, VIEWER_PASSWORD)
        assert "viewer" in tab.inner_text("body")
        token = tab.get_attribute("meta[name=csrf-token]", "content")
        refused = tab.request.post(served.url("rules/reload"), form={"csrf": token})
        assert refused.status == 403
        assert served.message(pending_rule)["rule"] is None, "the rules were not reloaded"
        tab.goto(served.url("variables/view") + "?scope=global&name=greeting")
        assert tab.locator("form[action$='variables/set']").count() == 0, "no edit form"
        denied = tab.request.post(
            served.url("variables/set"),
            form={"csrf": token, "scope": "global", "name": "greeting", "value": "x"},
        )
        assert denied.status == 403
        assert ask(served) == "hello, Ann"
    finally:
        context.close()


# -- escaping


def test_a_script_as_user_name_renders_as_text(page, served, dialogs: list[str]) -> None:
    page.goto(served.url("live"))
    page.get_by_text("Following new runs").wait_for()
    assert ask(served, user=XSS_USER, name=XSS) == f"hello, {XSS}"
    streamed = page.locator("#live-runs tr.fresh", has_text=XSS_USER)
    streamed.wait_for(timeout=5_000)
    assert f"hello, {XSS}" in streamed.inner_text(), "the streamed row shows it as text"
    for sub in ("live", "chats", ""):
        page.goto(served.url(sub))
        if sub != "":
            assert XSS_USER in page.inner_text("body"), f"{sub}: the user id as text"
    page.goto(served.url("playground"))
    page.fill("[name=text]", "greet")
    page.fill("[name=user]", XSS_USER)
    page.fill("[name=user_name]", XSS)
    submit(page, "form:has([name=text])")
    assert f"hello, {XSS}" in page.inner_text("body"), "the reply as text"
    page.wait_for_timeout(200)
    assert page.locator("img[src=x]").count() == 0, "no element made of the user id"
    assert dialogs == [], "a script in a user name ran"


def test_the_screenshot_tool_shoots_every_page(browser, served, tmp_path: Path) -> None:
    """tools/console_screenshots.py (what made docs/console/*.png) against this daemon."""
    path = REPO / "tools" / "console_screenshots.py"
    spec = importlib.util.spec_from_file_location("console_screenshots", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    shots = tool.capture(browser, served, tmp_path)
    names = {shot.stem for shot in shots}
    assert names == {"login", "overview-phone", *(sub or "overview" for sub in PAGES)}
    for shot in shots:
        assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), shot
    committed = {png.stem for png in (REPO / "docs" / "console").glob("*.png")}
    assert committed == names, "docs/console holds one screenshot per page"


def test_the_log_holds_no_password(served: ServedConsole) -> None:
    served.wait_log("console.login")
    log = served.log_file.read_text(encoding="utf-8")
    assert PASSWORD not in log and VIEWER_PASSWORD not in log


def test_without_chromium_they_skip_loudly_or_fail_in_ci(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(harness, "CHROMIUM", str(tmp_path / "chromium"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"!!! CONSOLE BROWSER TESTS SKIPPED !!!"):
        chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the console's browser tests"):
        chromium()
