"""A served daemon with the web console on, and HTTP clients logged in to it.

    async with console_daemon(RULES) as daemon:
        async with logged_in(daemon) as client:          # admin; viewer=True for the viewer
            page = await client.get("rules")              # /console/rules
            await client.post("rules/reload", data={})    # the CSRF token is added

The clients are real httpx clients on the listener's loopback port; nothing is mocked.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tmy.testing import Daemon, serving

ADMIN_PASSWORD = "admin-pw-for-tests"
VIEWER_PASSWORD = "viewer-pw-for-tests"
CONSOLE = {"enabled": True, "password": ADMIN_PASSWORD, "viewer_password": VIEWER_PASSWORD}


@asynccontextmanager
async def console_daemon(rules: Any, **fields: Any) -> AsyncIterator[Daemon]:
    """``tmy.testing.serving`` with the console enabled (both passwords above)."""
    fields.setdefault("web_console", CONSOLE)
    async with serving(rules, **fields) as daemon:
        yield daemon


class ConsoleClient:
    """An httpx client at the console's path, with its session's CSRF token."""

    def __init__(self, client: httpx.AsyncClient, path: str, csrf: str, role: str) -> None:
        self.http = client
        self.path = path
        self.csrf = csrf
        self.role = role

    def url(self, sub: str) -> str:
        return f"{self.path}/{sub}"

    async def get(self, sub: str, **kwargs: Any) -> httpx.Response:
        return await self.http.get(self.url(sub), **kwargs)

    async def json(self, sub: str, **params: Any) -> Any:
        """The page's ``?format=json`` data (asserts a 200)."""
        response = await self.http.get(self.url(sub), params={**params, "format": "json"})
        assert response.status_code == 200, response.text
        return response.json()

    async def post(self, sub: str, data: dict[str, Any] | None = None, **kw: Any) -> httpx.Response:
        """A form POST carrying the CSRF token (``csrf=None`` in ``data`` leaves it out)."""
        form = {"csrf": self.csrf, **(data or {})}
        form = {k: v for k, v in form.items() if v is not None}
        return await self.http.post(self.url(sub), data=form, **kw)


@asynccontextmanager
async def logged_in(daemon: Daemon, *, viewer: bool = False) -> AsyncIterator[ConsoleClient]:
    """A client logged in to ``daemon``'s console as admin (or viewer)."""
    path = daemon.settings.web_console.path
    password = VIEWER_PASSWORD if viewer else ADMIN_PASSWORD
    async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
        response = await client.post(
            f"{path}/login", params={"format": "json"}, data={"password": password}
        )
        assert response.status_code == 200, response.text
        session = response.json()
        yield ConsoleClient(client, path, session["csrf"], session["role"])


def csrf_of(html: str) -> str:
    """The CSRF token a console page carries (its ``<meta name="csrf-token">``)."""
    found = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert found, "the layout carries the CSRF token"
    return found.group(1)
