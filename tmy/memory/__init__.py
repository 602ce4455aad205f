"""Long-term memory for the LLM answerer (seed 003): remember / forget, recall, dialogue summaries.

Built from rule-level pieces, so operations staff decide which words remember
and which steps recall:

* executors ``REMEMBER`` (store the input as an entry) and ``FORGET`` (disable
  the entries that best match the input);
* the ``memory:`` key of an ``LLM`` step (tmy/llm/executor.py calls
  :mod:`tmy.memory.hooks`): the relevant entries and recent dialogue summaries
  go into the request's dynamic tail, never into its stable prefix;
* dialogue summaries of conversations that ended (:mod:`tmy.memory.dialog`);
* ``llm.memory:`` settings (:mod:`tmy.config.memory`), the admin commands
  ``.tmy memory`` / ``.tmy dialog`` and ``python run.py memory list|del|export``.

``install()`` plugs it in through the engine's extension points, as
:func:`tmy.llm.install` does; tmy/app.py imports :mod:`tmy.memory.autoinstall`.
See docs/memory.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]


def install() -> None:
    """Register everything once; calling it again changes nothing."""
    from tmy.app import EXTENSIONS, SERVICE_HOOKS
    from tmy.cli import COMMANDS
    from tmy.memory import cli

    if _register not in EXTENSIONS:
        EXTENSIONS.append(_register)
    if _attach not in SERVICE_HOOKS:
        SERVICE_HOOKS.append(_attach)
    COMMANDS["memory"] = (cli.configure, cli.run)


def _register(registry: Any, settings: Any) -> None:
    """Add REMEMBER and FORGET (validating ``llm.memory`` now: a bad key stops start-up)."""
    from tmy.config.memory import load_memory_config
    from tmy.memory import executors

    load_memory_config(settings.llm)
    registry.add(
        "REMEMBER",
        executors.remember,
        options=executors.REMEMBER_OPTIONS,
        takes=str,
        check=executors.check_remember,
        doc="store the input as a long-term memory entry; answers a confirmation",
        replace=True,
    )
    registry.add(
        "FORGET",
        executors.forget,
        options=executors.FORGET_OPTIONS,
        takes=str,
        check=executors.check_forget,
        doc="disable the memory entries that best match the input; answers what it forgot",
        replace=True,
    )


def _attach(services: Any) -> None:
    """The validated memory config on ``services.extra["memory"]``."""
    from tmy.config.memory import load_memory_config
    from tmy.memory.recall import MemoryRuntime

    services.extra["memory"] = MemoryRuntime(load_memory_config(services.settings.llm), services)
