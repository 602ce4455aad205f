"""One exchange with a model: send (budget, usage, inspector), the tool loop, contract repair.

Every model request of a step — Q&A, judgement, each tool turn, each repair —
goes through :func:`send`, so budgets, usage counters, ``ask --json`` details
and the ``ctx`` inspector see all of them alike, whatever model answers (the
TESTONLY mock included).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from tmy import logs, metrics
from tmy.config.llm import ModelConfig
from tmy.errors import ExecutorError
from tmy.llm import tools as toolkit
from tmy.llm.client import Completion, LLMError, Request, complete
from tmy.llm.contracts import Contract, ContractError, clean
from tmy.llm.runtime import Runtime
from tmy.llm.usage import check_budget, count, today
from tmy.types import StepContext

log = structlog.get_logger("tmy.llm")

# Set by the ``ctx`` inspector: requests are appended here instead of being sent.
CAPTURE: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "tmy_llm_capture", default=None
)


def capturing() -> bool:
    """Under the ``ctx`` inspector: requests are captured, and nothing may be written."""
    return CAPTURE.get() is not None


class DryRun(ExecutorError):
    """The inspector captured a request; the run stops here, nothing was sent."""


@dataclass
class Job:
    """One step's (or one judgement's) conversation with a model."""

    rt: Runtime
    ctx: StepContext
    model: ModelConfig
    # time.monotonic() value, enforced by a timer the Job's maker holds around its
    # conversation (the step's bound, a fold's, a judgement's: client.complete relies on it)
    deadline: float
    scene: str
    stats: dict[str, Any] = field(default_factory=dict)
    prefix_len: int = 0  # messages that never change: system, few-shot examples
    history_len: int = 0  # history messages after them (they only ever grow at the end)

    def __post_init__(self) -> None:
        self.stats.update(
            scene=self.scene,
            model=self.model.name,
            calls=[],
            prompt_tokens=0,
            completion_tokens=0,
            cached_tokens=0,
            retries=0,
            repairs=0,
            tool_calls=0,
        )

    def note(self, done: Completion) -> None:
        """Add one completion to the step's details (``ask --json``)."""
        s = self.stats
        s["model"] = done.model
        s["calls"].append(
            {
                "model": done.model,
                "prompt_tokens": done.usage.prompt,
                "completion_tokens": done.usage.completion,
                "cached_tokens": done.usage.cached,
                "latency_ms": done.latency_ms,
                "requests": done.requests,
                "retries": done.retries,
                **({"waited_s": done.waits} if done.waits else {}),
                **({"failed_models": done.failures} if done.failures else {}),
            }
        )
        s["prompt_tokens"] += done.usage.prompt
        s["completion_tokens"] += done.usage.completion
        s["cached_tokens"] += done.usage.cached
        s["retries"] += done.requests - 1


async def send(job: Job, req: Request) -> Completion:
    """One completion: captured by the inspector, or budget-checked, sent and counted."""
    capture = CAPTURE.get()
    if capture is not None:
        capture.append(
            {
                "uri": job.ctx.uri,
                "scene": job.scene,
                "model": job.model,
                "body": orjson.loads(orjson.dumps(req.body(job.model))),
                "prefix_len": job.prefix_len,
                "history_len": job.history_len,
            }
        )
        raise DryRun("dry run: the request was captured by the inspector, not sent")
    rt, message = job.rt, job.ctx.message
    day, config = today(rt.tz), rt.config
    await check_budget(rt.services.store, config, message, day, rt.tally)  # (none set: no read)
    try:
        done = await complete(rt.post, config, job.model, req, job.deadline)
    except LLMError as exc:
        job.stats.setdefault("errors", []).append(str(exc))
        metrics.llm_request(job.model.name)  # a failed call: no tokens to count
        log.warning("llm.failed", uri=job.ctx.uri, model=job.model.name, error=str(exc))
        raise
    usage = done.usage
    metrics.llm_request(done.model, usage.prompt, usage.completion, usage.cached, done.requests - 1)
    count(rt.tally, message, day, usage, done.model, done.latency_ms)
    if rt.tally.write_through:  # a budget: other daemons must see these tokens first
        await rt.tally.flush()
    job.note(done)
    _log_call(job, done)
    return done


def _log_call(job: Job, done: Completion) -> None:
    """The ``llm.call`` line. In a run (a trace id) its dict is built once in its final
    order and written by :func:`tmy.logs.emit_info` — the line structlog would write,
    byte for byte, without its bound-logger layers (~7 µs of every call)."""
    trace = logs.TRACE.get()
    if not logs.INFO_ENABLED:
        return
    usage = done.usage
    if trace is None:  # outside a run (a tool, a test): no trace_id in the line
        log.info(
            "llm.call",
            uri=job.ctx.uri,
            scene=job.scene,
            model=done.model,
            prompt_tokens=usage.prompt,
            completion_tokens=usage.completion,
            cached_tokens=usage.cached,
            latency_ms=done.latency_ms,
            requests=done.requests,
            tool_calls=len(done.tool_calls),
        )
        return
    logs.emit_info(
        {
            "uri": job.ctx.uri,
            "scene": job.scene,
            "model": done.model,
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "cached_tokens": usage.cached,
            "latency_ms": done.latency_ms,
            "requests": done.requests,
            "tool_calls": len(done.tool_calls),
            "event": "llm.call",
            "trace_id": trace,
            "level": "info",
            "timestamp": "",
        }
    )


