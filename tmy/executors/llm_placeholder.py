"""The LLM executor until a model is configured: a clear error, never a silent answer."""

from __future__ import annotations

from typing import Any

from tmy.errors import ExecutorError


async def llm_not_configured(value: Any, cfg: dict[str, Any], ctx: Any) -> Any:
    raise ExecutorError(
        "the LLM executor is not configured: add llm.models to config/tmy.yaml "
        "or set OPENAI_API_KEY / TMY_LLM_API_KEY"
    )
