"""Helpers shared by the LLM tests: configs pointing at the fake provider, rule text.

The ``provider`` fixture itself lives in conftest.py.
"""

from __future__ import annotations

from typing import Any

from tests.support.llm_fake_provider import FakeProvider


def on(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    return {
        "models": {"fake": {"base_url": provider.base_url, "model": "fake"}},
        "backoff_base": 0.001,
        **extra,
    }


def rules(steps: str, *, intent: str = "", extra: str = "") -> str:
    head = f"    intent: {intent}\n" if intent else ""
    return f"""
rules:
  - id: t
    triggers: ["t *"]
    on_error: "failed: {{STEP_ERROR}}"
{head}    steps:
{steps}
{extra}"""


ASK = """      - plugin: LLM
"""


RULES = """
rules:
  - id: ask
    triggers: ["ask *"]
    on_error: "LLM trouble: {STEP_ERROR}"
    steps:
      - plugin: LLM
        system: "Answer briefly."
"""


def llm(provider: FakeProvider, *, retries: int = 2, **main: Any) -> dict[str, Any]:
    """An llm config with two models on the fake provider: main (falling back) and backup."""
    main = {"base_url": provider.base_url, "model": "main-model", **main}
    return {
        "retries": retries,
        "backoff_base": 0.001,
        "retry_after_cap": 0.02,
        "models": {
            "main": main,
            "backup": {"base_url": provider.base_url, "model": "backup-model"},
        },
        "default": "main",
    }


def llm_stats(reply: Any) -> dict[str, Any]:
    return reply.steps[0].extra["llm"]
