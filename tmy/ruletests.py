"""Rule tests written in YAML: the ``tests:`` list of a rules file, run by ``run.py test``.

A rules file may carry its own tests, next to the rules they check::

    tests:
      - send: "签到"
        user: ann
        expect: "签到成功，累计 1 次"
      - send: "签到"
        user: ann
        expect_re: "已经签到"
        now: "2026-11-22T09:00:00+08:00"

``python run.py test [PATH…] [-k PATTERN] [--json]`` loads each path (a rules
directory or one file) with the real loader, then runs every file's cases in
order through the real engine against one fresh temporary SQLite store per
file — the cases of a file share state, so the second 签到 sees the first.
Whatever the configuration says, the LLM is the TESTONLY mock, and outbound
HTTP never leaves the machine: a request that no ``http:`` canned response of
the case matches fails with "outbound HTTP refused in tests".

Exit codes: 0 every case passed, 1 a case failed (or none ran), 2 a rules file
or a test case is invalid (``file:line`` errors, all of them, nothing run).

Python plugin authors keep :class:`tmy.testing.Bot`; this module is for people
who write YAML.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import fnmatch
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx

from tmy.config import Settings
from tmy.cron import cron_message, fire_time_text
from tmy.errors import ConfigError, RuleError, RuleErrors, StoreError, TmyError
from tmy.hints import did_you_mean

CASE_KEYS = (
    "name",
    "send",
    "fire",
    "user",
    "user_name",
    "chat",
    "platform",
    "private",
    "mention",
    "admin",
    "vars",
    "now",
    "http",
    "expect",
    "expect_re",
    "expect_error",
    "expect_no_reply",
)
EXPECT_KEYS = ("expect", "expect_re", "expect_error", "expect_no_reply")
HTTP_KEYS = ("status", "json", "body", "text", "headers", "method")
DEFAULT_USER = "tester"
DEFAULT_PLATFORM = "test"
REFUSED = "outbound HTTP refused in tests: {url} (give the test an http: canned response)"
PREVIEW = 100  # characters of a reply shown on a PASS line


# -- cases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Canned:
    """One canned HTTP response: for requests whose URL matches ``pattern`` (a glob)."""

    pattern: str
    method: str | None
    status: int
    content: bytes
    headers: tuple[tuple[str, str], ...]

    def matches(self, method: str, urls: tuple[str, ...]) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.pattern in urls:
            return True
        return any(fnmatch.fnmatchcase(u, self.pattern) for u in urls)


@dataclass
class Case:
    """A validated test case."""

    file: str
    line: int
    name: str
    send: str | None
    fire: str | None  # a scheduled rule's id: run it as its schedule would
    user: str
    user_name: str
    chat: str
    platform: str
    private: bool | None
    mention: bool
    admin: bool
    vars: dict[str, Any]
    now: str | None
    http: tuple[Canned, ...]
    kind: str  # one of EXPECT_KEYS
    expected: Any

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def label(self) -> str:
        said = f"fire {self.fire}" if self.fire is not None else _one_line(self.send or "")
        who = f" (user {self.user})" if self.user != DEFAULT_USER else ""
        return f"{self.name}: {said}{who}" if self.name else f"{said}{who}"

    def selected_by(self, pattern: str | None) -> bool:
        if not pattern:
            return True
        return pattern in self.name or pattern in (self.send or self.fire or "")


@dataclass
class Outcome:
    """What one case did and whether that was what it expected."""

    case: Case
    ok: bool
    actual: str
    error: str | None
    rule: str | None
    detail: list[str] = field(default_factory=list)  # lines explaining a failure

    def as_dict(self) -> dict[str, Any]:
        c = self.case
        return {
            "file": c.file,
            "line": c.line,
            "name": c.name,
            "send": c.send if c.fire is None else None,
            "fire": c.fire,
            "ok": self.ok,
            "expectation": c.kind,
            "expected": c.expected,
            "actual": self.actual,
            "error": self.error,
            "rule": self.rule,
            "detail": self.detail,
        }


def _timezone(name: str) -> tzinfo | None:
    """The engine's reading of a timezone setting; None for a bad one (the engine
    refuses it with its own clear error when the cases run)."""
    from tmy.engine.core import _timezone as engine_timezone

    try:
        return engine_timezone(name)
    except ConfigError:
        return None


def normalise_now(value: Any, tz: tzinfo | None) -> str:
    """``now:`` as NOW reads: ISO 8601 to the second, with an offset (the config's
    timezone when the test gives none). ValueError when it is no date/time."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and value.strip():
        moment = datetime.fromisoformat(value.strip())
    else:
        raise ValueError(f"{value!r} is not a date and time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz) if tz is not None else moment.astimezone()
    return moment.isoformat(timespec="seconds")


class _CaseParser:
    """Validates ``tests:`` cases; every problem is a RuleError with file and line."""

    def __init__(self, rulebook: Any, tz: tzinfo | None) -> None:
        self.rulebook = rulebook
        self.tz = tz
        self.errors: list[RuleError] = []

    def error(self, message: str, file: str, line: int) -> None:
        self.errors.append(RuleError(f"test case: {message}", file=file, line=line))

    def parse(self, test: Any) -> Case | None:
        file, line = test.file, test.line
        raw = dict(test.case)
        lines: dict[str, int] = raw.pop("_lines", {}) or {}
        before = len(self.errors)

        def at(key: str) -> int:
            return lines.get(key, line)

        for key in raw:
            if key not in CASE_KEYS:
                hint = did_you_mean(key, CASE_KEYS)
                self.error(
                    f"unknown key {key!r}{hint}; a case has {', '.join(CASE_KEYS)}", file, at(key)
                )
        unknown = len(self.errors) > before  # a misspelt send/expect: say that only
        send = raw.get("send")
        fire = raw.get("fire")
        if (send is None) == (fire is None) and not (unknown and send is None):
            self.error(
                "each case needs 'send: <message>' (or 'fire: <scheduled rule id>'), not both"
                if send is not None
                else "each case needs 'send: <message>' (or 'fire: <scheduled rule id>')",
                file,
                line,
            )
        if send is not None and (isinstance(send, bool) or not isinstance(send, (str, int, float))):
            self.error(f"'send' must be the message text, got {send!r}", file, at("send"))
            send = None
        if fire is not None:
            rule = self.rulebook.by_id.get(fire) if isinstance(fire, str) else None
            if rule is None:
                ids = [r.id for r in self.rulebook.rules]
                self.error(
                    f"'fire: {fire}' names no rule{did_you_mean(fire, ids)}", file, at("fire")
                )
            elif "schedule" not in rule.extras:
                self.error(
                    f"'fire: {fire}': that rule has no schedule: (test it with 'send:')",
                    file,
                    at("fire"),
                )
        text: dict[str, str] = {}
        for key, default in (
            ("name", ""),
            ("user", DEFAULT_USER),
            ("user_name", ""),
            ("chat", ""),
            ("platform", DEFAULT_PLATFORM),
        ):
            value = raw.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                self.error(f"{key!r} must be text, got {value!r}", file, at(key))
                value = default
            text[key] = str(value)
        flags: dict[str, Any] = {}
        for key in ("private", "mention", "admin"):
            value = raw.get(key)
            if value is not None and not isinstance(value, bool):
                self.error(f"{key!r} must be true or false, got {value!r}", file, at(key))
                value = None
            flags[key] = value
        variables = self.vars(raw.get("vars"), file, at("vars"))
        now = None
        if raw.get("now") is not None:
            try:
                now = normalise_now(raw["now"], self.tz)
            except ValueError:
                self.error(
                    f"'now' must be an ISO date and time like \"2026-11-22T09:00:00+08:00\", "
                    f"got {raw['now']!r}",
                    file,
                    at("now"),
                )
        http = self.http(raw.get("http"), file, at("http"))
        kinds = [k for k in EXPECT_KEYS if k in raw]
        kind, expected = "", None
        if not kinds:
            if not unknown:
                self.error(
                    "say what to expect: one of expect, expect_re, expect_error, expect_no_reply",
                    file,
                    line,
                )
        elif len(kinds) > 1:
            self.error(
                f"one expectation per case, got {' and '.join(kinds)} (split it into two cases)",
                file,
                at(kinds[1]),
            )
        else:
            kind = kinds[0]
            expected = self.expectation(kind, raw[kind], file, at(kind))
        if len(self.errors) > before:
            return None
        return Case(
            file=file,
            line=line,
            name=text["name"],
            send=None if send is None else str(send),
            fire=fire,
            user=text["user"],
            user_name=text["user_name"],
            chat=text["chat"],
            platform=text["platform"],
            private=flags["private"],
            mention=bool(flags["mention"]),
            admin=bool(flags["admin"]),
            vars=variables,
            now=now,
            http=http,
            kind=kind,
            expected=expected,
        )

    def expectation(self, kind: str, value: Any, file: str, line: int) -> Any:
        if kind == "expect":
            if value is None or isinstance(value, (dict, list)):
                self.error(
                    "'expect' must be the reply text (use expect_no_reply: true for silence)",
                    file,
                    line,
                )
                return None
            if isinstance(value, bool):
                return "true" if value else "false"
            return str(value)
        if kind == "expect_re":
            if not isinstance(value, str):
                self.error(f"'expect_re' must be a regular expression, got {value!r}", file, line)
                return None
            try:
                re.compile(value)
            except re.error as exc:
                self.error(f"'expect_re' {value!r} is not a valid regex: {exc}", file, line)
            return value
        if kind == "expect_error":
            if value is True or (isinstance(value, str) and value):
                return value
            self.error(
                "'expect_error' is true (the run fails) or text the error must contain, "
                f"got {value!r}",
                file,
                line,
            )
            return None
        if value is not True:
            self.error(f"'expect_no_reply' is only ever true, got {value!r}", file, line)
        return True

    def vars(self, value: Any, file: str, line: int) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.error("'vars' must map declared variables to values: {checkins: 3}", file, line)
            return {}
        declared = self.rulebook.variables
        out = {}
        for name, preset in value.items():
            if name not in declared:
                hint = did_you_mean(name, declared)
                known = ", ".join(sorted(declared)) or "none"
                self.error(
                    f"'vars': {name!r} is not a declared variable{hint} (declared: {known})",
                    file,
                    line,
                )
                continue
            try:
                from tmy.store.codec import encode

                encode(preset, name)
            except StoreError as exc:
                self.error(f"'vars': {exc}", file, line)
                continue
            out[name] = preset
        return out

    def http(self, value: Any, file: str, line: int) -> tuple[Canned, ...]:
        if value is None:
            return ()
        entries: list[tuple[Any, Any]] = []
        if isinstance(value, dict):
            entries = list(value.items())
        elif isinstance(value, list):
            for item in value:
                if not isinstance(item, dict) or not isinstance(item.get("url"), str):
                    self.error(
                        "each 'http' item needs a url: {url: 'https://…', json: {…}}", file, line
                    )
                    continue
                spec = dict(item)
                entries.append((spec.pop("url"), spec))
        else:
            self.error(
                "'http' maps a URL (or a glob like 'https://api.example.com/*') to a response "
                "{status, json | text, headers}",
                file,
                line,
            )
            return ()
        out = []
        for url, spec in entries:
            canned = self.canned(url, spec, file, line)
            if canned is not None:
                out.append(canned)
        return tuple(out)

    def canned(self, url: Any, spec: Any, file: str, line: int) -> Canned | None:
        where = f"'http' {url!r}"
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "*")):
            self.error(f"{where}: the key must be a URL starting with http(s)://", file, line)
            return None
        if not isinstance(spec, dict):
            self.error(f"{where}: give a response like {{status: 200, json: {{…}}}}", file, line)
            return None
        for key in spec:
            if key not in HTTP_KEYS:
                hint = did_you_mean(key, HTTP_KEYS)
                self.error(
                    f"{where}: unknown key {key!r}{hint}; a response has {', '.join(HTTP_KEYS)}",
                    file,
                    line,
                )
                return None
        bodies = [k for k in ("json", "body", "text") if k in spec]
        if len(bodies) > 1:
            self.error(f"{where}: one body per response, got {' and '.join(bodies)}", file, line)
            return None
        status = spec.get("status", 200)
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            self.error(f"{where}: 'status' must be an HTTP status 100-599", file, line)
            return None
        headers: dict[str, str] = {}
        given = spec.get("headers") or {}
        if not isinstance(given, dict):
            self.error(f"{where}: 'headers' must be a mapping", file, line)
            return None
        content = b""
        if "json" in spec:
            content = json.dumps(spec["json"], ensure_ascii=False).encode()
            headers["content-type"] = "application/json"
        elif bodies:
            text = spec[bodies[0]]
            if not isinstance(text, str):
                self.error(f"{where}: {bodies[0]!r} must be text", file, line)
                return None
            content = text.encode()
            headers["content-type"] = "text/plain; charset=utf-8"
        headers.update({str(k).lower(): str(v) for k, v in given.items()})
        method = spec.get("method")
        if method is not None and not isinstance(method, str):
            self.error(f"{where}: 'method' must be GET, POST, …", file, line)
            return None
        return Canned(
            url, method.upper() if method else None, status, content, tuple(headers.items())
        )


