"""Built-in executors and the registry; see :mod:`tmy.executors.registry` for the contract."""

from __future__ import annotations

from tmy.executors import http
from tmy.executors.adjust import adjust
from tmy.executors.llm_placeholder import llm_not_configured
from tmy.executors.registry import ExecutorSpec, Option, Registry

__all__ = ["ExecutorSpec", "Option", "Registry", "default_registry"]


def default_registry() -> Registry:
    """A registry holding the built-in executors (ADJUST, HTTP, LLM)."""
    registry = Registry()
    registry.add(
        "ADJUST", adjust, pure=True, doc="returns its input: copy, combine and store values"
    )
    registry.add(
        "HTTP",
        http.http_request,
        options=http.OPTIONS,
        check=http.check,
        doc="an HTTP request; JSON responses decoded",
    )
    registry.add(
        "LLM",
        llm_not_configured,
        options={"system": Option(None)},
        takes=str,
        doc="the LLM answerer (not configured)",
    )
    return registry
