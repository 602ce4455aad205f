"""The LLM answerer as an extension: everything it adds to tmy, stated in one object.

* the ``LLM`` executor (its load-time check knows the configured models);
* step keys ``when_llm`` / ``while_llm`` (judged scenes, with their hooks) and
  ``max_loops``; the rule key ``tool`` (a rule the model may call);
* the commands ``ctx`` and ``budget``;
* a lifespan that creates the app's :class:`~tmy.llm.runtime.Runtime`
  (``services.state["llm"]``, read through :func:`~tmy.llm.runtime.runtime_of`),
  flushes its usage counters while the app runs and at its end
  (:mod:`tmy.llm.tally`), and closes its aiohttp session (:mod:`tmy.llm.transport`);
* a serving lifespan that says once, when ``serve`` is up (one-shot commands stay
  quiet), which model answers — or warns that the TESTONLY mock does (:func:`announce`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog

from tmy.executors.registry import ExecutorSpec
from tmy.extension import Extension, RuleKey, StepKey
from tmy.llm import executor, judged, tools
from tmy.llm.commands import COMMANDS
from tmy.llm.runtime import STATE_KEY, Runtime, runtime_of
from tmy.llm.tally import flushing
from tmy.llm.transport import AiohttpPost
from tmy.types import Services

log = structlog.get_logger("tmy.llm")


def executors(settings: Any) -> tuple[ExecutorSpec, ...]:
    """The ``LLM`` executor, checked against the validated ``llm:`` section (model names).

    ``settings.llm`` is the frozen LLMConfig tmy.config checked once; nothing here reads config.
    """
    return (
        ExecutorSpec(
            "LLM",
            executor.llm_step,
            options=executor.OPTIONS,
            takes=str,
            check=executor.make_check(settings.llm, settings.rules, settings.sections),
            check_computed=True,
            doc="the LLM answerer: asks a model, answers by the output contract",
        ),
    )


@contextlib.asynccontextmanager
async def lifespan(services: Services) -> AsyncIterator[Runtime]:
    """The app's LLM runtime: the validated config, the services, the usage counters
    flushed every ``llm.budget.flush_interval`` and at the end, the aiohttp session
    (closed at the end; opened by the first request)."""
    config = services.settings.llm
    runtime = Runtime.for_app(config, services)
    try:
        async with flushing(runtime.tally, config.usage_flush_interval):
            yield runtime
    finally:
        if isinstance(runtime.post, AiohttpPost):
            await runtime.post.aclose()


@contextlib.asynccontextmanager
async def serving(services: Services) -> AsyncIterator[None]:
    """Entered once the daemon serves: say which model answers."""
    announce(services)
    yield


def announce(services: Services) -> None:
    """What ``serve`` logs once it is up (one-shot commands stay quiet): who answers."""
    model = runtime_of(services).config.default_model
    if model.is_mock:
        log.warning(
            "llm.mock",
            detail="no LLM API key is configured: the default model is the TESTONLY mock. "
            "Set OPENAI_API_KEY (or TMY_LLM_API_KEY, with OPENAI_BASE_URL / TMY_LLM_MODEL) "
            "or configure llm.models in config/tmy.yaml.",
        )
    else:
        log.info("llm.model", default=model.describe())


EXTENSION = Extension(
    name=STATE_KEY,
    executors=executors,
    rule_keys={"tool": RuleKey(tools.validate_tool, locals=tools.tool_locals)},
    step_keys={
        "when_llm": StepKey(judged.validate_judgement, judged.WhenLLM()),
        "while_llm": StepKey(judged.validate_judgement, judged.WhileLLM()),
        "max_loops": StepKey(judged.validate_max_loops),
    },
    commands=COMMANDS,
    lifespan=lifespan,
    serving=serving,
    doc="the LLM answerer: the LLM step, judged scenes, tools, ctx and budget (docs/llm.md)",
)
