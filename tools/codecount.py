"""Count what makes a package hard to read top-down: long modules, long functions,
imports hidden inside functions, and registries filled at import time.

    python3 tools/codecount.py            # the tmy package, a summary and each finding
    python3 tools/codecount.py --json     # the same as JSON

- **long modules**: over 400 lines (blank lines and comments included, as `wc -l` counts);
- **long functions**: over 80 lines, decorators excluded;
- **function-level imports**: ``import tmy…``/``from tmy… import`` inside a function, each
  shown with the comment that justifies it (the rule: only to defer an optional heavy
  dependency);
- **module-level mutable registries**: a module-level dict/list/set (or ``defaultdict``,
  ``WeakKeyDictionary``…) that code *outside that module* adds to, or an empty upper-case one
  left for others to fill — what an import-time plugin registry looks like. A table a module
  builds for itself, or a cache it fills inside its own functions, is not one.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

MODULE_LIMIT = 400
FUNCTION_LIMIT = 80
_MUTATORS = {
    "append",
    "add",
    "update",
    "setdefault",
    "extend",
    "insert",
    "__setitem__",
}
_CONTAINER_CALLS = {
    "dict",
    "list",
    "set",
    "defaultdict",
    "OrderedDict",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
    "deque",
    "Counter",
}


@dataclass
class Finding:
    where: str
    name: str
    size: int = 0
    note: str = ""


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _CONTAINER_CALLS
    return False


def _is_empty(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    return isinstance(value, ast.Call) and not value.args and not value.keywords


def _mutated_name(node: ast.AST) -> tuple[str | None, str | None]:
    """(module alias or None, name) a statement adds to, if it is ``X[k] = …``/``X.append(…)``."""

    def split(target: ast.expr) -> tuple[str | None, str | None]:
        if isinstance(target, ast.Name):
            return None, target.id
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            return target.value.id, target.attr
        return None, None

    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript):
                return split(target.value)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        if isinstance(func, ast.Attribute) and func.attr in _MUTATORS:
            return split(func.value)
    return None, None


def _source_line_comment(lines: list[str], lineno: int) -> str:
    """The comment that justifies line ``lineno``: on the line itself, else just above it."""
    line = lines[lineno - 1]
    if "#" in line:
        return line.split("#", 1)[1].strip()
    above: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        above.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(above)


def scan(root: Path) -> dict[str, list[Finding]]:
    long_modules: list[Finding] = []
    long_functions: list[Finding] = []
    inner_imports: list[Finding] = []
    containers: dict[tuple[str, str], int] = {}  # (module, name) -> line
    empty_upper: set[tuple[str, str]] = set()  # ``HOOKS: list[Any] = []``: a registry in waiting
    mutations: list[tuple[str, str | None, str, dict[str, str]]] = []
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        rel = str(path.relative_to(root.parent))
        module = _module_name(root, path)
        if len(lines) > MODULE_LIMIT:
            long_modules.append(Finding(rel, module, len(lines)))
        tree = ast.parse(text, filename=rel)
        # local name -> what it names (``from tmy.app import EXTENSIONS``), wherever imported
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name] = a.name
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and _is_container(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        containers[(module, t.id)] = node.lineno
                        if t.id.isupper() and not t.id.startswith("_") and _is_empty(node.value):
                            empty_upper.add((module, t.id))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > FUNCTION_LIMIT:
                    long_functions.append(Finding(f"{rel}:{node.lineno}", node.name, size))
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("tmy")
                    ) or (
                        isinstance(inner, ast.Import)
                        and any(a.name.startswith("tmy") for a in inner.names)
                    ):
                        name = (
                            inner.module
                            if isinstance(inner, ast.ImportFrom)
                            else ", ".join(a.name for a in inner.names)
                        )
                        inner_imports.append(
                            Finding(
                                f"{rel}:{inner.lineno}",
                                str(name),
                                note=_source_line_comment(lines, inner.lineno),
                            )
                        )
        for node in ast.walk(tree):
            alias, name = _mutated_name(node)
            if name is not None:
                mutations.append((module, alias, name, dict(aliases)))
    registries: list[Finding] = []
    for (module, name), line in sorted(containers.items()):
        for where, alias, mutated, aliases in mutations:
            if (
                alias is None and where != module and aliases.get(mutated) == f"{module}.{name}"
            ) or (alias is not None and aliases.get(alias) == module and mutated == name):
                hit = f"filled by {where}"
            else:
                continue
            registries.append(Finding(f"{module}:{line}", name, note=hit))
            break
        else:
            if (module, name) in empty_upper:
                registries.append(
                    Finding(f"{module}:{line}", name, note="empty, for others to fill")
                )
    return {
        "long_modules": sorted(long_modules, key=lambda f: -f.size),
        "long_functions": sorted(long_functions, key=lambda f: -f.size),
        "function_level_imports": inner_imports,
        "mutable_registries": registries,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", nargs="?", default="tmy", help="package directory (tmy)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    found = scan(Path(args.package).resolve())
    if args.json:
        print(json.dumps({k: [asdict(f) for f in v] for k, v in found.items()}, indent=2))
        return 0
    titles = {
        "long_modules": f"modules over {MODULE_LIMIT} lines",
        "long_functions": f"functions over {FUNCTION_LIMIT} lines",
        "function_level_imports": "function-level tmy imports",
        "mutable_registries": "module-level mutable registries",
    }
    for key, title in titles.items():
        print(f"{title}: {len(found[key])}")
    for key, title in titles.items():
        if not found[key]:
            continue
        print(f"\n{title}:")
        for f in found[key]:
            size = f" ({f.size} lines)" if f.size else ""
            note = f"  # {f.note}" if f.note else ""
            print(f"  {f.where} {f.name}{size}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
