"""The exception tree drawn in tmy/errors.py is the one the code defines.

Every exception class in tmy/ is found by reading the source (no import: an
optional dependency missing here must not hide a class), and each must appear
in the tree drawn in errors.py's docstring — under TmyError, or named as an
internal signal kept outside on purpose.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import tmy
from tmy import errors

PACKAGE = Path(tmy.__file__).parent
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def _exception_classes() -> dict[str, tuple[str, list[str]]]:
    """name -> (module path, base names) for every class whose bases lead to an exception."""
    classes: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                classes[node.name] = (str(path.relative_to(PACKAGE.parent)), bases)

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in BUILTIN_EXCEPTIONS:
            return True
        if name not in classes or name in seen:
            return False
        return any(is_exception(b, seen | {name}) for b in classes[name][1])

    return {name: info for name, info in classes.items() if is_exception(name)}


def test_every_exception_class_is_drawn_in_the_tree() -> None:
    tree = errors.__doc__ or ""
    found = _exception_classes()
    assert "TmyError" in found and "StoreError" in found  # the walk sees errors.py itself
    missing = {name: where for name, (where, _) in found.items() if name not in tree}
    assert not missing, f"draw these in tmy/errors.py's docstring: {missing}"


def test_every_class_in_errors_py_derives_from_tmy_error() -> None:
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, errors.TmyError), value
