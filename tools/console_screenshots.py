"""Screenshots of every web console page, for the README: docs/console/<page>.png.

    python3 tools/console_screenshots.py              # writes docs/console/*.png
    python3 tools/console_screenshots.py --out /tmp/shots --width 390   # a phone's width

Starts ``run.py serve`` with the console on (a temporary config, rules and SQLite store,
as tests/console/test_browser.py does), sends some sample traffic over ``/v1/messages``,
logs in with Debian's chromium under Playwright (``/usr/bin/chromium``; nothing is
downloaded) and saves one full-page PNG per page: login, overview, rules, playground
(with a message explained), live (runs streaming in), variables, schedules, memory, chats,
and the overview at a phone's width (overview-phone.png).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.browser import (  # noqa: E402  (the checkout's tests/ on the path first)
    CHROMIUM,
    ServedConsole,
    launch,
    log_in,
    serve_console,
)

SAMPLE_RULES = """
variables:
  greeting: {scope: global, default: "Hello"}
  visits: {scope: user, default: 0}
  jokes:
    scope: global
    default:
      - "Why do programmers prefer dark mode? Because light attracts bugs."
      - "A SQL query walks into a bar, goes to two tables and asks: may I join you?"
rules:
  - id: greet
    description: greets the sender and counts their visits
    triggers: ["hello", "hi", "greet"]
    steps:
      - {plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {plugin: ADJUST, input: "{greeting} {USER_NAME}, visit number {visits}."}
  - id: joke
    description: the next joke of a rotating list
    triggers: ["joke", "tell me a joke"]
    steps:
      - {plugin: ADJUST, input: LOOPBACK, INPUT: jokes}
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "?= int(QUESTION) * 2"}
    on_error: "'{QUESTION}' is not a whole number."
  - id: announce
    description: admins only, in groups
    triggers: ["announce *"]
    admin_only: true
    private: false
    steps:
      - {plugin: ADJUST, input: "📣 {QUESTION}"}
  - id: remember
    triggers: ["remember *"]
    steps:
      - {plugin: REMEMBER}
  - id: digest
    description: a morning digest
    schedule: {cron: "0 9 * * 1-5", input: "daily digest"}
    steps:
      - {plugin: ADJUST, input: "Good morning! {QUESTION} for {FIRE_TIME}"}
"""

TRAFFIC = [
    ("hello", "ann", "Ann", "group:dev"),
    ("joke", "bob", "Bob", "group:dev"),
    ("hi", "ann", "Ann", ""),
    ("echo 21", "cat", "Cat", "group:ops"),
    ("echo twelve", "cat", "Cat", "group:ops"),
    ("tell me a joke", "dan", "Dan", "group:ops"),
    ("announce release at 5", "bob", "Bob", "group:dev"),
    ("what's up", "eve", "Eve", ""),
]
MEMORIES = [
    ("remember my cat is called Mimi", "ann", "Ann", ""),
    ("remember I prefer green tea to coffee", "ann", "Ann", ""),
    ("remember the deploy window is Friday 16:00", "bob", "Bob", "group:dev"),
]


def send_traffic(
    served: ServedConsole, rounds: int = 1, pause: float = 0.0, sample: list = TRAFFIC
) -> None:
    """The sample messages, ``rounds`` times over, as users of the HTTP adapter."""
    for _ in range(rounds):
        for text, user, name, chat in sample:
            fields = {"user": user, "user_name": name, **({"chat": chat} if chat else {})}
            served.message(text, **fields)
            time.sleep(pause)


def capture(browser: Any, served: ServedConsole, out: Path, width: int = 1280) -> list[Path]:
    """Log in with ``browser`` (Playwright's, on chromium) and save every page's screenshot
    under ``out``; the files written."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    shots = []

    def shoot(name: str, *, full: bool = True) -> None:
        page.wait_for_load_state()
        page.wait_for_timeout(200)  # fonts and the chart settle
        path = out / f"{name}.png"
        page.screenshot(path=str(path), full_page=full)
        shots.append(path)
        print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")

    page.goto(served.url("login"))
    shoot("login")
    log_in(page, served)
    page.goto(served.url("schedules"))
    fire = page.get_by_role("button", name="Fire now")
    if fire.count():
        with page.expect_navigation():  # one run in the schedule's history
            fire.first.click()
    pages = {"overview": "", "rules": "rules", "variables": "variables",
             "schedules": "schedules", "chats": "chats",
             "memory": "memory?query=what+is+my+cat+called&platform=http&user=ann"}  # fmt: skip
    for name, sub in pages.items():
        page.goto(served.url(sub))
        shoot(name)
    page.goto(served.url("playground") + "?text=echo+twelve&user=cat&user_name=Cat"
              "&chat=group%3Aops")  # fmt: skip
    with page.expect_navigation():
        page.locator("form:has([name=text]) [type=submit]").first.click()
    shoot("playground")
    page.goto(served.url("live"))
    page.get_by_text("Following new runs").wait_for()  # the stream is open
    send_traffic(served, pause=0.1)
    page.wait_for_timeout(800)
    shoot("live", full=False)  # the newest runs, as a screen shows them
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.goto(served.url(""))
    shoot("overview-phone", full=False)
    context.close()
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "console")
    parser.add_argument("--width", type=int, default=1280, help="viewport width (CSS px)")
    args = parser.parse_args(argv)
    if not os.access(CHROMIUM, os.X_OK):
        print(f"no chromium at {CHROMIUM}: apt-get install -y chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="tmy-shots-") as tmp,
        serve_console(Path(tmp), {"sample.yaml": SAMPLE_RULES}) as served,
    ):
        send_traffic(served, sample=MEMORIES)
        send_traffic(served, rounds=2)
        with sync_playwright() as playwright:
            browser = launch(playwright, CHROMIUM)
            capture(browser, served, args.out.resolve(), args.width)
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
