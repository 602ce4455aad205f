"""The built-in extensions, listed in one tuple, and the extensions an app is given.

The app is *given* its extensions (as Starlette is given ``routes=``); it never
imports this module. The CLI and :mod:`tmy.testing` pass :func:`extensions`:
the built-ins below plus every package installed under the entry-point group
``tmy.extensions`` (:func:`tmy.extension.installed_extensions`).
"""

from __future__ import annotations

from tmy import cron
from tmy.extension import Extension, check_unique, installed_extensions

BUILTINS: tuple[Extension, ...] = (cron.EXTENSION,)
"""Core commands, cron, the LLM answerer and memory, in the order the app installs them."""
# TODO(A1): add tmy.commands.CORE, tmy.llm.EXTENSION, tmy.memory.EXTENSION as B and A2 land them.


def extensions() -> tuple[Extension, ...]:
    """The built-ins plus the installed extensions; two claiming the same name is a ConfigError."""
    found = (*BUILTINS, *installed_extensions())
    check_unique(found)
    return found
