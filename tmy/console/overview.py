"""The console's Overview: is the bot well, and what has it been doing.

The adapters, the store and the MCP servers as ``GET /healthz`` reports them
(:func:`tmy.daemon.health_report`, :mod:`tmy.console.mcp`), and the console's own counters
(:mod:`tmy.console.stats`, fed by the engine through :mod:`tmy.console.feed`):
messages, runs and failed runs over the last hour and day with a small chart
(an inline SVG drawn here: no script, no library), the busiest rules, the slowest
steps, LLM tokens used today. ``?format=json`` is the same data.

The counters start when the console is mounted (the daemon's start): the page
says since when.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tmy.console.feed import Feed, attach
from tmy.console.mcp import mcp_rows
from tmy.console.stats import MINUTES
from tmy.console.web import ConsoleRequest, Route, Site, page

CHART_W, CHART_H = 600, 120  # the SVG's drawing units (it scales to the page's width)


def setup(site: Site) -> None:
    """Count from the start: the engine reports to the feed from now on."""
    feed_for(site.app)


def feed_for(app: Any) -> Feed:
    """The feed ``app``'s engine reports to (made the first time)."""
    return attach(app.engine, getattr(app.settings, "tz", None))


def clock(at: float) -> str:
    """Epoch seconds as ISO-8601 UTC to the second."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def chart(points: list[dict[str, Any]], *, label: str) -> dict[str, Any]:
    """Bars for the SVG: per point the messages (grey), the runs (blue) and the failed runs
    (red) as rectangles in a CHART_W × CHART_H box, with a tooltip each; ``label`` says what
    one bar is ("2 minutes")."""
    top = max([p["messages"] for p in points] + [p["runs"] for p in points] + [1])
    width = CHART_W / max(len(points), 1)

    def rect(i: int, n: int, shrink: float) -> dict[str, float]:
        h = round(n / top * (CHART_H - 4), 2)
        pad = width * shrink
        return {"x": round(i * width + pad, 2), "y": round(CHART_H - h, 2),
                "w": round(max(width - 2 * pad, 0.5), 2), "h": h}  # fmt: skip

    bars = [
        {
            "messages": rect(i, p["messages"], 0.08),
            "runs": rect(i, p["runs"], 0.2),
            "errors": rect(i, p["errors"], 0.32),
            "title": f"{clock(p['start'])}: {p['messages']} messages, {p['runs']} runs, "
            f"{p['errors']} failed",
        }
        for i, p in enumerate(points)
    ]
    return {"bars": bars, "top": top, "width": CHART_W, "height": CHART_H, "label": label}


async def overview_data(req: ConsoleRequest) -> dict[str, Any]:
    """Everything the page shows (and ``?format=json`` returns)."""
    app = req.app
    feed = feed_for(app)
    feed.drain()
    stats, now = feed.stats, time.time()
    health = await app.health()
    hour, day = stats.series(now, 60, 2), stats.series(now, MINUTES, 60)
    return {
        "status": health.get("status"),
        "store": health.get("store", {}),
        "adapters": [{"name": name, **state} for name, state in health.get("adapters", {}).items()],
        "cron": health.get("cron"),
        "mcp_servers": mcp_rows(health),
        "rules": len(app.rulebook.rules),
        "counted_since": clock(feed.started),
        "last_hour": stats.window(now, 60),
        "last_day": stats.window(now, MINUTES),
        "tokens_today": stats.tokens_on(now),
        "per_2_minutes": hour,
        "per_hour": day,
        "busiest_rules": stats.busiest_rules(now, MINUTES),
        "busiest_rules_hour": stats.busiest_rules(now, 60),
        "slowest_steps": stats.slowest_steps(now, MINUTES),
        "live_views": len(feed.subscribers),
    }


async def _overview(req: ConsoleRequest) -> web.StreamResponse:
    data = await overview_data(req)
    if req.wants_json():
        return await page(req, "overview.html", data, title="Overview")
    charts = {
        "chart_hour": chart(data["per_2_minutes"], label="2 minutes"),
        "chart_day": chart(data["per_hour"], label="hour"),
    }
    return await page(req, "overview.html", {**data, **charts}, title="Overview")


ROUTES: tuple[Route, ...] = (Route("GET", "", _overview),)
