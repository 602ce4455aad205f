"""The console's Rules pages: every file and rule, ``check``'s warnings, one rule's source,
and a Reload button.

``rules`` lists the rules in force a page at a time (:data:`PAGE_SIZE`; a filter box
narrows them by id, trigger, event, file or description), so a rulebook of 10,000 rules
stays quick to serve and to read. ``check``'s warnings (dead triggers, collisions across
files, adapters the config leaves off, risky regexes) and the atomic spans come with
their ``file:line``; they are computed once per rulebook, off the event loop. ``rules/rule
?id=…`` shows one rule — the ``rules ID`` command's data, its filters, its warnings — and
its lines from its file (as the file reads now). ``POST rules/reload`` runs the ``reload``
command; a refused reload shows the ``file:line`` errors while the old rules keep
answering (:mod:`tmy.reload` swaps nothing then).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import weakref
from bisect import bisect_right
from pathlib import Path
from typing import Any

from aiohttp import web

from tmy.commands.lint import rule_warnings
from tmy.commands.rules import describe_rules
from tmy.console.web import ConsoleRequest, Refused, Route, changed, page, redirect, run_command
from tmy.daemon import disabled_for
from tmy.rulebook.model import Filters, Rule, Rulebook

PAGE_SIZE = 100  # rules a page shows
WARNINGS_SHOWN = 100  # warnings the list shows before "show all"
SOURCE_LINES = 2000  # lines of one rule's source shown at most
_WHERE = re.compile(r"^(.*?):(\d+): (.*)$", re.S)
LAST_RELOAD = "rules.last_reload"  # Site.state: the last console reload, for the Rules page


# -- one rule as a row ---------------------------------------------------------------------------


def filters_of(filters: Filters) -> dict[str, Any]:
    """A rule's filters as data; ``text`` is one line ("" when the rule answers anywhere)."""
    parts = []
    if filters.platforms is not None:
        parts.append("platforms " + ", ".join(sorted(filters.platforms)))
    if filters.chats is not None:
        parts.append("chats " + ", ".join(sorted(filters.chats)))
    if filters.private is not None:
        parts.append("private chats only" if filters.private else "groups only")
    if filters.admin_only:
        parts.append("admins only")
    if filters.mention:
        parts.append("mentioned in groups")
    return {
        "platforms": sorted(filters.platforms) if filters.platforms is not None else None,
        "chats": sorted(filters.chats) if filters.chats is not None else None,
        "private": filters.private,
        "admin_only": filters.admin_only,
        "mention": filters.mention,
        "text": "; ".join(parts),
    }


def schedule_of(rule: Rule) -> dict[str, Any] | None:
    """A rule's ``schedule:`` as data (None when it has none)."""
    schedule = rule.extras.get("schedule")
    if schedule is None:
        return None
    send_to = [f"{t.platform}:{t.chat or t.user}" for t in getattr(schedule, "send_to", ()) or ()]
    return {
        "text": schedule.describe(),
        "timezone": getattr(schedule, "timezone", None),
        "send_to": send_to,
    }


def rule_row(rule: Rule, warnings: int = 0) -> dict[str, Any]:
    """One rule as the list shows it."""
    return {
        "id": rule.id,
        "file": str(rule.file),
        "line": rule.line,
        "priority": rule.priority,
        "description": rule.description,
        "triggers": [t.source for t in rule.triggers],
        "events": list(rule.events),
        "filters": filters_of(rule.filters),
        "schedule": schedule_of(rule),
        "steps": len(rule.steps),
        "warnings": warnings,
    }


def _haystack(rule: Rule) -> str:
    words = [rule.id, str(rule.file), rule.description, *rule.events]
    words += [t.source for t in rule.triggers]
    if "schedule" in rule.extras:
        words.append("schedule")
    return "\n".join(words).casefold()


# -- check's warnings, once per rulebook ---------------------------------------------------------


