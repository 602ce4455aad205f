"""``cron fire RULE [--target PLATFORM:CHAT] [--dry-run]``: one occurrence of a scheduled rule, now.

Why: a scheduled post is otherwise only seen when its time comes. ``fire`` runs
one occurrence at once through the scheduler's own path
(:meth:`tmy.cron.Cron.fire_now`: claim, buffered run, fenced commit, outbox,
send), kept in the rule's cron history marked ``manual``, without touching the
next scheduled fire.

Where it runs decides how it posts:

* in a serving daemon (``.tmy cron fire`` in chat, ``POST /admin/commands/cron``,
  and the CLI, which asks the running daemon first): the daemon's own scheduler
  posts through its connected adapters, retried from the outbox like any
  scheduled post;
* anywhere else (the CLI when no daemon answers, ``run.py chat``): a scheduler of
  this process posts only to ``console`` targets (the reply is printed); other
  targets need a connected adapter, so the reply is printed and kept in the
  history as not sent.

``--dry-run`` runs the rule as ``explain`` runs a message (:mod:`tmy.explain.dryrun`):
an overlay store keeps every write, HTTP and LLM requests are recorded and
answered by stand-ins, nothing is posted or stored, and it shows what would be
sent, written and requested.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tmy.command import CommandError, Invocation, Result, jsonable
from tmy.cron import Cron, Fired, cron_message, fire_time_text, scheduled_rules
from tmy.cron.occurrence import SKIPPED_OFF
from tmy.cron.schedule import TARGET_PLATFORMS, Schedule, Timing, target_problem
from tmy.engine.core import Engine
from tmy.explain.dryrun import dry_engine
from tmy.hints import did_you_mean
from tmy.logs import preview
from tmy.message import Target, adapter_of
from tmy.rulebook.model import Rule, Rulebook

FIRE_USAGE = "usage: cron fire RULE [--target PLATFORM:CHAT] [--dry-run]"
_LOG_ONLY = "(no send_to: the reply is only logged)"


# -- what to fire -------------------------------------------------------------------------------


def scheduled_rule(rulebook: Rulebook, rule_id: str) -> Rule:
    """The scheduled rule ``rule_id``; CommandError naming the scheduled ones otherwise."""
    scheduled = [r.id for r in scheduled_rules(rulebook)]
    rule = rulebook.by_id.get(rule_id)
    if rule is None:
        known = ", ".join(scheduled) or "none"
        hint = did_you_mean(rule_id, scheduled) or did_you_mean(rule_id, rulebook.by_id)
        raise CommandError(f"no rule {rule_id!r}{hint} (scheduled rules: {known})")
    if "schedule" not in rule.extras:
        known = ", ".join(scheduled) or "none"
        raise CommandError(
            f"rule {rule_id!r} ({rule.file}:{rule.line}) has no 'schedule:'; cron fire runs "
            f"scheduled rules (scheduled rules: {known}). To try a rule with triggers: "
            "ask TEXT, or explain TEXT"
        )
    return rule


def parse_target(text: str, platforms: Sequence[str] = TARGET_PLATFORMS) -> Target:
    """``PLATFORM:CHAT`` (``onebot:group:5``, ``telegram:-100123``, through Satori
    ``satori:qq:CHAT``) as a Target.

    ``platforms``: where a post can go from here (the platforms ``send_to`` takes; in a
    serving daemon, its running adapters that can post); CommandError otherwise.
    """
    platform, sep, chat = text.partition(":")
    platform, chat = platform.strip(), chat.strip()
    if platform == "satori" and ":" in chat:  # satori:qq:CHAT: the platform behind the bridge
        behind, _, chat = chat.partition(":")
        platform, chat = f"satori:{behind.strip()}", chat.strip()
    if not sep or not platform or not chat:
        raise CommandError(f"--target takes PLATFORM:CHAT (e.g. onebot:group:5), got {text!r}")
    problem = target_problem(platform, chat)
    if problem is not None:
        raise CommandError(f"--target: {problem}")
    if adapter_of(platform) not in platforms:
        if not platforms:
            raise CommandError(
                f"no adapter can post to {platform!r} here: this daemon runs no adapter that "
                "posts (onebot, discord, telegram, console); enable one, or leave out --target"
            )
        raise CommandError(
            f"no adapter can post to {platform!r} here{did_you_mean(platform, platforms)}; "
            f"--target takes one of: {', '.join(platforms)}"
        )
    return Target(platform, chat)


def rule_id_of(rule: str) -> str:
    """The one rule id ``fire`` takes (its flags were read as flags on every front end)."""
    words = rule.split()
    if not words:
        raise CommandError(FIRE_USAGE)
    if len(words) > 1:
        raise CommandError(f"cron fire: unexpected {words[1]!r}; {FIRE_USAGE}")
    return words[0]


def where(target: Target | None) -> str:
    """A target as people write it: ``onebot:group:5`` (``… user U`` for a user target)."""
    if target is None:
        return _LOG_ONLY
    shown = f"{target.platform}:{target.chat}" if target.chat else target.platform
    return f"{shown} user {target.user}" if target.user else shown


# -- firing for real ----------------------------------------------------------------------------


_ANSWER_ONLY = frozenset({"http", "openai"})  # adapters that answer requests, never post


def _posting_platforms(app: Any) -> tuple[str, ...]:
    """Where a post can go: a serving app's running adapters that post, else ``send_to``'s."""
    adapters = getattr(app, "adapters", None)  # the App's, when it serves (AppLike lacks it)
    if adapters is None:
        return TARGET_PLATFORMS
    return tuple(a.name for a in adapters.started if a.name not in _ANSWER_ONLY)


def _scheduler(inv: Invocation) -> tuple[Cron, bool]:
    """The serving daemon's scheduler, else one of this process's own; whether it serves."""
    app = inv.app
    running = getattr(app, "cron", None)  # the App's scheduler, when it serves (AppLike lacks it)
    if isinstance(running, Cron):
        return running, True
    return Cron(app.engine, app.store, _print_only, default_zone=inv.settings.tz), False


async def _print_only(target: Target, text: str) -> None:
    """A post from a process without adapters: a console target's reply is the one printed."""