# -- running ---------------------------------------------------------------------------------


def _mock_llm(llm: dict[str, Any]) -> dict[str, Any]:
    """The ``llm:`` settings with every model answered by the TESTONLY mock.

    Model names stay (a step's ``model: fast`` must still load), each now points at
    the mock; the ``env`` model is shadowed the same way, so an API key in the
    environment never sends a test to a real provider.
    """
    from tmy.config.llm import ENV_MODEL, MOCK

    cfg = dict(llm or {})
    models: dict[str, Any] = {}
    for name, spec in (cfg.get("models") or {}).items():
        keep = dict(spec) if isinstance(spec, dict) else {}
        keep.pop("api_key_env", None)
        keep["base_url"] = MOCK
        keep["stream"] = False
        models[name] = keep
    first = next(iter(models), MOCK)
    models.setdefault(ENV_MODEL, {"base_url": MOCK})
    cfg["models"] = models
    cfg["default"] = cfg.get("default") or first
    return cfg


class _Outbound:
    """The test transport: canned responses for the current case, refusal otherwise."""

    def __init__(self) -> None:
        self.canned: tuple[Canned, ...] = ()
        self.log: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
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
        llm=_mock_llm(settings.llm),
    )


async def _run_file(
    settings: Settings, root: Path, cases: list[Case], pattern: str | None
) -> list[Outcome]:
    """Run one file's cases in order on a fresh store; outcomes of the selected ones.

    The cases before a selected one still run (unreported): they build the state
    it expects. Nothing after the last selected case runs.
    """
    from tmy.app import App

    last = max(i for i, c in enumerate(cases) if c.selected_by(pattern))
    outbound = _Outbound()
    outcomes: list[Outcome] = []
    setup_failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tmy-ruletest-") as tmp:
        async with App(sandbox_settings(settings, root, Path(tmp))) as app:
            assert app.engine is not None
            services = app.engine.services
            await services.aclose()
            services._http = httpx.AsyncClient(
                transport=httpx.MockTransport(outbound.handler), follow_redirects=True
            )
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
    return outcomes


