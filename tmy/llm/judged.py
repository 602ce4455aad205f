"""The judged scenes: the ``when_llm`` / ``while_llm`` step hooks (seed 000).

They add judgements to *any* step: ``when_llm:`` asks the model whether a
condition holds before the step runs (branch scene, 1 or 0, temperature 0.1)
and skips it on 0; ``while_llm:`` asks after each run whether to run it again
(loop scene), at most ``max_loops`` times. The content judged is the current
``STEP_RESULT``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from tmy.errors import ExecutorError, TmyError
from tmy.llm import prompt
from tmy.llm.contracts import JUDGE
from tmy.llm.exchange import Job, Plan, converse
from tmy.llm.executor import deadline, model_of
from tmy.llm.runtime import runtime_of
from tmy.types import StepHook
from tmy.values.compiled import Value, compile_value, to_text

if TYPE_CHECKING:
    from tmy.engine.run import Run
    from tmy.message import StepRecord
    from tmy.rulebook.model import Step

log = structlog.get_logger("tmy.llm")

JUDGE_TEMPERATURE = 0.1
DEFAULT_MAX_LOOPS = 10


@dataclass(frozen=True, slots=True)
class Judgement:
    """A compiled ``when_llm`` / ``while_llm`` value."""

    condition: Value
    model: str | None = None
    retries: int = 2


def validate_judgement(raw: Any) -> Judgement:
    """``when_llm: "<condition>"`` or ``{condition, model, retries}`` (checked at load time)."""
    if isinstance(raw, str):
        raw = {"condition": raw}
    if not isinstance(raw, dict):
        raise ValueError('expected a condition in words, or {condition: "…", model: …, retries: …}')
    unknown = set(raw) - {"condition", "model", "retries"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}; allowed: condition, model, retries")
    condition = raw.get("condition")
    if not isinstance(condition, str) or not condition.strip():
        raise ValueError("the condition must be a non-empty text")
    retries = raw.get("retries", 2)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ValueError("retries must be a whole number >= 0")
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise ValueError("model must be a model name")
    return Judgement(compile_value(condition.strip()), model, retries)


def validate_max_loops(raw: Any) -> int:
    """``max_loops:`` (checked at load time): how often ``while_llm`` may run its step."""
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise ValueError("max_loops must be a whole number >= 1")
    return raw


async def judge(
    run: Run, step: Step, record: StepRecord, scene: str, spec: Judgement, extra: str = ""
) -> bool:
    """Ask the model whether ``spec.condition`` holds for the current STEP_RESULT."""
    uri = step.uri
    ctx = run.context(step, uri, record)
    rt = runtime_of(ctx.services)
    config = rt.config
    scope = await ctx.scope(spec.condition.names)
    condition = to_text(spec.condition.evaluate(scope))
    content = to_text(scope.get("STEP_RESULT"))
    seconds = deadline(ctx, {}, config)
    job = Job(rt, ctx, model_of(config, spec.model), time.monotonic() + seconds, scene)
    stats = record.extra.setdefault("when_llm" if scene == "branch" else "while_llm", [])
    stats.append(job.stats)

    def system_for(hint: str | None) -> str:
        return prompt.build_system(
            config.scene_prompts[scene], "", ctx.rule.intent, "", hint, JUDGE.instruction()
        )

    question = f"Condition: {condition}{extra}\n\nContent:\n{content}"
    plan = Plan(
        messages=prompt.layout(system_for(None), [], [], question),
        system_for=system_for,
        contract=JUDGE,
        retries=spec.retries,
        max_turns=1,
        temperature=JUDGE_TEMPERATURE,
    )
    job.prefix_len = 1
    try:
        async with asyncio.timeout(seconds):
            verdict, _ = await converse(job, plan)
    except TimeoutError:
        raise ExecutorError(
            f"the {scene} judgement ran past its deadline of {seconds:g} s"
        ) from None
    except TmyError as exc:
        raise ExecutorError(f"{'when_llm' if scene == 'branch' else 'while_llm'}: {exc}") from None
    job.stats["verdict"] = bool(verdict)
    log.info("llm.judged", uri=uri, scene=scene, condition=condition, verdict=bool(verdict))
    return bool(verdict)


class WhenLLM(StepHook):
    """``when_llm:`` — the branch scene decides whether the step runs."""

    async def before(self, run: Run, step: Step, record: StepRecord) -> bool:
        """Run the step only when the model judges the condition true."""
        return await judge(run, step, record, "branch", step.extras["when_llm"])


class WhileLLM(StepHook):
    """``while_llm:`` — the loop scene decides whether the step runs again."""

    async def again(self, run: Run, step: Step, record: StepRecord, count: int) -> bool:
        """Run the step once more? No after ``max_loops`` runs, else the model decides."""
        limit = step.extras.get("max_loops", DEFAULT_MAX_LOOPS)
        if count >= limit:
            record.extra["loops"] = count
            record.extra["loops_capped"] = True
            log.info("llm.loop_capped", uri=step.uri, loops=count, max_loops=limit)
            return False
        extra = f"\nRuns so far: {count}"
        verdict = await judge(run, step, record, "loop", step.extras["while_llm"], extra)
        record.extra["loops"] = count + (1 if verdict else 0)
        return verdict
