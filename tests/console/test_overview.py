"""The console's Overview on a served daemon: health (adapters, store), the counters the
engine feeds (messages, runs, failed runs, the chart, busiest rules, slowest steps,
tokens today), the same data as JSON, escaping, and the login it needs."""

from __future__ import annotations

import httpx

from tests.support.console import console_daemon, logged_in
from tmy.console.overview import CHART_H, chart

RULES = {
    "r.yaml": """
rules:
  - id: hi
    triggers: [hi]
    steps: [{plugin: ADJUST, input: hey}]
  - id: count
    triggers: ["count *"]
    steps: [{plugin: ADJUST, input: "?= int(QUESTION)"}]
"""
}
EVIL = "<script>alert(1)</script>"


async def test_the_overview_shows_health_and_the_counters() -> None:
    async with console_daemon(RULES) as daemon:
        for _ in range(3):
            await daemon.push("hi", user="ann", chat="g1")
        await daemon.push("count x", user=EVIL, chat="g1")  # fails: int("x")
        await daemon.push("nothing here", user="bob")
        async with logged_in(daemon, viewer=True) as viewer:
            data = await viewer.json("")
            assert data["status"] == "ok" and data["store"]["state"] == "ok"
            states = {a["name"]: a["state"] for a in data["adapters"]}
            assert states["test"] == "connected" and states["http"] == "connected"
            assert data["last_hour"] == {"messages": 5, "runs": 4, "errors": 1, "tokens": 0}
            assert data["last_day"]["runs"] == 4 and data["tokens_today"] == 0
            assert data["busiest_rules"][:2] == [{"rule": "hi", "runs": 3},
                                                 {"rule": "count", "runs": 1}]  # fmt: skip
            assert {s["step"] for s in data["slowest_steps"]} == {"hi/0", "count/0"}
            assert len(data["per_2_minutes"]) == 30 and len(data["per_hour"]) == 24
            assert sum(p["runs"] for p in data["per_hour"]) == 4
            html = (await viewer.get("")).text
            assert "<svg" in html and "<rect" in html and "busiest" in html.lower()
            assert EVIL not in html


async def test_the_overview_needs_a_login() -> None:
    async with console_daemon(RULES) as daemon:
        path = daemon.settings.web_console.path
        async with httpx.AsyncClient(base_url=daemon.url) as anon:
            page = await anon.get(f"{path}/")
            assert page.status_code == 303 and "/login" in page.headers["location"]
            data = await anon.get(f"{path}/", params={"format": "json"})
            assert data.status_code == 401


def test_the_chart_scales_to_the_busiest_point() -> None:
    points = [
        {"start": 0, "messages": 10, "runs": 5, "errors": 1},
        {"start": 60, "messages": 0, "runs": 0, "errors": 0},
    ]
    drawn = chart(points, label="minute")
    first, empty = drawn["bars"]
    assert drawn["top"] == 10 and first["messages"]["h"] == CHART_H - 4
    assert first["runs"]["h"] == (CHART_H - 4) / 2 and empty["runs"]["h"] == 0
    assert "10 messages, 5 runs, 1 failed" in first["title"]