def _here_only(target: Target) -> str | None:
    if target.platform == "console":
        return None
    return (
        f"no {target.platform} adapter in this process (fired without a running daemon: "
        "'cron fire' asks one through its HTTP listener)"
    )


async def fire(inv: Invocation, rule: Rule, target: Target | None) -> Result:
    """Fire ``rule`` now for real; the reply of each target and how it was posted."""
    scheduler, serving = _scheduler(inv)
    who = inv.who
    by = f"{inv.front} {who.platform}:{who.user}"
    runs = await scheduler.fire_now(
        rule,
        targets=None if target is None else (target,),
        by=by,
        unsendable=None if serving else _here_only,
    )
    fire_time = runs[0].entry["fire_time"] if runs else None
    data = {
        "rule": rule.id,
        "dry_run": False,
        "fire_time": fire_time,
        "in": "daemon" if serving else "here",
        "runs": [_run_data(r) for r in runs],
    }
    ok = all(_run_ok(r) for r in runs)
    lines = []
    for run in runs:
        entry = run.entry
        trace = f" (trace {entry['trace_id']})" if entry.get("trace_id") else ""
        error = f": {entry['error']}" if entry.get("error") else ""
        sent = str(entry.get("sent", ""))
        sent = sent if sent.startswith("not sent") else f"sent {sent}"
        lines.append(
            f"fired {rule.id} at {entry['fire_time']} -> {where(run.target)}: "
            f"{entry['outcome']}{error}, {sent}{trace}"
        )
        text = run.reply.text if run.reply is not None else ""
        if text:  # in chat shortened: the post itself went to its chat
            lines.append(preview(text, 500) if inv.compact else text)
    return Result("\n".join(lines), data, ok=ok)


def _run_ok(run: Fired) -> bool:
    entry = run.entry
    sent = str(entry.get("sent", ""))
    return entry["outcome"] in ("ok", SKIPPED_OFF) and "gave up" not in sent


def _run_data(run: Fired) -> dict[str, Any]:
    entry = run.entry
    return {
        "target": None if run.target is None else where(run.target),
        "outcome": entry["outcome"],
        "error": entry.get("error"),
        "sent": entry.get("sent"),
        "reply": run.reply.text if run.reply is not None else None,
        "trace_id": entry.get("trace_id"),
    }


# -- the dry run --------------------------------------------------------------------------------


