"""The web console in a real browser: ``run.py serve`` as a process of its own with the
console on, and Debian's chromium driven by Playwright (tests/console/test_browser.py and
tools/console_screenshots.py).

Playwright's own browser downloads are never used (no ``playwright install``): the browser
is the distribution's ``/usr/bin/chromium``. Where it is missing the browser tests skip
with a loud reason, except in CI (``CI`` set), where they fail: CI installs it (.ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support.redis_cluster import free_port

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "console-test-password"
VIEWER_PASSWORD = "console-viewer-password"
CONSOLE_PATH = "/console"


def chromium() -> str:
    """The path of Debian's chromium; without it, fail in CI and skip loudly elsewhere."""
    found = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if found:
        return found
    problem = f"no chromium at {CHROMIUM} (Debian: apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the console's browser tests: {problem}", pytrace=False)
    pytest.skip(f"!!! CONSOLE BROWSER TESTS SKIPPED !!! {problem}")
    raise AssertionError("unreachable")  # pragma: no cover - skip raises


def launch(playwright: Playwright, path: str) -> Browser:
    """Headless chromium from ``path`` (never a browser Playwright downloaded)."""
    return playwright.chromium.launch(executable_path=path, headless=True)


@dataclass
class ServedConsole:
    """``run.py serve`` with the console on: its process, addresses and files."""

    proc: subprocess.Popen[bytes]
    port: int
    root: Path
    path: str = CONSOLE_PATH

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def rules(self) -> Path:
        return self.root / "rules"

    @property
    def log_file(self) -> Path:
        return self.root / "tmy.log"

    def url(self, sub: str = "") -> str:
        """The console page ``sub`` (``""`` is the overview), as the browser asks for it."""
        return f"{self.base}{self.path}/{sub}"

    def message(self, text: str, **fields: Any) -> dict[str, Any]:
        """POST ``/v1/messages`` as a user would over the HTTP adapter; the JSON answer."""
        r = httpx.post(f"{self.base}/v1/messages", json={"text": text, **fields}, timeout=20)
        assert r.status_code == 200, r.text
        return r.json()

    def log_events(self, event: str) -> list[dict[str, Any]]:
        """The daemon's JSON log lines whose ``event`` is ``event``."""
        found = []
        if self.log_file.exists():
            for line in self.log_file.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") == event:
                    found.append(entry)
        return found

    def wait_log(self, event: str, timeout: float = 5) -> list[dict[str, Any]]:
        """The ``event`` log lines, once there is at least one (the log is written after the
        answer is sent); fails after ``timeout`` seconds without one."""
        deadline = time.monotonic() + timeout
        while not (found := self.log_events(event)):
            assert time.monotonic() < deadline, f"no {event} in the daemon's log"
            time.sleep(0.05)
        return found

    def output(self) -> str:
        """What the daemon printed (its standard output and error), for failure messages."""
        out = self.root / "serve.out"
        return out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""


def write_config(root: Path, rules: dict[str, str], console: dict[str, Any]) -> Path:
    """The rules files and a config for a console daemon under ``root``; the config's path."""
    (root / "rules").mkdir(parents=True, exist_ok=True)
    for name, text in rules.items():
        (root / "rules" / name).write_text(text, encoding="utf-8")
    config = {
        "rules": "rules",
        "plugins": "plugins",
        "store": "sqlite:///tmy.db",
        "watch": False,  # the Rules page's Reload button reloads, not a file watcher
        "log": {"level": "info", "file": "tmy.log", "format": "json"},
        "adapters": {"console": {"enabled": False}},
        "console": {"enabled": True, "path": CONSOLE_PATH, **console},
    }
    path = root / "tmy.yaml"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")  # JSON is YAML
    return path


def wait_healthy(served: ServedConsole, timeout: float = 30) -> None:
    """Until ``/healthz`` answers; fails with the daemon's output when it exits or hangs."""
    deadline = time.monotonic() + timeout
    while True:
        if served.proc.poll() is not None:
            raise AssertionError(f"serve exited ({served.proc.returncode}):\n{served.output()}")
        try:
            httpx.get(f"{served.base}/healthz", timeout=1)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise AssertionError(f"serve did not come up:\n{served.output()}") from None
            time.sleep(0.1)


@contextmanager
def serve_console(
    root: Path, rules: dict[str, str], *, console: dict[str, Any] | None = None
) -> Iterator[ServedConsole]:
    """``run.py serve`` on a free port with the console on (admin ``PASSWORD``, viewer
    ``VIEWER_PASSWORD`` unless ``console`` says otherwise), a SQLite store, JSON log
    and the rules under ``root``; stopped (SIGTERM, then killed) on leaving."""
    settings = {"password": PASSWORD, "viewer_password": VIEWER_PASSWORD, **(console or {})}
    config = write_config(root, rules, settings)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    cmd = [sys.executable, str(REPO / "run.py"), "--config", str(config), "serve",
           "--no-console", "--http", f"127.0.0.1:{port}"]  # fmt: skip
    with open(root / "serve.out", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    served = ServedConsole(proc, port, root)
    try:
        wait_healthy(served)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def log_in(page: Page, served: ServedConsole, password: str = PASSWORD) -> None:
    """Log in through the login form, as a person would; ends on the overview."""
    page.goto(served.url("login"))
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.locator("form:has(input[name=password])").locator(
            "button[type=submit], input[type=submit], button:not([type])"
        ).first.click()
    assert page.url.rstrip("/") == served.url("").rstrip("/"), page.url