class Warnings:
    """``check``'s warnings for one rulebook, each with its file and line, and which rule
    each belongs to (the rule of that file starting at or before the line)."""

    def __init__(self, lines: list[str], atomic: tuple[str, ...], rulebook: Rulebook) -> None:
        self.items = [where(line) for line in lines]
        self.atomic = [where(line) for line in atomic]
        starts: dict[str, list[tuple[int, str]]] = {}
        for rule in rulebook.rules:
            starts.setdefault(str(rule.file), []).append((rule.line, rule.id))
        for rows in starts.values():
            rows.sort()
        self.by_rule: dict[str, list[dict[str, Any]]] = {}
        for item in self.items:
            rows = starts.get(item["file"], [])
            at = bisect_right(rows, (item["line"], "\uffff")) - 1
            if at >= 0:
                item["rule"] = rows[at][1]
                self.by_rule.setdefault(rows[at][1], []).append(item)


def where(line: str) -> dict[str, Any]:
    """``file:line: text`` split (file "" and line 0 when the line names no place)."""
    m = _WHERE.match(line)
    if m is None:
        return {"file": "", "line": 0, "text": line, "where": "", "rule": None}
    return {
        "file": m[1],
        "line": int(m[2]),
        "text": m[3],
        "where": f"{m[1]}:{m[2]}",
        "rule": None,
    }


def _disabled(app: Any) -> Any:
    """platform -> the config key enabling its adapter, as ``check`` asks."""
    return disabled_for(app.settings, getattr(app, "adapters", None))


_WARNINGS: weakref.WeakKeyDictionary[Any, tuple[Any, Warnings]] = weakref.WeakKeyDictionary()


async def warnings_for(app: Any) -> Warnings:
    """The warnings of the rules in force (computed in a worker thread on first use after a
    reload: collisions across 10,000 rules take a while)."""
    rulebook = app.rulebook
    cached = _WARNINGS.get(app)
    if cached is not None and cached[0]() is rulebook:
        return cached[1]

    def compute() -> Warnings:
        lines = rule_warnings(rulebook, _disabled(app))
        return Warnings(lines, rulebook.atomic_report, rulebook)

    found = await asyncio.to_thread(compute)
    _WARNINGS[app] = (weakref.ref(rulebook), found)
    return found


# -- the list ------------------------------------------------------------------------------------


def listing(
    rulebook: Rulebook,
    found: Warnings,
    *,
    q: str = "",
    file: str = "",
    page_no: int = 1,
    size: int = PAGE_SIZE,
) -> dict[str, Any]:
    """One page of the rules (those whose id, triggers, events, file or description contain
    ``q``, in ``file`` when given), the files and their rule counts."""
    needle = q.strip().casefold()
    chosen = [
        r
        for r in rulebook.rules
        if (not file or str(r.file) == file) and (not needle or needle in _haystack(r))
    ]
    pages = max(1, math.ceil(len(chosen) / size))
    page_no = min(max(1, page_no), pages)
    shown = chosen[(page_no - 1) * size : page_no * size]
    counts: dict[str, int] = {}
    for rule in rulebook.rules:
        counts[str(rule.file)] = counts.get(str(rule.file), 0) + 1
    files = [{"file": str(f), "rules": counts.get(str(f), 0)} for f in rulebook.files]
    return {
        "total": len(rulebook.rules),
        "matching": len(chosen),
        "page": page_no,
        "pages": pages,
        "size": size,
        "q": q,
        "file": file,
        "files": files,
        "rules": [rule_row(r, len(found.by_rule.get(r.id, ()))) for r in shown],
    }


# -- one rule's source ---------------------------------------------------------------------------


def rule_source(rule: Rule, limit: int = SOURCE_LINES) -> dict[str, Any]:
    """The rule's lines from its file as it reads now: from its first line to the line
    before the next one indented no deeper than its ``- `` (the next rule, ``tests:``)."""
    try:
        text = Path(rule.file).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return {"lines": [], "error": f"{rule.file} cannot be read: {exc.strerror or exc}"}
    lines = text.splitlines()
    start = rule.line - 1
    if not 0 <= start < len(lines):
        return {"lines": [], "error": f"{rule.file} has no line {rule.line} now"}
    first = lines[start]
    body = first.lstrip()
    indent = len(first) - len(body)
    # "- id: x": the rule's keys sit deeper than the dash; "id: x" (the dash above): as deep
    floor = indent if body.startswith("-") else indent - 1
    end = start + 1
    while end < len(lines) and end - start < limit:
        line = lines[end]
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#") and len(line) - len(stripped) <= floor:
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    shown = [{"no": n + 1, "text": lines[n]} for n in range(start, end)]
    return {"lines": shown, "error": None, "cut": end - start >= limit}


