"""Running a file's cases through the real engine, on a fresh store, with no way out.

Each file gets a temporary SQLite store and its cases run in order (they share
state); a case with a ``seed:`` (its own or its file's) draws its random values
from ``random.Random(seed)``, fresh for that case; the LLM is the TESTONLY
mock whatever the config says, and outbound HTTP is answered by the case's
canned responses or refused.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from tmy.app import App
from tmy.config import Settings
from tmy.config.llm import mocked
from tmy.cron import cron_message, fire_time_text
from tmy.engine.keys import variable_key
from tmy.engine.variables import Variables
from tmy.errors import TmyError
from tmy.extension import Extension
from tmy.message import Message
from tmy.ruletests import events
from tmy.ruletests.cases import Canned, Case, Outcome, zone
from tmy.ruletests.parsing import load_cases
from tmy.ruletests.report import Report
from tmy.values import randomness

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

REFUSED = "outbound HTTP refused in tests: {url} (give the test an http: canned response)"


class _Outbound:
    """The test transport: canned responses for the current case, refusal otherwise."""

    def __init__(self) -> None:
        self.canned: tuple[Canned, ...] = ()
        self.log: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        import httpx  # deferred: httpx is ~50 ms of every CLI start

        url = str(request.url)
        urls = (url, unquote(url))
        for canned in self.canned:
            if canned.matches(request.method, urls):
                self.log.append(f"{request.method} {unquote(url)} → {canned.status} (canned)")
                # a stream, not content=: the HTTP executor reads the raw body itself
                headers = [*canned.headers, ("content-length", str(len(canned.content)))]
                return httpx.Response(
                    canned.status, headers=headers, stream=httpx.ByteStream(canned.content)
                )
        self.log.append(f"{request.method} {unquote(url)} → refused (no canned response)")
        raise httpx.ConnectError(REFUSED.format(url=unquote(url)), request=request)


def sandbox_settings(settings: Settings, root: Path, folder: Path) -> Settings:
    """What a test run uses: the given rules, a private store, the mock LLM, no listeners."""
    return settings.with_(
        rules=root,
        store=f"sqlite:///{folder / 'test.db'}",
        console=False,
        http_enabled=False,
        watch=False,
        admins=frozenset(),
        llm=mocked(settings.llm),
    )


async def _run_file(
    settings: Settings,
    root: Path,
    cases: list[Case],
    pattern: str | None,
    extensions: Sequence[Extension],
) -> list[Outcome]:
    """Run one file's cases in order on a fresh store; outcomes of the selected ones.

    The cases before a selected one still run (unreported): they build the state
    it expects. Nothing after the last selected case runs.
    """
    import httpx  # deferred: httpx is ~50 ms of every CLI start

    last = max(i for i, c in enumerate(cases) if c.selected_by(pattern))
    outbound = _Outbound()
    outcomes: list[Outcome] = []
    setup_failed: list[str] = []
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(outbound.handler), follow_redirects=True
    )
    sandbox = tempfile.TemporaryDirectory(prefix="tmy-ruletest-")
    try:
        settings = sandbox_settings(settings, root, Path(sandbox.name))
        async with App(settings, extensions=extensions, http=client) as app:
            assert app.engine is not None
            for case in cases[: last + 1]:
                outcome = await _run_case(app.engine, case, outbound)
                if case.selected_by(pattern):
                    if setup_failed and not outcome.ok:
                        outcome.detail.append(
                            "note: an earlier case of this file, run unreported as setup for -k, "
                            f"failed: {', '.join(setup_failed)}"
                        )
                    outcomes.append(outcome)
                elif not outcome.ok:
                    setup_failed.append(case.where)
    finally:
        await client.aclose()
        sandbox.cleanup()
    return outcomes


def _message(case: Case, text: str) -> Message:
    return Message(
        text,
        user=case.user,
        chat=case.chat,
        platform=case.platform,
        user_name=case.user_name,
        private=case.private,
        is_admin=case.admin,
        mentions_bot=case.mention,
        attachments=case.images,
    )


async def _run_case(engine: Any, case: Case, outbound: _Outbound) -> Outcome:
    engine.pin_now(case.now)
    outbound.canned = case.http
    outbound.log = []
    rulebook = engine.rulebook
    if case.fire is not None:
        rule = rulebook.by_id[case.fire]
        schedule = rule.extras["schedule"]
        target = schedule.send_to[0] if schedule.send_to else None
        message = cron_message(schedule, target)
    elif case.event is not None:  # a platform event from the case's user in its chat
        message = events.event_message(_message(case, ""), case.event, case.event_data)
    else:
        message = events.quoting(_message(case, case.send or ""), case.reply_to)
    try:
        for name, value in case.vars.items():
            await engine.services.store.set(variable_key(rulebook.variables[name], message), value)
        # a preset rank: true value is on its leaderboard, as any write of it would be
        preset = Variables({}, rulebook.variables, engine.services.store, message)
        await preset.sync_ranks(case.vars)
    except TmyError as exc:
        return Outcome(case, False, "", None, None, [f"could not preset vars: {exc}"])
    # a seeded case draws from random.Random(seed), fresh for this case: the same draws
    # every run, whichever cases ran (or were selected with -k) before it
    with randomness.seeded(case.seed) if case.seed is not None else nullcontext():
        if case.fire is not None:
            tz = zone(schedule.timezone) if schedule.timezone else engine.tz
            moment = datetime.fromisoformat(case.now) if case.now else datetime.now(tz)
            fire_time = fire_time_text(moment.astimezone(tz))
            extra = {"FIRE_TIME": fire_time}
            reply = await engine.run_scheduled(rule, message, schedule.input, extra)
        else:
            reply = await engine.handle(message)
    engine.pin_now(None)
    ok, detail = _judge(case, reply) if case.kind else (True, [])
    refused = events.judge_approve(case.approve, reply.approve)
    ok, detail = ok and not refused, detail + refused
    if not ok:
        if reply.error and case.kind != "expect_error":
            detail.append(f"error: {reply.error}")
        reason = getattr(reply, "reason", None)
        if not reply.text and reason:
            detail.append(f"no reply: {reason}")
        if reply.rule is not None:
            detail.append(f"rule: {reply.rule}")
        detail.extend(f"http: {line}" for line in outbound.log)
    return Outcome(case, ok, reply.text, reply.error, reply.rule, detail)


def _judge(case: Case, reply: Any) -> tuple[bool, list[str]]:
    actual: str = reply.text
    if case.kind == "expect":
        if actual == case.expected:
            return True, []
        return False, _diff(case.expected, actual)
    if case.kind == "expect_re":
        if re.search(case.expected, actual):
            return True, []
        return False, [f"expected a match for /{case.expected}/", f"actual: {_shown(actual)}"]
    if case.kind == "expect_error":
        error = reply.error
        if error and (case.expected is True or case.expected in error):
            return True, []
        if not error:
            return False, [f"expected the run to fail, but it answered: {_shown(actual)}"]
        return False, [f"expected an error containing {case.expected!r}", f"error: {error}"]
    if not actual and not reply.error:
        return True, []
    if reply.error:
        return False, ["expected no reply, but the run failed"]
    return False, [f"expected no reply, got: {_shown(actual)}"]


def _diff(expected: str, actual: str) -> list[str]:
    if not actual:
        return ["expected:", *_indented(expected), "actual: (no reply)"]
    lines = difflib.unified_diff(
        expected.splitlines() or [""],
        actual.splitlines() or [""],
        "expected",
        "actual",
        lineterm="",
    )
    out = list(lines)
    if expected.splitlines() == actual.splitlines():  # differ only in a trailing newline
        out.append(f"expected {expected!r}, actual {actual!r}")
    return out


def _indented(text: str) -> list[str]:
    return ["  " + line for line in (text.splitlines() or [""])]


def _shown(text: str) -> str:
    return repr(text) if text == "" or "\n" in text or text != text.strip() else text


async def run_tests(
    settings: Settings,
    paths: list[Path],
    pattern: str | None = None,
    *,
    extensions: Sequence[Extension] = (),
) -> Report:
    """Load every path first (all errors at once), then run the selected cases."""
    report = Report()
    plan: list[tuple[Path, list[Case]]] = []
    for root in paths:
        cases, errors = load_cases(settings, root, extensions)
        report.errors.extend(errors)
        report.found += len(cases)
        plan.append((root, cases))
    if report.errors:
        return report
    for root, cases in plan:
        by_file: dict[str, list[Case]] = {}
        for case in cases:
            by_file.setdefault(case.file, []).append(case)
        for file_cases in by_file.values():
            if any(c.selected_by(pattern) for c in file_cases):
                report.outcomes.extend(
                    await _run_file(settings, root, file_cases, pattern, extensions)
                )
    return report