@dataclass(slots=True)
class Plan:
    """What to ask and how: the messages so far, the contract, the tools."""

    messages: list[dict[str, Any]]
    system_for: Callable[[str | None], str]  # the system prompt, with a retry hint or not
    contract: Contract
    tools: list[toolkit.Tool] = field(default_factory=list)
    protocol: str = "native"
    permissions: list[str] = field(default_factory=list)
    retries: int = 2
    max_turns: int = 12
    temperature: float | None = None
    default_temperature: float | None = None
    max_tokens: int | None = None
    stream: bool | None = None
    # where the answer's text goes as it streams (the message's stream sink); None: nowhere
    on_delta: Callable[[str], Awaitable[None]] | None = None

    def request(self) -> Request:
        """The next request: the messages so far, the tools in the chosen protocol."""
        native = (
            [t.native() for t in self.tools if t.offered] if self.protocol == "native" else None
        )
        return Request(
            messages=list(self.messages),
            tools=native or None,
            temperature=self.temperature,
            default_temperature=self.default_temperature,
            max_tokens=self.max_tokens,
            json_schema=self.contract.json_schema,
            stream=self.stream,
            on_delta=self.on_delta,
        )


async def converse(job: Job, plan: Plan) -> tuple[Any, str]:
    """Ask until the answer meets the contract: (parsed value, answer text).

    A failed contract re-asks with the validation error as the retry hint in the
    system prompt (seed 000), keeping tool results already gathered. Only the first
    attempt streams to the message's sink: a repaired answer is not appended to the
    one already shown (the adapter finishes with the run's final reply). A step
    without a declared contract still needs a usable (non-empty) answer: when
    none comes the error says the answer was unusable, not that a contract failed.
    """
    last: ContractError | None = None
    for attempt in range(plan.retries + 1):
        if attempt:
            assert last is not None
            job.stats["repairs"] += 1
            system = {"role": "system", "content": plan.system_for(plan.contract.hint(last, ""))}
            if plan.messages and plan.messages[0].get("role") == "system":
                plan.messages[0] = system
            else:
                plan.messages.insert(0, system)
            plan.on_delta = None
        # no tools: one request is the whole loop (the usual step: tool_loop's frame and
        # its table of tools by name spared)
        if plan.tools:
            text = await tool_loop(job, plan)
        else:
            text = (await send(job, plan.request())).content
        try:
            return plan.contract.parse(text), clean(text)
        except ContractError as exc:
            last = exc
            log.info("llm.contract_failed", uri=job.ctx.uri, attempt=attempt + 1, error=str(exc))
    attempts = plan.retries + 1
    if plan.contract.kind == "text":  # no contract was declared: nothing to "meet"
        raise ExecutorError(f"the model's answer was unusable after {attempts} attempts: {last}")
    raise ExecutorError(
        f"the model's answer did not meet the output contract after {attempts} attempts: {last}"
    )


async def tool_loop(job: Job, plan: Plan) -> str:
    """Send, run the calls the model makes, send the results back; until it answers."""
    by_name = {t.name: t for t in plan.tools}
    for turn in range(1, plan.max_turns + 1):
        done = await send(job, plan.request())
        error = ""
        if plan.tools and plan.protocol == "text":
            calls, answer, error = toolkit.parse_text_calls(done.content)
        else:
            calls, answer = done.tool_calls, done.content
        if not plan.tools or (not calls and not error):
            return answer
        if turn == plan.max_turns:
            names = ", ".join(c["name"] for c in calls) or "an invalid call"
            raise ExecutorError(
                f"the model was still calling tools ({names}) after "
                f"{plan.max_turns} turns (max_tool_turns)"
            )
        ids = [f"call_{turn}_{i}" for i in range(1, len(calls) + 1)]
        job.stats["tool_calls"] += len(calls)
        started = time.perf_counter()
        if plan.protocol == "native":
            plan.messages.append(
                {
                    "role": "assistant",
                    "content": done.content or None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for cid, c in zip(ids, calls, strict=True)
                    ],
                }
            )
            for cid, call in zip(ids, calls, strict=True):
                result = await toolkit.run_call(job.ctx, by_name, plan.permissions, call, cid)
                plan.messages.append({"role": "tool", "tool_call_id": cid, "content": result})
        else:
            plan.messages.append({"role": "assistant", "content": done.content})
            blocks = [f'<tool_result name="error">\n{error}\n</tool_result>'] if error else []
            for cid, call in zip(ids, calls, strict=True):
                result = await toolkit.run_call(job.ctx, by_name, plan.permissions, call, cid)
                blocks.append(
                    f'<tool_result id="{cid}" name="{call["name"]}">\n{result}\n</tool_result>'
                )
            plan.messages.append({"role": "user", "content": "\n".join(blocks)})
        log.info(
            "llm.tools",
            uri=job.ctx.uri,
            turn=turn,
            calls=len(calls),
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
    raise AssertionError("unreachable")  # pragma: no cover
