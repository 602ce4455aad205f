"""What ``run.py cron`` and ``.tmy cron`` show: each scheduled rule, its next and last runs."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

from tmy.cron.occurrence import fire_time_text, history_key, target_key
from tmy.cron.outbox import outbox_entries
from tmy.cron.schedule import Schedule, Timing
from tmy.cron.service import scheduled_rules
from tmy.store.base import Store


async def jobs_report(
    rulebook: Any, store: Store, default_zone: tzinfo | None, *, upcoming: int = 3
) -> list[dict[str, Any]]:
    """Every scheduled rule with its next fire times and last runs (``run.py cron``);
    ``default_zone`` is the config's (``settings.tz``; None: the machine's)."""
    out = []
    pending: dict[str, list[dict[str, Any]]] = {}
    for _, item in await outbox_entries(store):
        pending.setdefault(str(item.get("rule")), []).append(_outbox_view(item))
    for rule in scheduled_rules(rulebook):
        schedule: Schedule = rule.extras["schedule"]
        timing = Timing(schedule, default_zone)
        history = await store.get(history_key(rule.id))
        out.append(
            {
                "rule": rule.id,
                "file": f"{rule.file}:{rule.line}",
                "schedule": schedule.describe(),
                "timezone": str(timing.tz),
                "send_to": [target_key(t) for t in schedule.send_to],
                "misfire_grace": schedule.misfire_grace,
                "send_retry": schedule.retry_window,
                "next": [fire_time_text(f) for f in timing.upcoming(upcoming)],
                "last_runs": history if isinstance(history, list) else [],
                "outbox": pending.pop(rule.id, []),
            }
        )
    return out


def _outbox_view(item: dict[str, Any]) -> dict[str, Any]:
    """An outbox entry as ``run.py cron`` shows it (times as ISO text, no lease token)."""

    def when(ts: Any) -> str | None:
        if not isinstance(ts, (int, float)):
            return None
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")

    return {
        "fire_time": item.get("fire_time"),
        "target": f"{item.get('platform')}:{item.get('chat')}:{item.get('user')}",
        "state": item.get("state"),
        "attempts": item.get("attempts"),
        "last_error": item.get("error"),
        "next_attempt": when(item.get("next_at")),
        "gives_up_at": when(item.get("deadline")),
        "trace_id": item.get("trace_id"),
    }


def format_report(jobs: list[dict[str, Any]]) -> str:
    """``jobs_report`` as text for people (CLI and the admin command)."""
    if not jobs:
        return "no scheduled rules"
    lines = []
    for job in jobs:
        targets = ", ".join(job["send_to"]) or "(log only)"
        lines.append(f"{job['rule']}  {job['schedule']} ({job['timezone']}) -> {targets}")
        lines.append(f"  next: {', '.join(job['next'])}")
        for run in job["last_runs"][-5:]:
            verb = f"retry {run['attempt']} of" if "attempt" in run else "ran"
            manual = f" (fired now by {run.get('by') or '?'})" if run.get("manual") else ""
            lines.append(
                f"  {verb} {run['fire_time']}{manual} on {run['daemon']} [{run['target']}]: "
                f"{run['outcome']}, sent {run['sent']} (trace {run['trace_id']})"
            )
        if not job["last_runs"]:
            lines.append("  no runs yet")
        for item in job.get("outbox", []):
            lines.append(
                f"  pending send {item['fire_time']} [{item['target']}]: {item['state']}, "
                f"{item['attempts']} attempt(s), last error {item['last_error']}, "
                f"next {item['next_attempt'] or '-'}, gives up {item['gives_up_at']}"
            )
    return "\n".join(lines)
