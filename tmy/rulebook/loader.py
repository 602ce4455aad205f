"""Load and validate a rules directory into a :class:`Rulebook`.

Every problem is collected (not just the first) and reported as
``file:line: what is wrong — what to do``. A rulebook either loads whole or
not at all, so a broken file never half-replaces the running rules.

The work is layered: :mod:`tmy.rulebook.fields` reads one field,
:mod:`tmy.rulebook.steps` compiles a step, :mod:`tmy.rulebook.rules` a rule,
:mod:`tmy.rulebook.atomic` decides what to lock; this module reads the files,
their ``variables:`` and ``tests:``, and puts the rulebook together. The rule
and step keys extensions add (``schedule:``, ``when_llm:``) come from the
registry the loader is given, never from a module-level table.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tmy.errors import RuleError, RuleErrors, StoreError
from tmy.executors.registry import Registry
from tmy.media.local import MEDIA_DIR
from tmy.rulebook import atomic
from tmy.rulebook.closed import closed
from tmy.rulebook.cluster import check_store
from tmy.rulebook.fields import plain, unknown_key
from tmy.rulebook.heap import TRIM_AFTER, give_back_freed_heap
from tmy.rulebook.index import TriggerIndex
from tmy.rulebook.model import (
    OPEN_FILTERS,
    RUN_LOCALS,
    SCOPES,
    Rule,
    Rulebook,
    RuleTest,
    VariableDecl,
)
from tmy.rulebook.rules import PLAIN_RULE_KEYS, RuleCompiler, check_key_claims
from tmy.store.codec import MAX_VALUE_BYTES, encode
from tmy.yamlfile.source import HANDED_OVER, LineDict, LineList, read_yaml

FILE_KEYS = ("variables", "rules", "tests", "seed")  # seed: the rule tests' default (tmy.ruletests)
VARIABLE_KEYS = ("scope", "default", "description", "rank")
_NAME_RE = re.compile(r"[^\W\d]\w*")
# cron's rule key (tmy.cron.EXTENSION): a scheduled run holds every variable its rule may
# write for the whole run, so the rulebook must know which rules are scheduled
SCHEDULE_KEY = "schedule"


def rule_files(root: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` under ``root`` (or ``root`` itself), in a stable order.

    ``root``'s ``media/`` holds the files replies may send (:mod:`tmy.media.local`),
    not rules: a YAML file there is media, never loaded as rules."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise RuleError(f"rules directory {str(root)!r} does not exist")
    media = root / MEDIA_DIR
    files = [
        p
        for p in root.rglob("*")
        if p.suffix in (".yaml", ".yml") and p.is_file() and not p.is_relative_to(media)
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_rulebook(
    root: Path | str,
    registry: Registry,
    *,
    store_url: str | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
) -> Rulebook:
    """Load every rules file under ``root``; RuleErrors listing every problem found.

    With ``store_url``, rules the store cannot run are refused too (see
    :func:`check_store`); a variable's default must fit ``max_value_bytes``
    (``limits.max_value_bytes``), as every value written to the store must.
    """
    root = Path(root)
    files = rule_files(root)
    return load_sources(
        ((p, None) for p in files),
        registry,
        store_url=store_url,
        max_value_bytes=max_value_bytes,
    )


def load_sources(
    sources: Iterable[tuple[Path, str | None]],
    registry: Registry,
    *,
    store_url: str | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
) -> Rulebook:
    """Load rules from (path, text) pairs; ``text=None`` reads the file.

    The cyclic collector is paused meanwhile: loading allocates millions of
    objects that all stay alive, and each collection would walk them all again
    (it more than doubles the time to load 100,000 rules). With ``store_url``,
    rules the store cannot run are refused too (see :func:`check_store`).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        loader = _Loader(registry, max_value_bytes)
        names = []
        for path, text in sources:
            names.append(str(path))
            loader.load_file(path, text)
        rulebook = loader.finish(tuple(names))
    finally:
        if was_enabled:
            gc.enable()
    if len(rulebook.rules) >= TRIM_AFTER:
        give_back_freed_heap()
    if store_url is not None:
        check_store(rulebook, store_url)
    return rulebook


# A rule read: the compiled Rule itself when it is final, enabled and its id is on its
# first line (nearly all: nothing else is kept, so 100,000 rules leave no garbage
# between them), else (file, raw rule or None once final, compiled rule or None, line
# of its id, enabled, variables declared when compiled).
_Entry = Rule | tuple[str, "LineDict | None", "Rule | None", int, bool, int]