def _message(case: Case, text: str) -> Any:
    from tmy.message import Message

    return Message(
        text,
        user=case.user,
        chat=case.chat,
        platform=case.platform,
        user_name=case.user_name,
        private=case.private,
        is_admin=case.admin,
        mentions_bot=case.mention,
    )


async def _run_case(engine: Any, case: Case, outbound: _Outbound) -> Outcome:
    from tmy.engine.variables import variable_key

    engine.fixed_now = case.now
    outbound.canned = case.http
    outbound.log = []
    rulebook = engine.rulebook
    if case.fire is not None:
        rule = rulebook.by_id[case.fire]
        schedule = rule.extras["schedule"]
        target = schedule.send_to[0] if schedule.send_to else None
        message = cron_message(schedule, target)
    else:
        message = _message(case, case.send or "")
    try:
        for name, value in case.vars.items():
            await engine.services.store.set(variable_key(rulebook.variables[name], message), value)
    except TmyError as exc:
        return Outcome(case, False, "", None, None, [f"could not preset vars: {exc}"])
    if case.fire is not None:
        tz = _timezone(schedule.timezone) if schedule.timezone else engine.tz
        moment = datetime.fromisoformat(case.now) if case.now else datetime.now(tz)
        fire_time = fire_time_text(moment.astimezone(tz))
        reply = await engine.run_scheduled(rule, message, schedule.input, {"FIRE_TIME": fire_time})
    else:
        reply = await engine.handle(message)
    engine.fixed_now = None
    ok, detail = _judge(case, reply)
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


