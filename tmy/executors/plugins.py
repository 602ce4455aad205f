"""User executors: plain Python files in ``plugins/``, each with ``register(registry)``.

A plugin file registers its executors explicitly by name, with the options it
accepts (see ``plugins/example_upper.py``). Files starting with ``_`` are
skipped. A plugin that fails to import or register is a ConfigError naming the
file — at start-up, never in the middle of a conversation.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

from tmy.errors import ConfigError, TmyError
from tmy.executors.registry import Registry


def load_plugins(folder: Path, registry: Registry) -> list[str]:
    """Import every ``*.py`` in ``folder`` and call its ``register``; returns the files loaded."""
    if not folder.is_dir():
        return []
    loaded = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"tmy_plugins.{path.stem}"
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"{path}: cannot be imported")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except TmyError:
            raise
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise ConfigError(
                f"{path}:{where.lineno}: plugin failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        register = getattr(module, "register", None)
        if not callable(register):
            raise ConfigError(f"{path}: a plugin must define register(registry)")
        try:
            register(registry)
        except TmyError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        except Exception as exc:
            raise ConfigError(f"{path}: register() failed: {type(exc).__name__}: {exc}") from exc
        loaded.append(str(path))
    return loaded
