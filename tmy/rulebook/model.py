"""Rules as the engine sees them: frozen, validated, compiled.

The loader turns YAML into these objects once; the engine never sees a raw
dict, so every check happens at load time with a file and a line.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tmy.executors.registry import ExecutorSpec
from tmy.message import REQUEST_EVENTS, adapter_of
from tmy.rulebook.triggers import Trigger, trigger_warnings
from tmy.types import StepHook
from tmy.values.compiled import PathValue, Value

if TYPE_CHECKING:
    from tmy.rulebook.index import TriggerIndex

SCOPES = ("global", "chat", "user")

# The locals a run reads from its message on first use (tmy.engine.context): the event,
# the attachments, the quoted message, a debounced burst, a request's decision. Every run
# has them; a run that never names one pays nothing for it.
CONTEXT_LOCALS = frozenset({
    "EVENT", "EVENT_DATA", "EVENT_RAW", "IMAGES", "ATTACHMENTS", "REPLY_TO", "BURST",
    "APPROVE", "APPROVE_REASON", "SOURCES",
})  # fmt: skip
# Locals every run has (seed 004 + who/where + CONTEXT_LOCALS). A declared variable may
# not use these names.
RUN_LOCALS = frozenset({
    "MAGIC", "QUESTION", "TEXT", "STEP_URI", "STEP_ERROR", "STEP_RESULT", "PRE_ANSWER",
    "POST_ANSWER", "STEP_SUMMARY", "USER", "USER_NAME", "CHAT", "PLATFORM", "NOW", "INPUT",
}) | CONTEXT_LOCALS  # fmt: skip


# Shared by every rule and step that has none (100,000 rules would hold 300,000 empty
# dicts): read-only, so one rule can never change what another one sees.
NOTHING: Mapping[str, Any] = MappingProxyType({})
NO_NAMES: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class VariableDecl:
    """A declared (persistent) variable."""

    name: str
    scope: str
    default: Any
    file: str
    line: int
    rank: bool = False  # ``rank: true``: a leaderboard per platform is kept beside the values


@dataclass(frozen=True, slots=True)
class Filters:
    """Where a rule applies. ``None`` means "anywhere"."""

    platforms: frozenset[str] | None = None
    chats: frozenset[str] | None = None
    private: bool | None = None  # True: private chats only; False: group chats only
    admin_only: bool = False
    mention: bool = False  # in group chats: only when the bot is @-mentioned or replied to

    @property
    def is_open(self) -> bool:
        return self == OPEN_FILTERS

    def admits(self, message: Any) -> bool:
        """Whether the rule answers ``message`` (``admin_only``: a global admin, or an
        admin of this chat by the platform's roles, ``message.chat_admin``)."""
        if self.platforms is not None and not self.on_platform(message.platform):
            return False
        if self.chats is not None and message.chat not in self.chats:
            return False
        if self.private is not None and bool(message.private) != self.private:
            return False
        if self.mention and not (message.private or message.mentions_bot):
            return False  # a private chat is always addressed to the bot
        return not (self.admin_only and not (message.is_admin or message.chat_admin))

    def on_platform(self, platform: str) -> bool:
        """``platforms:`` names ``platform``, or the bridge it came through
        (``satori`` admits ``satori:qq``; :func:`tmy.message.adapter_of`)."""
        assert self.platforms is not None
        return platform in self.platforms or adapter_of(platform) in self.platforms

    def admits_event(self, message: Any) -> bool:
        """:meth:`admits` for a platform event: ``mention`` does not apply (an event
        mentions nobody)."""
        if not self.mention:
            return self.admits(message)
        return self.refusal(message, event=True) is None

    def refusal(self, message: Any, *, event: bool = False) -> str | None:
        """Why these filters refuse ``message`` (one short phrase), or None when admitted.

        Used where a refusal must be explained (unmatched log line, ``explain``);
        :meth:`admits` stays the fast path. ``event``: ``message`` is a platform
        event, which ``mention`` does not concern.
        """
        if self.platforms is not None and not self.on_platform(message.platform):
            return f"it answers on {', '.join(sorted(self.platforms))} only"
        if self.chats is not None and message.chat not in self.chats:
            return f"it answers in chats {', '.join(sorted(self.chats))} only"
        if self.private is not None and bool(message.private) != self.private:
            return "it answers private chats only" if self.private else "it answers groups only"
        if self.mention and not event and not (message.private or message.mentions_bot):
            return "in groups it answers only when the bot is mentioned or replied to (mention)"
        if self.admin_only and not (message.is_admin or message.chat_admin):
            return "it answers admins only (admin_only)"
        return None


OPEN_FILTERS = Filters()


@dataclass(slots=True, eq=False)
class Step:
    """One executor call in a rule's chain, compiled.

    Built once by the loader and never changed afterwards. Not ``frozen``: a
    frozen dataclass pays an ``object.__setattr__`` per field when built, a
    second of the time it takes to load 100,000 rules.
    """

    index: int
    id: str | None
    spec: ExecutorSpec
    input: Value | None  # None: take STEP_RESULT / INPUT
    list_mode: Value | None  # constant or expression that may compute SHIFT/POPUP/…
    INPUT: PathValue | None
    save: PathValue | None
    when: Value | None
    on_error: str  # "stop" | "continue"
    options: Mapping[str, Value]  # read-only (NOTHING when none)
    timeout: float | None
    uri: str  # STEP_URI: "<rule id>/<step id>" or "<rule id>/<position>"
    lock_roots: tuple[str, ...]  # declared variables read and saved by this step: held locked
    stop: Value | None  # ends the run normally after this step when true
    extras: Mapping[str, Any]  # step keys extensions installed (when_llm: …), validated
    file: str
    line: int
    # the leaderboards (``rank: true`` variables) its values call top()/rank_of() on:
    # fetched before the step runs (cached per run, re-fetched after the run writes one)
    boards: frozenset[str] = frozenset()
    # set by the loader: a pure step that reads and saves one variable nothing else
    # locks, applied as one atomic store update (no lock round-trips)
    atomic_update: bool = False
    meter: Any = None  # this executor's step-duration histogram, looked up on first use
    # set by the loader: the Constant an ADJUST step without INPUT, save or options
    # returns (no input to compute, nothing to store): run without an executor call
    constant: Any = None
    # (step key, its hook) for each extension key the step carries that has a hook,
    # resolved from the registry once at load time (the engine never looks them up)
    hooks: tuple[tuple[str, StepHook], ...] = ()
    # the engine's, worked out at the first run (tmy.engine.execute): the options every run
    # of the step gets (a dict, copied per run) when they are constants nothing can change;
    # False when some are computed (evaluated per run); None: not worked out yet
    fixed_options: Any = None

    @property
    def plugin(self) -> str:
        return self.spec.name


@dataclass(slots=True, eq=False)
class Rule:
    """A compiled rule; like :class:`Step`, immutable by convention (built once)."""

    id: str
    triggers: tuple[Trigger, ...]
    steps: tuple[Step, ...]
    priority: int
    case_sensitive: bool
    on_error: Value | None
    filters: Filters
    session: float  # seconds a follow-up reaches this rule without a trigger (0: off)
    description: str
    intent: str
    extras: Mapping[str, Any]  # rule keys extensions installed (schedule:, tool:), validated
    file: str
    line: int
    cooldown: Cooldown | None = None
    # Atomic span: the declared variables a step reads and a later step writes
    # (plus what the steps in between lock or write), held from step
    # ``atomic_span[0]`` to ``atomic_span[1]`` inclusive; ``()`` when none.
    atomic_vars: tuple[str, ...] = ()
    atomic_span: tuple[int, int] = (0, -1)
    # a scheduled rule: the declared variables its steps may write. A scheduled run holds
    # their locks for the whole run (its writes are committed at its end, fenced by its
    # claim), so every other writer of them takes their lock too and no update is lost
    scheduled_locks: tuple[str, ...] = ()
    # declared variables the run reads, fetched in one round-trip when it starts
    prefetch: tuple[str, ...] = ()
    # ``events:``: the platform events (tmy.message.EVENT_KINDS) the rule answers
    events: tuple[str, ...] = ()
    # ``session: {seconds, debounce}``: a burst of session follow-ups is answered once,
    # after this many seconds without a new one (0: each follow-up at once)
    debounce: float = 0.0


@dataclass(frozen=True, slots=True)
class Cooldown:
    """``cooldown:`` — within ``seconds`` of a run the rule answers ``reply`` instead."""

    seconds: float
    per: str  # "user" | "chat" | "global"
    reply: Value | None  # None: no reply at all


@dataclass(frozen=True, slots=True)
class RuleTest:
    """One case of a rules file's ``tests:`` (validated and run by tmy/ruletests.py)."""

    file: str
    line: int
    case: dict[str, Any]


def dead_trigger_warning(rule: Rule, trig: Trigger, winner: Rule, winning: Trigger) -> str:
    """``Rulebook.warnings``' line for a trigger of ``rule`` that ``winner`` always beats
    (``check`` drops it when it reports the same pair as a collision between files)."""
    return (
        f"{rule.file}:{rule.line}: trigger {trig.source!r} of rule {rule.id!r} can never fire: "
        f"rule {winner.id!r} ({winner.file}:{winner.line}) wins with {winning.source!r}"
    )


def event_warnings(rulebook: Rulebook) -> Iterator[str]:
    """``check``'s lines about ``events:``: a rule an earlier rule listing the same event
    always takes first (its filters admit everything), and a rule answering a request
    event none of whose steps saves APPROVE (the request then stays pending)."""
    for kind, rules in rulebook.events.items():
        first = next((r for r in rules if r.filters.is_open), None)
        for rule in rules:
            if first is not None and rule is not first and rules.index(rule) > rules.index(first):
                yield (
                    f"{rule.file}:{rule.line}: rule {rule.id!r} never gets the event {kind}: "
                    f"rule {first.id!r} ({first.file}:{first.line}) lists it first and its "
                    "filters admit every one"
                )
            if kind in REQUEST_EVENTS and not any(
                s.save is not None and s.save.root == "APPROVE" for s in rule.steps
            ):
                yield (
                    f"{rule.file}:{rule.line}: rule {rule.id!r} answers {kind} but no step "
                    "saves APPROVE (true/false): the request stays pending"
                )


@dataclass(frozen=True)
class Rulebook:
    """Everything loaded from a rules directory."""

    rules: tuple[Rule, ...]
    variables: dict[str, VariableDecl]
    index: TriggerIndex
    files: tuple[str, ...]
    by_id: dict[str, Rule] = field(default_factory=dict)
    has_sessions: bool = False
    has_filters: bool = False  # some rule has platforms/chats/private/admin_only/mention
    # variables some step holds locked across a read and a write: every other
    # write to them (list modes, saves) takes the same lock, or it could land
    # between that step's read and its write and be overwritten
    locked_variables: frozenset[str] = frozenset()
    tests: tuple[RuleTest, ...] = ()
    # event kind -> the rules listing it in ``events:``, in rulebook order (the first
    # whose filters admit an event runs)
    events: dict[str, tuple[Rule, ...]] = field(default_factory=dict)

    @functools.cached_property
    def atomic_report(self) -> tuple[str, ...]:
        """For ``check``: the rules that hold variables locked across steps, and why."""
        out = []
        for r in self.rules:
            if r.atomic_vars:
                first, last = r.atomic_span
                out.append(
                    f"{r.file}:{r.line}: rule {r.id!r} holds {', '.join(r.atomic_vars)} "
                    f"from step {r.steps[first].uri} to {r.steps[last].uri} "
                    "(read in one step, written in a later one; 'atomic: false' opts out)"
                )
        return tuple(out)

    @functools.cached_property
    def warnings(self) -> tuple[str, ...]:
        """What `check` warns about, as ``file:line: …`` lines: triggers that can never
        fire, regex triggers with nested quantifiers, invisible characters in triggers.

        Computed on first use (``check``, or the daemon once it is serving):
        the analysis costs a third of a second per 100,000 rules of start-up.
        """
        dead = (dead_trigger_warning(*found) for found in self.index.dead_triggers())
        lint = (
            f"{r.file}:{t.line or r.line}: {warning}"
            for r in self.rules
            for t in r.triggers
            for warning in trigger_warnings(t)
        )
        return (*dead, *lint, *event_warnings(self))