def _one_line(text: str, limit: int = PREVIEW) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the command -----------------------------------------------------------------------------


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    found: int = 0  # cases in the files, selected or not

    @property
    def passed(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)


def load_cases(settings: Settings, root: Path) -> tuple[list[Case], list[str]]:
    """Load ``root`` with the real loader; its validated cases, or the errors."""
    from tmy.app import build_registry
    from tmy.rulebook.loader import load_rulebook

    try:
        rulebook = load_rulebook(root, build_registry(settings))
    except RuleErrors as exc:
        return [], [str(e) for e in exc.errors]
    except RuleError as exc:
        return [], [str(exc)]
    parser = _CaseParser(rulebook, _timezone(settings.timezone))
    cases = [c for c in (parser.parse(t) for t in getattr(rulebook, "tests", ())) if c]
    errors = sorted(parser.errors, key=lambda e: (str(e.file), e.line or 0))  # stable: in order
    return cases, [str(e) for e in errors]


async def run_tests(settings: Settings, paths: list[Path], pattern: str | None = None) -> Report:
    """Load every path first (all errors at once), then run the selected cases."""
    report = Report()
    plan: list[tuple[Path, list[Case]]] = []
    for root in paths:
        cases, errors = load_cases(settings, root)
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
                report.outcomes.extend(await _run_file(settings, root, file_cases, pattern))
    return report


