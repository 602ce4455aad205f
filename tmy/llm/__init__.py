"""The LLM answerer: an OpenAI-compatible Q&A executor with judged scenes, contracts and tools.

``install()`` plugs it into the engine through the engine's extension points
(nothing in the core imports this package):

* the ``LLM`` executor, replacing the "not configured" placeholder;
* step keys ``when_llm`` / ``while_llm`` / ``max_loops`` (checked at load time)
  and their hooks; the rule key ``tool`` (a rule the model may call);
* the validated ``llm:`` config and the shared runtime on ``services.extra["llm"]``;
* the ``ctx`` command (the request inspector).

See docs/llm.md for the user guide.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]

_announced = False


def install() -> None:
    """Register everything once; calling it again changes nothing."""
    from tmy.app import EXTENSIONS, SERVE_NOTICES, SERVICE_HOOKS
    from tmy.cli import COMMANDS
    from tmy.llm import executor, inspect, tools
    from tmy.rulebook.loader import RULE_EXTENSIONS, RULE_LOCALS, STEP_EXTENSIONS

    STEP_EXTENSIONS["when_llm"] = executor.validate_judgement
    STEP_EXTENSIONS["while_llm"] = executor.validate_judgement
    STEP_EXTENSIONS["max_loops"] = executor.validate_max_loops
    RULE_EXTENSIONS["tool"] = tools.validate_tool
    RULE_LOCALS["tool"] = tools.tool_locals
    if _register not in EXTENSIONS:
        EXTENSIONS.append(_register)
    if _attach not in SERVICE_HOOKS:
        SERVICE_HOOKS.append(_attach)
    if _announce not in SERVE_NOTICES:
        SERVE_NOTICES.append(_announce)
    COMMANDS["ctx"] = (inspect.configure, inspect.run)


def _register(registry: Any, settings: Any) -> None:
    """Add the LLM executor (validating ``llm:`` now: a bad key stops start-up, named)."""
    from tmy.config.llm import load_config
    from tmy.llm.executor import OPTIONS, llm_step, make_check

    config = load_config(settings.llm)
    registry.add(
        "LLM",
        llm_step,
        options=OPTIONS,
        takes=str,
        check=make_check(config),
        doc="the LLM answerer: asks a model, answers by the output contract",
        replace=True,
    )


def _attach(services: Any) -> None:
    """Attach the runtime and the scene hooks."""
    from tmy.config.llm import load_config
    from tmy.llm.exchange import Runtime
    from tmy.llm.executor import WhenLLM, WhileLLM

    runtime = Runtime(load_config(services.settings.llm), services)
    services.extra["llm"] = runtime
    services.step_hooks["when_llm"] = WhenLLM()
    services.step_hooks["while_llm"] = WhileLLM()


def _announce(services: Any) -> None:
    """``serve`` says once which model answers (one-shot commands stay quiet)."""
    global _announced
    import structlog

    runtime = services.extra.get("llm")
    if runtime is None or _announced:
        return
    _announced = True
    model = runtime.config.default_model
    if model.is_mock:
        structlog.get_logger("tmy.llm").warning(
            "llm.mock",
            detail="no LLM API key is configured: the default model is the TESTONLY mock. "
            "Set OPENAI_API_KEY (or TMY_LLM_API_KEY, with OPENAI_BASE_URL / TMY_LLM_MODEL) "
            "or configure llm.models in config/tmy.yaml.",
        )
    else:
        structlog.get_logger("tmy.llm").info("llm.model", default=model.describe())
