"""The console's Schedules page: every scheduled rule, its next fire times, its last runs
with outcome and send result, and "fire now" for one target.

A view over the ``cron`` command (:mod:`tmy.commands.cron`): the report is its data,
"fire now" is ``cron fire RULE [--target PLATFORM:CHAT]`` (a change: admin, CSRF token,
logged), and "try" is ``cron fire … --dry-run``, which sends and stores nothing, so a
viewer may run it too. The fire's outcome is shown on the page it answers with (the
runs, each send result and trace), not behind a redirect that would lose it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tmy.console.web import ConsoleRequest, Refused, Route, changed, page, run_command

LAST_RUNS = 10  # the newest runs shown per rule (the store keeps more: cron/hist/<rule>)


def target_choice(key: str) -> str:
    """A ``send_to`` target as the report names it (``platform:chat:user``) in the
    ``PLATFORM:CHAT`` form ``cron fire --target`` takes."""
    platform, _, rest = key.partition(":")
    chat = rest.rpartition(":")[0] if rest.count(":") else rest
    return f"{platform}:{chat}" if chat else platform


def _run_view(run: dict[str, Any]) -> dict[str, Any]:
    """One history entry as the page shows it: when, where, how it went, what was sent."""
    if "attempt" in run:
        kind = f"retry {run['attempt']}"
    elif run.get("manual"):
        kind = f"fired now by {run.get('by') or '?'}"
    else:
        kind = "scheduled"
    return {
        "fire_time": run.get("fire_time"),
        "kind": kind,
        "target": run.get("target"),
        "daemon": run.get("daemon"),
        "outcome": run.get("outcome"),
        "error": run.get("error"),
        "sent": run.get("sent"),
        "trace_id": run.get("trace_id"),
        "failed": run.get("outcome") not in ("ok", "skipped: chat off")
        or "gave up" in str(run.get("sent", "")),
    }


def jobs_view(jobs: list[dict[str, Any]], last: int = LAST_RUNS) -> list[dict[str, Any]]:
    """The ``cron`` report's jobs for the page: the newest ``last`` runs first, and the
    targets "fire now" offers."""
    out = []
    for job in jobs:
        runs = job.get("last_runs") or []
        out.append(
            {
                **job,
                "last_runs": [_run_view(r) for r in reversed(runs[-last:])],
                "runs_total": len(runs),
                "targets": [target_choice(t) for t in job.get("send_to", [])],
            }
        )
    return out


async def schedules_data(req: ConsoleRequest) -> dict[str, Any]:
    """The page's data: every scheduled rule from the ``cron`` command's report."""
    result = await run_command(
        req, "cron", {"action": None, "rule": None, "target": None, "dry_run": False}
    )
    jobs = result.data if result.ok and isinstance(result.data, list) else []
    return {"jobs": jobs_view(jobs), "error": "" if result.ok else result.text, "fired": None}


async def _list(req: ConsoleRequest) -> web.StreamResponse:
    return await page(req, "schedules.html", await schedules_data(req), title="Schedules")


async def _fire(req: ConsoleRequest, dry_run: bool) -> web.StreamResponse:
    form = await req.form()
    rule = form.get("rule", "").strip()
    # a chat typed in ("other") wins over the rule's send_to target picked from the list
    target = form.get("other", "").strip() or form.get("target", "").strip() or None
    if not rule:
        raise Refused(400, "which rule? (rule=…)")
    args = {"action": "fire", "rule": rule, "target": target, "dry_run": dry_run}
    result = await run_command(req, "cron", args)
    refused = not result.ok and result.data is None  # an unknown rule, a bad target: no run
    if not dry_run and not refused:
        changed(req, "schedules.fire", rule=rule, target=target or "(its send_to)", ok=result.ok)
    data = await schedules_data(req)
    data["fired"] = {
        "rule": rule,
        "target": target,
        "dry_run": dry_run,
        "ok": result.ok,
        "text": result.text,
        "data": result.data,
    }
    refused = not result.ok and result.data is None  # an unknown rule, a bad target
    return await page(
        req, "schedules.html", data, title="Schedules", status=400 if refused else 200
    )


async def _fire_now(req: ConsoleRequest) -> web.StreamResponse:
    return await _fire(req, dry_run=False)


async def _try(req: ConsoleRequest) -> web.StreamResponse:
    return await _fire(req, dry_run=True)


ROUTES: tuple[Route, ...] = (
    Route("GET", "schedules", _list),
    Route("POST", "schedules/fire", _fire_now, change=True),
    Route("POST", "schedules/try", _try),
)
