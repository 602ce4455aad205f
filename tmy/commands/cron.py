"""``cron [--json]``: scheduled rules, next fire times and last runs (same text everywhere);
``cron fire RULE [--target PLATFORM:CHAT] [--dry-run]``: one occurrence now
(:mod:`tmy.commands.cron_fire`).

In chat the flags stand anywhere after ``fire`` (``.tmy cron fire digest --dry-run``,
read by :func:`tmy.command.parse_words` as every chat flag is); on the CLI a real
``fire`` is run by the running daemon when one answers (its adapters are connected),
else here (:mod:`tmy.cli.commands`).
"""

from __future__ import annotations

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.commands.cron_fire import FIRE_USAGE, run_fire
from tmy.cron import format_report, jobs_report

ACTIONS = ("fire",)


async def _run(inv: Invocation) -> Result:
    action = inv.args.get("action")
    if action == "fire":
        return await run_fire(inv, inv.args.get("rule"))
    if action:
        raise CommandError(f"cron takes no argument (the report) or {FIRE_USAGE[7:]}")
    if inv.args.get("target") or inv.args.get("dry_run"):
        raise CommandError(f"--target and --dry-run go with {FIRE_USAGE[7:]}")
    jobs = await jobs_report(inv.app.engine.rulebook, inv.app.store, inv.settings.tz)
    return Result(format_report(jobs), jobs)


CRON = Command(
    name="cron",
    help="scheduled rules: next fire times, last runs; 'cron fire RULE' runs one now",
    run=_run,
    usage="[fire RULE [--target PLATFORM:CHAT] [--dry-run]]",
    description="without arguments: every scheduled rule, its next fire times and last runs. "
    "'cron fire RULE': run one occurrence of RULE now through the scheduler's claim, store "
    "and send path (recorded in its history as manual; the next scheduled fire is unchanged); "
    "on the command line it asks the running daemon to post it, else runs here",
    json_help="print the jobs (or the fired runs) as JSON",
    args=(
        Arg("action", "fire: run one occurrence now", required=False, choices=ACTIONS),
        Arg("rule", "the scheduled rule's id", required=False, rest=True, metavar="RULE"),
        Arg(
            "target",
            "post there instead of the rule's send_to (e.g. onebot:group:5)",
            flag=True,
            required=False,
            metavar="PLATFORM:CHAT",
        ),
        Arg(
            "dry_run",
            "run without posting or storing anything; show what would be sent",
            flag=True,
            takes_value=False,
            required=False,
        ),
    ),
)
