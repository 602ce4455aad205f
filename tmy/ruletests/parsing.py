"""Validating ``tests:`` cases: every problem is a ``file:line`` RuleError, all at once."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import tzinfo
from pathlib import Path
from typing import Any

from tmy.app import build_registry
from tmy.config import Settings
from tmy.errors import RuleError, RuleErrors, StoreError
from tmy.extension import Extension
from tmy.hints import did_you_mean
from tmy.rulebook.loader import load_rulebook
from tmy.ruletests import events
from tmy.ruletests.cases import (
    CASE_KEYS,
    DEFAULT_PLATFORM,
    DEFAULT_USER,
    EXPECT_KEYS,
    HTTP_KEYS,
    Canned,
    Case,
    normalise_now,
)
from tmy.store.codec import encode
from tmy.yamlfile.source import LineDict, read_yaml

_TEXTS = (
    ("name", ""),
    ("user", DEFAULT_USER),
    ("user_name", ""),
    ("chat", ""),
    ("platform", DEFAULT_PLATFORM),
)


class _Raw:
    """One case as written: its keys, its file and line, and each key's own line."""

    def __init__(self, test: Any) -> None:
        self.file, self.line = test.file, test.line
        self.data = dict(test.case)
        self.lines: dict[str, int] = self.data.pop("_lines", {}) or {}

    def at(self, key: str) -> int:
        return self.lines.get(key, self.line)


