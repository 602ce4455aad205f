"""``cron [--json]``: scheduled rules, next fire times and last runs (same text everywhere)."""

from __future__ import annotations

from tmy.command import Command, Invocation, Result
from tmy.cron import format_report, jobs_report


async def _run(inv: Invocation) -> Result:
    jobs = await jobs_report(inv.app.engine.rulebook, inv.app.store, inv.settings.tz)
    return Result(format_report(jobs), jobs)


CRON = Command(
    name="cron",
    help="scheduled rules: next fire times, last runs",
    run=_run,
    json_help="print the jobs as JSON",
)
