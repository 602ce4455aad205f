"""The public surface is deliberate: what ``tmy`` exports is listed, importable and nothing more.

The expected list is derived from ``vars(tmy)`` (as httpx's
tests/test_exported_members.py does): every public name the package binds is
in ``__all__`` and every name in ``__all__`` is importable, so adding an import
to ``tmy/__init__.py`` without exporting it (or the reverse) fails here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import tmy
from tmy.errors import ConfigError, EvalError, RuleError, StoreError, TmyError

ROOT = Path(__file__).resolve().parents[1]
LAZY = ("Bot", "serving")  # tmy.testing sits on the top layer: bound on first use


def _public_members() -> list[str]:
    """Public names bound in the package, submodules aside (``tmy.errors`` is a module)."""
    return sorted(
        name
        for name, value in vars(tmy).items()
        if (not name.startswith("_") or name == "__version__") and not isinstance(value, ModuleType)
    )


def test_every_name_in_all_is_importable() -> None:
    for name in tmy.__all__:
        assert getattr(tmy, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from tmy import *", namespace)
    assert set(tmy.__all__) <= set(namespace)


def test_all_is_exactly_the_public_members() -> None:
    for name in LAZY:  # bind the lazy ones, as any use does
        getattr(tmy, name)
    assert sorted(tmy.__all__) == _public_members()
    assert len(set(tmy.__all__)) == len(tmy.__all__)


def test_the_plugin_contract_is_exported() -> None:
    wanted = {
        "Registry", "Option", "ExecutorSpec", "Executor", "StepContext", "StepHook", "Adapter",
        "Handler", "Command", "Extension", "RuleKey", "StepKey", "ConfigSection", "Message",
        "Reply", "StepRecord", "Target", "Store", "MISSING", "TmyError", "Bot", "serving",
        "Services", "Route",
    }  # fmt: skip
    assert wanted <= set(tmy.__all__)


@pytest.mark.slow  # a fresh interpreter
def test_the_test_harness_is_imported_only_when_used() -> None:
    code = "import sys, tmy; assert 'tmy.testing' not in sys.modules; tmy.Bot; print('ok')"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_every_exported_exception_is_under_tmy_error() -> None:
    errors = [v for v in map(vars(tmy).get, tmy.__all__) if isinstance(v, type)]
    errors = [e for e in errors if issubclass(e, BaseException)]
    assert len(errors) >= 12
    for cls in errors:
        assert issubclass(cls, TmyError), cls
    for cls in (ConfigError, RuleError, EvalError, StoreError):
        assert issubclass(cls, TmyError)
    err = RuleError("unknown plugin 'X'", file="rules/a.yaml", line=7)
    assert str(err) == "rules/a.yaml:7: unknown plugin 'X'"


def test_the_example_plugin_imports_only_from_tmy() -> None:
    tree = ast.parse((ROOT / "plugins" / "example_upper.py").read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {name for name in imported if name.split(".")[0] == "tmy"}
    assert ours == {"tmy"}, ours
