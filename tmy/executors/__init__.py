"""Built-in executors and the registry; see :mod:`tmy.executors.registry` for the contract."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tmy.executors import http
from tmy.executors.adjust import adjust
from tmy.executors.registry import ExecutorSpec, Option, Registry
from tmy.extension import Extension

__all__ = ["ExecutorSpec", "Option", "Registry", "default_registry"]


def default_registry(extensions: Iterable[Extension] = (), settings: Any = None) -> Registry:
    """A registry holding the built-in executors (ADJUST, HTTP), plus ``extensions``.

    The LLM executor comes from the llm extension (``tmy.llm.EXTENSION``); a rule
    naming ``LLM`` without it is refused like any unknown executor. Tests that load
    rules with ``schedule:`` pass ``[tmy.cron.EXTENSION]``.
    """
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
    for extension in extensions:
        registry.install(extension, settings)
    return registry