@dataclass
class DryFire:
    """What one target's dry run would do."""

    target: Target | None
    outcome: str
    reply: str = ""
    error: str | None = None
    writes: dict[str, Any] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": None if self.target is None else where(self.target),
            "outcome": self.outcome,
            "reply": self.reply,
            "error": self.error,
            "would_send": self.target is not None and bool(self.reply) and self.outcome == "ok",
            "writes": jsonable(self.writes),
            "requests": jsonable(self.requests),
        }


async def dry_fire(
    engine: Engine, rule: Rule, schedule: Schedule, target: Target | None, fire: datetime
) -> DryFire:
    """Run ``rule`` for ``target`` as ``explain`` runs a message: nothing sent, nothing stored.

    The engine of :mod:`tmy.explain.dryrun` on an :class:`OverlayStore`: writes stay
    in the overlay, HTTP and LLM requests are recorded (the LLM answered by the
    TESTONLY mock, HTTP steps by a placeholder).
    """
    message = cron_message(schedule, target)
    switch = engine.switch
    if target is not None and switch is not None and await switch.is_off(message):
        return DryFire(target, SKIPPED_OFF)
    async with dry_engine(engine, engine.rulebook, f"dry-fire-{os.urandom(6).hex()}") as dry:
        extra = {"FIRE_TIME": fire_time_text(fire)}
        reply = await dry.engine.run_scheduled(rule, message, schedule.input, extra)
    outcome = "error" if reply.error else "ok"
    return DryFire(target, outcome, reply.text, reply.error, dry.writes, dry.requests)


async def fire_dry(inv: Invocation, rule: Rule, target: Target | None) -> Result:
    """``cron fire --dry-run``: what each target would get; nothing is posted or stored."""
    schedule: Schedule = rule.extras["schedule"]
    fire = datetime.now(Timing(schedule, inv.settings.tz).tz).replace(microsecond=0)
    targets = (target,) if target is not None else (schedule.send_to or (None,))
    engine = inv.app.engine
    runs = [await dry_fire(engine, rule, schedule, t, fire) for t in targets]
    lines = [f"dry run of {rule.id} at {fire_time_text(fire)}: nothing is sent or stored"]
    for run in runs:
        if run.outcome == SKIPPED_OFF:
            lines.append(f"{where(run.target)}: would be skipped (the chat is switched off)")
            continue
        if run.error:
            lines.append(f"{where(run.target)}: the run fails: {run.error}")
        if run.target is None:
            lines.append(f"{_LOG_ONLY}; it would be:")
        elif run.reply:
            lines.append(f"would send to {where(run.target)}:")
        else:
            lines.append(f"{where(run.target)}: nothing to send (empty reply)")
        if run.reply:
            lines.append(run.reply)
        for key, value in run.writes.items():
            shown = (
                "(deleted)" if value is None else json.dumps(jsonable(value), ensure_ascii=False)
            )
            lines.append(f"  would write {key} = {preview(shown, 200)}")
        for req in run.requests:
            model = f" ({req['model']})" if req.get("model") else ""
            lines.append(f"  would request {req['method']} {req['url']}{model} [{req['uri']}]")
    data = {
        "rule": rule.id,
        "dry_run": True,
        "fire_time": fire_time_text(fire),
        "runs": [r.as_dict() for r in runs],
    }
    return Result("\n".join(lines), data, ok=all(r.outcome != "error" for r in runs))


async def run_fire(inv: Invocation, rule_arg: str | None) -> Result:
    """``cron fire …`` on any front end: resolve the rule and target, fire or dry-run."""
    if not rule_arg:
        raise CommandError(FIRE_USAGE)
    rule_id = rule_id_of(rule_arg)
    target_text, dry_run = inv.args.get("target"), bool(inv.args.get("dry_run"))
    rule = scheduled_rule(inv.app.engine.rulebook, rule_id)
    target = None
    if target_text:
        target = parse_target(target_text, _posting_platforms(inv.app))
    if dry_run:
        return await fire_dry(inv, rule, target)
    return await fire(inv, rule, target)


def is_posting(args: dict[str, Any]) -> bool:
    """Whether ``cron`` with these arguments posts (a real ``fire``): the CLI then asks the
    running daemon, whose adapters are connected, before running it itself."""
    return args.get("action") == "fire" and not args.get("dry_run")


__all__ = ["FIRE_USAGE", "DryFire", "dry_fire", "is_posting", "run_fire"]