def rule_detail(rule: Rule, rulebook: Rulebook, found: Warnings) -> dict[str, Any]:
    """The ``rules ID`` command's data, with the filters, schedule, cooldown, check's
    warnings and atomic span of that rule, and its source."""
    data = dict(describe_rules(rulebook, rule.id).data)
    cooldown = rule.cooldown
    data.update(
        description=rule.description,
        triggers=[
            {"source": t.source, "kind": t.kind, "line": t.line or rule.line} for t in rule.triggers
        ],
        steps=[{"uri": s.uri, "plugin": s.plugin, "line": s.line} for s in rule.steps],
        filters=filters_of(rule.filters),
        schedule=schedule_of(rule),
        cooldown=(
            {"seconds": cooldown.seconds, "per": cooldown.per} if cooldown is not None else None
        ),
        warnings=found.by_rule.get(rule.id, []),
        atomic=[a for a in found.atomic if a["file"] == str(rule.file) and a["line"] == rule.line],
        source=rule_source(rule),
        try_text=_try_text(rule),
    )
    return data


def _try_text(rule: Rule) -> str:
    """A text that fires the rule's first probe-able trigger (for the playground link)."""
    for trig in rule.triggers:
        if trig.kind in ("exact", "prefix", "suffix", "contains"):
            return trig.magic or trig.literal.strip()
    return ""


# -- the pages -----------------------------------------------------------------------------------


def _int(value: str, default: int = 1) -> int:
    try:
        return int(value)
    except ValueError:
        return default


async def rules_page(req: ConsoleRequest) -> web.StreamResponse:
    """GET rules[?q=…&file=…&page=N&warnings=all]."""
    app = req.app
    rulebook = app.rulebook
    found = await warnings_for(app)
    data = listing(
        rulebook,
        found,
        q=req.query("q"),
        file=req.query("file"),
        page_no=_int(req.query("page", "1")),
    )
    every = req.query("warnings") == "all"
    data["warnings"] = found.items if every else found.items[:WARNINGS_SHOWN]
    data["warnings_total"] = len(found.items)
    data["atomic"] = found.atomic if every else found.atomic[:WARNINGS_SHOWN]
    data["atomic_total"] = len(found.atomic)
    data["reload"] = req.site.state.get(LAST_RELOAD)
    return await page(req, "rules.html", data, title="Rules")


async def rule_page(req: ConsoleRequest) -> web.StreamResponse:
    """GET rules/rule?id=…: one rule in detail, with its source."""
    rule_id = req.query("id")
    rulebook = req.app.rulebook
    rule = rulebook.by_id.get(rule_id)
    if rule is None:
        raise Refused(404, f"no rule {rule_id!r} in the rules in force")
    found = await warnings_for(req.app)
    data = await asyncio.to_thread(rule_detail, rule, rulebook, found)
    return await page(req, "rule.html", data, title=f"Rule {rule.id}")


async def reload_rules(req: ConsoleRequest) -> web.StreamResponse:
    """POST rules/reload (a change): the ``reload`` command; the outcome is kept for the
    Rules page (POST-redirect-GET), or answered as JSON with ``?format=json``."""
    result = await run_command(req, "reload", {})
    data = dict(result.data) if isinstance(result.data, dict) else {"ok": result.ok}
    data.setdefault("ok", result.ok)
    data.setdefault("errors", [] if result.ok else [result.text])
    data["text"] = result.text
    data["errors_at"] = [where(e) for e in data.get("errors") or ()]
    data["at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + " UTC"
    data["by"] = f"{req.role} from {req.client}"
    req.site.state[LAST_RELOAD] = data
    changed(req, "rules.reload", ok=data["ok"], errors=len(data.get("errors") or ()))
    if req.wants_json():
        return web.json_response(data, status=200 if data["ok"] else 422)
    return redirect(req, "rules")


ROUTES: tuple[Route, ...] = (
    Route("GET", "rules", rules_page),
    Route("GET", "rules/rule", rule_page),
    Route("POST", "rules/reload", reload_rules, change=True),
)
