"""The chain scheduler's units (tmy/engine/scheduler.py, run.py, execute.py).

Step hooks resolved from the registry (skip, repeat), ``when:``, ``stop:``,
``on_error``, ``save: STEP_ERROR``, timeouts, option checks at run time, the
executor context, list modes, atomic updates and atomic spans — each through
real objects: a real Registry with a test extension installed, rules loaded
by the real loader, a SQLite store in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tmy.config import Settings
from tmy.engine.core import Engine
from tmy.engine.run import StepContext
from tmy.engine.services import Services
from tmy.executors import default_registry
from tmy.executors.registry import ExecutorSpec, Option, Registry
from tmy.extension import Extension, StepKey
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Step
from tmy.store import MISSING, Store
from tmy.types import StepHook


class SkipUnless(StepHook):
    """``skip_unless: WORD``: the step runs only when the message contains WORD."""

    async def before(self, run: Any, step: Step, record: StepRecord) -> bool:
        return step.extras["skip_unless"] in run.message.text


class Repeat(StepHook):
    """``repeat: N``: the step runs N times in all (``again`` after each run)."""

    async def again(self, run: Any, step: Step, record: StepRecord, count: int) -> bool:
        record.extra["count"] = count
        return count < step.extras["repeat"]


async def _sleep(value: Any, cfg: dict[str, Any], ctx: Any) -> Any:
    await asyncio.sleep(cfg["seconds"])
    return value


async def _context(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    """Reads and writes through the executor context."""
    before = await ctx.get("tally")
    await ctx.set("tally", before + 1)
    return f"{ctx.uri} {ctx.message.user} {ctx.record.plugin} {before}"


async def _options_seen(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    """Says what options it got, then changes them (a run must not change the next one's)."""
    seen = f"{cfg['word']} {cfg['words']} {cfg['count']} {cfg['extra']}"
    cfg["word"] = "changed"
    if cfg["words"] is not None:
        cfg["words"].append("changed")
    cfg["extra"] = "changed"
    assert (ctx.message, ctx.rule, ctx.services) == (
        ctx.run.message,
        ctx.run.rule,
        ctx.run.services,
    )
    return seen


def _executors(settings: Any) -> list[ExecutorSpec]:
    return [
        ExecutorSpec("SLEEP", _sleep, {"seconds": Option((int, float), default=0)}),
        ExecutorSpec("CONTEXT", _context),
        ExecutorSpec(
            "OPTIONS",
            _options_seen,
            {
                "word": Option(str),
                "words": Option(list, default=None),
                "count": Option(int, default=0),
                "extra": Option(str, default="default"),
            },
        ),
    ]


TEST_EXTENSION = Extension(
    name="scheduler-test",
    executors=_executors,
    step_keys={
        "skip_unless": StepKey(str, SkipUnless()),
        "repeat": StepKey(int, Repeat()),
        "note": StepKey(str),  # a key without a hook
    },
)


def registry() -> Registry:
    return default_registry([TEST_EXTENSION])


def make_engine(rules: str, store: Store, settings: Settings | None = None) -> Engine:
    reg = registry()
    rulebook = load_sources([(Path("rules.yaml"), rules)], reg)
    return Engine(rulebook, Services(settings or Settings(), store, reg))


async def ask(engine: Engine, text: str, user: str = "u1") -> Reply:
    return await engine.handle(Message(text, user=user, platform="test"))


# -- hooks ------------------------------------------------------------------------------------


def test_hooks_are_resolved_once_at_load_time() -> None:
    book = load_sources(
        [
            (
                Path("r.yaml"),
                """
rules:
  - id: r
    triggers: [r]
    steps:
      - {plugin: ADJUST, skip_unless: x, repeat: 2, note: hi}
      - {plugin: ADJUST, note: only}
""",
            )
        ],
        registry(),
    )
    first, second = book.rules[0].steps
    assert [key for key, _ in first.hooks] == ["skip_unless", "repeat"]  # the order installed
    assert first.extras == {"skip_unless": "x", "repeat": 2, "note": "hi"}
    assert second.hooks == () and second.extras == {"note": "only"}


async def test_a_hook_before_a_step_can_skip_it(store: Store) -> None:
    rules = """
rules:
  - id: r
    triggers: ["go *"]
    steps:
      - {plugin: ADJUST, input: "ran", skip_unless: please}
"""
    engine = make_engine(rules, store)
    ran = await ask(engine, "go please")
    assert ran.text == "ran" and not ran.steps[0].skipped
    skipped = await ask(engine, "go now")
    assert skipped.steps[0].skipped and skipped.steps[0].extra["skipped_by"] == "skip_unless"
    assert skipped.text == "now"  # STEP_RESULT stays QUESTION


async def test_a_hook_after_a_step_can_repeat_it(store: Store) -> None:
    rules = """
variables:
  n: {default: 0}
rules:
  - id: r
    triggers: [count]
    steps:
      - {plugin: ADJUST, input: "?= n + 1", save: n, repeat: 3}
"""
    engine = make_engine(rules, store)
    reply = await ask(engine, "count")
    assert reply.text == "3" and reply.steps[0].extra["count"] == 3
    assert len(reply.steps) == 1  # one record for the step, however often it ran


# -- when, stop, on_error ---------------------------------------------------------------------


async def test_when_false_skips_and_stop_ends_the_run_normally(store: Store) -> None:
    rules = """
rules:
  - id: r
    triggers: ["t *"]
    steps:
      - {plugin: ADJUST, input: "skipped", when: '?= QUESTION == "no"'}
      - {plugin: ADJUST, input: "first", stop: '?= QUESTION == "stop"'}
      - {plugin: ADJUST, input: "second"}
"""
    engine = make_engine(rules, store)
    stopped = await ask(engine, "t stop")
    assert stopped.text == "first" and stopped.stopped and stopped.error is None
    assert stopped.steps[0].extra["skipped_by"] == "when"
    assert [r.uri for r in stopped.steps] == ["r/0", "r/1"]
    assert (await ask(engine, "t go")).text == "second"


async def test_on_error_continue_keeps_going_and_stop_fails_the_run(store: Store) -> None:
    rules = """
rules:
  - id: soft
    triggers: [soft]
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0", on_error: continue}
      - {plugin: ADJUST, input: "after {STEP_ERROR}"}
  - id: hard
    triggers: [hard]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0"}
      - {plugin: ADJUST, input: "never"}
  - id: said
    triggers: [said]
    steps:
      - {plugin: ADJUST, input: "", save: STEP_ERROR}
      - {plugin: ADJUST, input: "no error", save: STEP_ERROR}
      - {plugin: ADJUST, input: "never"}
"""
    engine = make_engine(rules, store)
    soft = await ask(engine, "soft")
    assert soft.error is None and soft.steps[0].error  # the failed step's error is recorded
    assert soft.text == "after "  # and STEP_ERROR is reset when the next step starts
    hard = await ask(engine, "hard")
    assert hard.error and hard.text == f"failed: {hard.error}" and len(hard.steps) == 1
    said = await ask(engine, "said")
    assert said.error == "no error" and len(said.steps) == 2


async def test_a_step_over_its_timeout_fails_with_its_uri(store: Store) -> None:
    rules = """
rules:
  - id: slow
    triggers: [slow]
    steps:
      - {id: wait, plugin: SLEEP, seconds: 30, timeout: 0.05}
"""
    engine = make_engine(rules, store)
    reply = await ask(engine, "slow")
    assert reply.error == "step slow/wait (SLEEP) timed out after 0.05 s"


async def test_a_computed_option_of_the_wrong_type_fails_at_run_time(store: Store) -> None:
    rules = """
rules:
  - id: r
    triggers: ["r *"]
    steps:
      - {plugin: SLEEP, seconds: "{QUESTION}"}
"""
    engine = make_engine(rules, store)
    reply = await ask(engine, "r soon")
    assert reply.error == "option 'seconds' of SLEEP must be int or float, got str"


async def test_constant_options_are_the_same_at_every_run_whatever_a_run_does(
    store: Store,
) -> None:
    """Options that are all constants are worked out once (tmy.engine.execute): each run
    still gets its own copy — and of a constant list — as when they were evaluated per run;
    a computed option is evaluated per run."""
    rules = """
variables:
  n: {default: 1}
rules:
  - id: fixed
    triggers: [fixed]
    steps:
      - {plugin: OPTIONS, word: hi, words: [a, b], count: 2}
  - id: computed
    triggers: [computed]
    steps:
      - {plugin: OPTIONS, word: hi, words: [a], count: "?= n", save: n}
"""
    engine = make_engine(rules, store)
    for _ in range(3):
        assert (await ask(engine, "fixed")).text == "hi ['a', 'b'] 2 default"
    step = engine.rulebook.rules[0].steps[0]
    assert step.fixed_options is False  # a constant list: copied per run, so evaluated per run
    rules = rules.replace("words: [a, b], ", "")
    engine = make_engine(rules, store)
    for _ in range(3):
        assert (await ask(engine, "fixed")).text == "hi None 2 default"
    assert engine.rulebook.rules[0].steps[0].fixed_options == {
        "word": "hi",
        "words": None,
        "count": 2,
        "extra": "default",
    }
    await store.set("var/global/n", 5)
    assert (await ask(engine, "computed")).text == "hi ['a'] 5 default"
    assert engine.rulebook.rules[1].steps[0].fixed_options is False


# -- the executor's context, list modes, atomic updates and spans -----------------------------


async def test_an_executor_reads_and_writes_variables_through_its_context(store: Store) -> None:
    rules = """
variables:
  tally: {default: 10}
rules:
  - id: ctx
    triggers: [ctx]
    steps:
      - {id: look, plugin: CONTEXT}
"""
    engine = make_engine(rules, store)
    assert (await ask(engine, "ctx")).text == "ctx/look u1 CONTEXT 10"
    assert (await ask(engine, "ctx")).text == "ctx/look u1 CONTEXT 11"


async def test_list_modes_take_members_in_turn(store: Store) -> None:
    rules = """
variables:
  deck: {default: [a, b, c]}
rules:
  - id: deal
    triggers: [deal]
    steps:
      - {plugin: ADJUST, input: LOOPBACK, INPUT: deck}
"""
    engine = make_engine(rules, store)
    assert [(await ask(engine, "deal")).text for _ in range(4)] == ["a", "b", "c", "a"]


async def test_a_pure_read_modify_write_is_one_atomic_update(store: Store) -> None:
    rules = """
variables:
  hits: {default: 0}
rules:
  - id: hit
    triggers: [hit]
    steps:
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
"""
    engine = make_engine(rules, store)
    (step,) = engine.rulebook.by_id["hit"].steps
    assert step.atomic_update and "hits" not in engine.rulebook.locked_variables
    replies = await asyncio.gather(*(ask(engine, "hit", user=f"u{i}") for i in range(20)))
    assert sorted(int(r.text) for r in replies) == list(range(1, 21))


async def test_an_atomic_span_writes_all_or_nothing(store: Store) -> None:
    rules = """
variables:
  points: {default: 0}
  stamp: {default: ""}
rules:
  - id: checkin
    triggers: ["checkin *"]
    steps:
      - {plugin: ADJUST, input: "already", stop: "?= stamp == QUESTION"}
      - {plugin: ADJUST, input: "?= points + 1", save: points}
      - {plugin: ADJUST, input: '?= 1 / 0 if QUESTION == "crash" else QUESTION', save: stamp}
      - {plugin: ADJUST, input: "{points} {stamp}"}
"""
    engine = make_engine(rules, store)
    rule = engine.rulebook.by_id["checkin"]
    assert rule.atomic_vars == ("points", "stamp") and rule.atomic_span == (0, 2)
    crashed = await ask(engine, "checkin crash")
    assert crashed.error is not None
    assert await store.get("var/global/points") is MISSING  # the increment was not applied
    ok = await ask(engine, "checkin monday")
    assert ok.text == "1 monday"
    assert await store.get("var/global/points") == 1
    assert await store.get("var/global/stamp") == "monday"
    assert (await ask(engine, "checkin monday")).text == "already"