class _CaseParser:
    """Validates ``tests:`` cases; every problem is a RuleError with file and line."""

    def __init__(self, rulebook: Any, tz: tzinfo | None, max_value_bytes: int) -> None:
        self.rulebook = rulebook
        self.tz = tz
        self.max_value_bytes = max_value_bytes  # limits.max_value_bytes: a preset is stored
        self.errors: list[RuleError] = []
        self.file_seeds: dict[str, int | str | None] = {}

    def error(self, message: str, file: str, line: int) -> None:
        self.errors.append(RuleError(f"test case: {message}", file=file, line=line))

    def parse(self, test: Any) -> Case | None:
        raw = _Raw(test)
        before = len(self.errors)
        for key in raw.data:
            if key not in CASE_KEYS:
                hint = did_you_mean(key, CASE_KEYS)
                self.error(
                    f"unknown key {key!r}{hint}; a case has {', '.join(CASE_KEYS)}",
                    raw.file,
                    raw.at(key),
                )
        unknown = len(self.errors) > before  # a misspelt send/expect: say that only
        send, fire, event = self.send_or_fire(raw, unknown)
        given = raw.data.get("event_data")
        data = events.event_data(
            given, event is not None, self.error, raw.file, raw.at("event_data")
        )
        approve = events.approve(raw.data.get("approve"), self.error, raw.file, raw.at("approve"))
        pictures = events.images(raw.data.get("images"), self.error, raw.file, raw.at("images"))
        quoted = events.reply_to(raw.data.get("reply_to"), self.error, raw.file, raw.at("reply_to"))
        text = {key: self.text(raw, key, default) for key, default in _TEXTS}
        flags = {key: self.flag(raw, key) for key in ("private", "mention", "admin")}
        variables = self.vars(raw.data.get("vars"), raw.file, raw.at("vars"))
        now = self.now(raw)
        seed = self.seed(raw)
        http = self.http(raw.data.get("http"), raw.file, raw.at("http"))
        kind, expected = self.expected(raw, unknown or "approve" in raw.data)
        if len(self.errors) > before:
            return None
        return Case(
            file=raw.file,
            line=raw.line,
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
            seed=seed,
            event=event,
            event_data=data,
            approve=approve,
            images=pictures,
            reply_to=quoted,
        )

    def send_or_fire(self, raw: _Raw, unknown: bool) -> tuple[Any, Any, str | None]:
        """``send:`` (a message), ``fire:`` (a scheduled rule's id) or ``send_event:`` (a
        platform event's kind), exactly one."""
        send, fire = raw.data.get("send"), raw.data.get("fire")
        event = raw.data.get("send_event")
        given = [k for k in ("send", "fire", "send_event") if raw.data.get(k) is not None]
        if len(given) != 1 and not (unknown and not given):
            needs = "each case needs 'send: <message>' (or 'fire: <scheduled rule id>', or "
            needs += "'send_event: <event>')"
            self.error(
                f"{needs}, not {' and '.join(given)}" if given else needs, raw.file, raw.line
            )
        if event is not None:
            event = events.event_kind(event, self.error, raw.file, raw.at("send_event"))
        if send is not None and (isinstance(send, bool) or not isinstance(send, (str, int, float))):
            self.error(f"'send' must be the message text, got {send!r}", raw.file, raw.at("send"))
            send = None
        if fire is not None:
            rule = self.rulebook.by_id.get(fire) if isinstance(fire, str) else None
            if rule is None:
                ids = [r.id for r in self.rulebook.rules]
                self.error(
                    f"'fire: {fire}' names no rule{did_you_mean(fire, ids)}",
                    raw.file,
                    raw.at("fire"),
                )
            elif "schedule" not in rule.extras:
                self.error(
                    f"'fire: {fire}': that rule has no schedule: (test it with 'send:')",
                    raw.file,
                    raw.at("fire"),
                )
        return send, fire, event

    def text(self, raw: _Raw, key: str, default: str) -> str:
        value = raw.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.error(f"{key!r} must be text, got {value!r}", raw.file, raw.at(key))
            value = default
        return str(value)

    def flag(self, raw: _Raw, key: str) -> bool | None:
        value = raw.data.get(key)
        if value is not None and not isinstance(value, bool):
            self.error(f"{key!r} must be true or false, got {value!r}", raw.file, raw.at(key))
            return None
        return value

    def now(self, raw: _Raw) -> str | None:
        given = raw.data.get("now")
        if given is None:
            return None
        try:
            return normalise_now(given, self.tz)
        except ValueError:
            self.error(
                f"'now' must be an ISO date and time like \"2026-11-22T09:00:00+08:00\", "
                f"got {given!r}",
                raw.file,
                raw.at("now"),
            )
            return None

    def seed(self, raw: _Raw) -> int | str | None:
        """The case's ``seed:``, else its file's top-level ``seed:`` (a default for every case)."""
        if "seed" in raw.data:
            return self.checked_seed(raw.data["seed"], raw.file, raw.at("seed"))
        if raw.file not in self.file_seeds:
            self.file_seeds[raw.file] = self.file_seed(raw.file)
        return self.file_seeds[raw.file]

    def file_seed(self, file: str) -> int | str | None:
        try:
            doc = read_yaml(Path(file))
        except RuleError:  # the loader read it a moment ago; gone since: no default
            return None
        if not isinstance(doc, LineDict) or "seed" not in doc:
            return None
        return self.checked_seed(doc["seed"], file, doc.line_of("seed"), whose="the file's")

    def checked_seed(self, value: Any, file: str, line: int, whose: str = "") -> int | str | None:
        if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
            message = f"'seed' must be a whole number or a text, like seed: 42, got {value!r}"
            if whose:  # not a case's: the top-level default of every case in the file
                self.errors.append(RuleError(f"{whose} {message}", file=file, line=line))
            else:
                self.error(message, file, line)
            return None
        return value

    def expected(self, raw: _Raw, unknown: bool) -> tuple[str, Any]:
        """The one expectation of the case: its kind and its checked value."""
        kinds = [k for k in EXPECT_KEYS if k in raw.data]
        if not kinds:
            if not unknown:
                self.error(
                    "say what to expect: one of expect, expect_re, expect_error, "
                    "expect_no_reply (or approve: for a request event)",
                    raw.file,
                    raw.line,
                )
            return "", None
        if len(kinds) > 1:
            self.error(
                f"one expectation per case, got {' and '.join(kinds)} (split it into two cases)",
                raw.file,
                raw.at(kinds[1]),
            )
            return "", None
        kind = kinds[0]
        return kind, self.expectation(kind, raw.data[kind], raw.file, raw.at(kind))

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
                encode(preset, name, self.max_value_bytes)
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


def load_cases(
    settings: Settings, root: Path, extensions: Sequence[Extension] = ()
) -> tuple[list[Case], list[str]]:
    """Load ``root`` with the real loader; its validated cases, or the errors."""
    try:
        rulebook = load_rulebook(
            root,
            build_registry(settings, extensions),
            max_value_bytes=settings.max_value_bytes,
        )
    except RuleErrors as exc:
        return [], [str(e) for e in exc.errors]
    except RuleError as exc:
        return [], [str(exc)]
    parser = _CaseParser(rulebook, settings.tz, settings.max_value_bytes)
    cases = [c for c in (parser.parse(t) for t in rulebook.tests) if c]
    errors = sorted(parser.errors, key=lambda e: (str(e.file), e.line or 0))  # stable: in order
    return cases, [str(e) for e in errors]