class _Loader(RuleCompiler):
    """Reads the files one by one, then compiles every rule once all variables are known."""

    def __init__(self, registry: Registry, max_value_bytes: int = MAX_VALUE_BYTES) -> None:
        super().__init__(registry)
        check_key_claims(registry)
        self.max_value_bytes = max_value_bytes
        self.entries: list[_Entry] = []
        self.tests: list[RuleTest] = []

    def early(self, file: str, raw: LineDict) -> _Entry:
        """Compile ``raw`` now (its errors, if any, are reported by :meth:`finish`, in
        order); keep only the rule when no later declaration can change it."""
        if raw.keys() == PLAIN_RULE_KEYS:  # closed and enabled: kept as itself
            rule = self.plain_rule(raw, file)
            if rule is not None and raw.key_lines.get("id", raw.line) == rule.line:
                return rule
        errors, self.errors = self.errors, []
        try:
            rule = self.compile_rule(raw, file)
        finally:
            errors, self.errors = self.errors, errors
        if rule is None or errors:
            return (file, raw, None, 0, True, 0)
        enabled = raw.get("enabled", True) is not False
        keep = None if closed(rule) else raw
        id_line = raw.line_of("id")
        if keep is None and enabled and id_line == rule.line:
            return rule
        return (file, keep, rule, id_line, enabled, len(self.variables))

    def load_file(self, path: Path, text: str | None) -> None:
        file = str(path)
        handed: list[_Entry] = []

        def sink(raw: LineDict | None) -> None:
            if raw is None:
                handed.clear()  # the file is read again from the start
            else:
                handed.append(self.early(file, raw))

        try:
            doc = read_yaml(path, text, sink)
        except RuleError as exc:
            self.errors.append(exc)
            return
        self.entries += handed
        del handed[:]
        if doc is None:
            return
        if not isinstance(doc, LineDict):
            self.error("a rules file must be a mapping with 'variables:' and/or 'rules:'", file, 1)
            return
        for key in doc:
            if key not in FILE_KEYS:
                self.error(unknown_key("top-level key", key, FILE_KEYS), file, doc.line_of(key))
        variables = doc.get("variables")
        if variables is None:
            pass
        elif not isinstance(variables, LineDict):
            self.error(
                "'variables:' must be a mapping of name -> {scope, default}",
                file,
                doc.line_of("variables"),
            )
        else:
            for name, decl in variables.items():
                self.declare(name, decl, file, variables.line_of(name))
        self.collect_tests(doc, file)
        rules = doc.get("rules")
        if rules is None:
            return
        if not isinstance(rules, LineList):
            self.error("'rules:' must be a list of rules", file, doc.line_of("rules"))
            return
        for i, raw in enumerate(rules):
            if raw is HANDED_OVER:
                continue
            if not isinstance(raw, LineDict):
                self.error(
                    "each rule must be a mapping with id, triggers and steps",
                    file,
                    rules.line_of(i),
                )
                continue
            self.entries.append((file, raw, None, 0, True, 0))

    def collect_tests(self, doc: LineDict, file: str) -> None:
        """Keep ``tests:`` cases with their lines; tmy/ruletests.py validates and runs them."""
        tests = doc.get("tests")
        if tests is None:
            return
        if not isinstance(tests, LineList):
            self.error("'tests:' must be a list of cases like {send: …, expect: …}", file,
                       doc.line_of("tests"))  # fmt: skip
            return
        for i, case in enumerate(tests):
            if not isinstance(case, LineDict):
                self.error("each test case must be a mapping with 'send:'", file, tests.line_of(i))
                continue
            lines = {str(k): case.line_of(k) for k in case}
            self.tests.append(RuleTest(file, tests.line_of(i), {**plain(case), "_lines": lines}))

    def declare(self, name: Any, decl: Any, file: str, line: int) -> None:
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            self.error(
                f"variable name {name!r} must be an identifier (letters, digits, _)", file, line
            )
            return
        if name in RUN_LOCALS:
            self.error(f"variable {name!r} is a built-in run local; pick another name", file, line)
            return
        if decl is None:
            decl = LineDict()
        if not isinstance(decl, LineDict):
            self.error(
                f"variable {name!r}: expected {{scope: global|chat|user, default: …}}", file, line
            )
            return
        for key in decl:
            if key not in VARIABLE_KEYS:
                self.error(
                    unknown_key(f"key of variable {name!r}", key, VARIABLE_KEYS),
                    file,
                    decl.line_of(key),
                )
        scope = decl.get("scope", "global")
        if scope not in SCOPES:
            self.error(
                f"variable {name!r}: scope {scope!r} must be one of {', '.join(SCOPES)}",
                file,
                decl.line_of("scope"),
            )
            scope = "global"  # declared anyway: rules using it must not say "declare it"
        default = plain(decl.get("default"))
        try:
            encode(default, name, self.max_value_bytes)
        except StoreError as exc:
            self.error(
                f"variable {name!r}: the default cannot be stored ({exc}); quote dates and "
                "other special values to keep them as text",
                file,
                decl.line_of("default"),
            )
            default = None
        rank = self.rank(name, decl, scope, default, file)
        prior = self.variables.get(name)
        if prior and (prior.scope, prior.default, prior.rank) != (scope, default, rank):
            self.error(
                f"variable {name!r} is declared again differently (first at "
                f"{prior.file}:{prior.line})",
                file,
                line,
            )
            return
        self.variables[name] = VariableDecl(name, scope, default, file, line, rank)

    def rank(self, name: str, decl: LineDict, scope: str, default: Any, file: str) -> bool:
        """``rank: true`` — a leaderboard of the users' values: only a user-scoped number
        can be ranked (a board orders users by one score each)."""
        rank = decl.get("rank", False)
        if not isinstance(rank, bool):
            self.error(f"variable {name!r}: 'rank' must be true or false, got {rank!r}", file,
                       decl.line_of("rank"))  # fmt: skip
            return False
        if not rank:
            return False
        if scope != "user":
            self.error(
                f"variable {name!r}: rank: true ranks users, so it needs 'scope: user' "
                f"(it is {scope}); a leaderboard orders users by their own value",
                file,
                decl.line_of("scope") if "scope" in decl else decl.line_of("rank"),
            )
        number = isinstance(default, (int, float)) and not isinstance(default, bool)
        if default is not None and not number:
            self.error(
                f"variable {name!r}: rank: true needs a number, but its default is "
                f"{type(default).__name__} {default!r}; use 'default: 0' (or leave it out)",
                file,
                decl.line_of("default"),
            )
        return True  # even when refused: rules calling top() on it need no second error

    def finish(self, files: tuple[str, ...]) -> Rulebook:
        rules: list[Rule] = []
        seen: dict[str, Rule] = {}
        entries, self.entries = self.entries, []
        entries.reverse()
        declared = len(self.variables)
        while entries:  # popping frees each raw rule once compiled: a lower peak
            entry = entries.pop()
            if type(entry) is Rule:  # final: compiled once the file handed it over
                rule, file, raw, seen_vars = entry, entry.file, None, 0
                id_line, enabled = entry.line, True
            else:
                file, raw, rule, id_line, enabled, seen_vars = entry  # type: ignore[misc]
            if rule is None or (raw is not None and seen_vars != declared):
                assert raw is not None
                rule = self.compile_rule(raw, file)
                if rule is None:
                    continue
                id_line, enabled = raw.line_of("id"), raw.get("enabled", True) is not False
            raw = None
            if rule.id in seen:
                first = seen[rule.id]
                self.error(
                    f"duplicate rule id {rule.id!r} (first at {first.file}:{first.line})",
                    file,
                    id_line,
                )
                continue
            seen[rule.id] = rule
            if enabled:
                rules.append(rule)
        if self.errors:
            raise RuleErrors(self.errors)
        index = TriggerIndex(rules)
        declared = set(self.variables)
        scheduled: set[str] = set()
        locked: set[str] = set()
        locking: list[Rule] = []  # the rules holding some lock: all atomic_updates looks at
        events: dict[str, list[Rule]] = {}
        sessions = filters = False
        for r in rules:  # one pass (100,000 rules: each pass costs)
            if r.extras and SCHEDULE_KEY in r.extras:
                r.scheduled_locks = atomic.written(r.steps, declared)
                scheduled.update(r.scheduled_locks)
            held = [name for st in r.steps for name in st.lock_roots]
            if held or r.atomic_vars:
                locking.append(r)
                locked.update(held, r.atomic_vars)
            for kind in r.events:
                events.setdefault(kind, []).append(r)
            sessions = sessions or r.session > 0
            filters = filters or r.filters is not OPEN_FILTERS
        locked |= scheduled
        locked -= atomic.atomic_updates(locking, scheduled)
        return Rulebook(
            events={kind: tuple(listed) for kind, listed in events.items()},
            tests=tuple(self.tests),
            locked_variables=frozenset(locked),
            rules=tuple(rules),
            variables=dict(self.variables),
            index=index,
            files=files,
            # the ids seen are the rules' own unless some rule is disabled: one dict, not two
            by_id=seen if len(seen) == len(rules) else {r.id: r for r in rules},
            has_sessions=sessions,
            has_filters=filters,
        )