def print_report(report: Report, out: Any = None) -> None:
    out = out or sys.stdout
    for o in report.outcomes:
        c = o.case
        if o.ok:
            shown = _one_line(o.actual) if o.actual else "(no reply)"
            if o.error:
                shown = f"{shown}  [error: {_one_line(o.error, 80)}]"
            print(f"PASS {c.where}  {c.label} → {shown}", file=out)
        else:
            print(f"FAIL {c.where}  {c.label}", file=out)
            for line in o.detail:
                print(f"     {line}", file=out)
    print(f"{report.passed} passed, {report.failed} failed", file=out)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the 'tests:' of rules files: each file's cases in order on a fresh temporary "
        "store, the LLM on the TESTONLY mock, outbound HTTP refused unless a case gives an "
        "'http:' canned response. Exit 0 all passed, 1 a case failed, 2 invalid rules or cases."
    )
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="rules directories or files (default: --rules)"
    )
    parser.add_argument(
        "-k",
        dest="pattern",
        metavar="PATTERN",
        help="only cases whose name or send contains PATTERN (earlier cases of the file "
        "still run, unreported, to build their state)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from tmy import logs

    if (
        getattr(args, "log_level", None) is None
        and not os.environ.get("TMY_LOG_LEVEL")
        and not settings.log_file
    ):
        logs.configure("error", None, fmt="json")  # a failing case shows its error itself
    paths = [Path(p) for p in args.paths] or [settings.rules]
    report = asyncio.run(run_tests(settings, paths, args.pattern))
    as_json = bool(getattr(args, "json", False))
    if report.errors:
        for error in report.errors:
            print(error, file=sys.stderr)
        if as_json:
            body = {"passed": 0, "failed": 0, "errors": report.errors, "cases": []}
            print(json.dumps(body, ensure_ascii=False, indent=2))
        return 2
    if as_json:
        body = {
            "passed": report.passed,
            "failed": report.failed,
            "cases": [o.as_dict() for o in report.outcomes],
        }
        print(json.dumps(body, ensure_ascii=False, indent=2, default=str))
    else:
        print_report(report)
    if not report.outcomes:
        where = ", ".join(str(p) for p in paths)
        if report.found:
            print(f"no test case matches -k {args.pattern!r} in {where}", file=sys.stderr)
        else:
            print(f"no test cases in {where}: add a 'tests:' list to a rules file", file=sys.stderr)
        return 1
    return 1 if report.failed else 0


def _register() -> None:
    from tmy.cli import COMMANDS

    COMMANDS["test"] = (configure, run)


_register()
