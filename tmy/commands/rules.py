"""``rules`` (one line a rule) and ``rules ID`` (one rule in detail), the same everywhere."""

from __future__ import annotations

from typing import Any

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.logs import preview

LISTED = 50  # rules shown by ``rules``


def _summary(rulebook: Any) -> Result:
    lines = [f"{len(rulebook.rules)} rules in {len(rulebook.files)} files"]
    rows = []
    for rule in rulebook.rules:
        scheduled = "schedule" in rule.extras
        rows.append({"id": rule.id, "triggers": [t.source for t in rule.triggers],
                     "scheduled": scheduled, "events": list(rule.events)})  # fmt: skip
        if len(rows) > LISTED:
            continue
        on = [t.source for t in rule.triggers] + [f"<event {e}>" for e in rule.events]
        triggers = ", ".join(on) or "(no trigger)"
        lines.append(f"{rule.id}: {preview(triggers, 80)}{' [scheduled]' if scheduled else ''}")
    if len(rulebook.rules) > LISTED:
        lines.append(f"… and {len(rulebook.rules) - LISTED} more (rules ID for one)")
    data = {"rules": len(rulebook.rules), "files": len(rulebook.files), "list": rows}
    return Result("\n".join(lines), data)


def _detail(rulebook: Any, rule_id: str) -> Result:
    rule = rulebook.by_id.get(rule_id)
    if rule is None:
        raise CommandError(f"no rule {rule_id!r}")
    f = rule.filters
    lines = [
        f"{rule.id} ({rule.file}:{rule.line}), priority {rule.priority}",
        "triggers: " + (", ".join(t.source for t in rule.triggers) or "(none)"),
        *([f"events: {', '.join(rule.events)}"] if rule.events else []),
        "steps: " + " -> ".join(f"{s.uri} [{s.plugin}]" for s in rule.steps),
    ]
    if not f.is_open:
        lines.append(
            f"filters: platforms={sorted(f.platforms) if f.platforms else 'any'} "
            f"chats={sorted(f.chats) if f.chats else 'any'} private={f.private} "
            f"admin_only={f.admin_only} mention={f.mention}"
        )
    if rule.session:
        burst = f", a burst answered after {rule.debounce:g} s of silence" if rule.debounce else ""
        lines.append(f"session: {rule.session:g} s{burst}")
    schedule = rule.extras.get("schedule")
    if schedule is not None:
        lines.append(f"schedule: {schedule.describe()}")
    data = {
        "id": rule.id,
        "file": str(rule.file),
        "line": rule.line,
        "priority": rule.priority,
        "triggers": [t.source for t in rule.triggers],
        "steps": [{"uri": s.uri, "plugin": s.plugin} for s in rule.steps],
        "session": rule.session or None,
        "debounce": rule.debounce or None,
        "events": list(rule.events),
        "schedule": schedule.describe() if schedule is not None else None,
    }
    return Result("\n".join(lines), data)


def describe_rules(rulebook: Any, rule_id: str | None) -> Result:
    """``rules`` (the first 50, one line each) or ``rules ID`` (one rule in detail)."""
    return _detail(rulebook, rule_id) if rule_id else _summary(rulebook)


async def _run(inv: Invocation) -> Result:
    return describe_rules(inv.app.engine.rulebook, inv.args["id"])


RULES = Command(
    name="rules",
    help="the loaded rules, one line each, or one rule in detail",
    run=_run,
    usage="[ID]",
    args=(Arg("id", "a rule id: that rule in detail", required=False, rest=True, metavar="ID"),),
)
