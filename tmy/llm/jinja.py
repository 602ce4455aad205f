"""Jinja2 prompt templates (an LLM step's ``template:``): sandboxed, errors with file and line.

A template is looked up next to the rule's file, then in the rules directory,
and rendered in Jinja2's sandbox (no attribute tricks, no file access) with
``StrictUndefined`` (a name the run does not have is an error, not an empty
string). Every error names the template's file **and line** —
``prompts/ask.j2:3: unexpected '}'`` — and the rule that uses it:

* a syntax error is found when the rules load (a rules-file error at the step's
  file:line, like any other bad option), when the template's file is known
  then: next to the rules directory or next to exactly one rules file in it;
  otherwise at its first render;
* an undefined name, a sandbox refusal or any other error while rendering is the
  step's ``STEP_ERROR``, naming the template line (the innermost, for an
  ``{% include %}``) and the step (``used by rules/chat.yaml:12, step chat/0``).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tmy.errors import ExecutorError

if TYPE_CHECKING:  # jinja2 is imported where a template is parsed: ~20 ms of every CLI start
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

_ENVS: dict[str, SandboxedEnvironment] = {}
_RULE_FILES = (".yaml", ".yml")
_MAX_DIRS = 2000  # the load-time lookup walks at most this many folders of the rules tree


def template_path(name: str, rule_file: str, rules_dir: Path) -> Path:
    """A template file relative to the rule's file, else to the rules directory."""
    path = Path(name)
    if path.is_absolute():
        return path
    for base in (Path(rule_file).parent, rules_dir if rules_dir.is_dir() else rules_dir.parent):
        candidate = base / path
        if candidate.is_file():
            return candidate
    return Path(rule_file).parent / path


def syntax_problem(exc: TemplateSyntaxError, path: Path) -> str:
    """``FILE:LINE: message`` of a syntax error (the included file's, when it is there)."""
    where = exc.filename or str(path)
    return f"{where}:{exc.lineno}: {exc.message}" if exc.lineno else f"{where}: {exc.message}"


def check_at_load(name: str, rules: Path) -> None:
    """Parse the template a step names, when its file is known at load; ValueError on
    a syntax error (the loader adds the step's file:line).

    The rule's own file is not known to an executor's load-time check, so the
    template is looked for in the rules directory and next to every rules file in
    it: found exactly once, it is the one the step renders and is checked now;
    not found or found twice, its first render checks it.
    """
    found = _candidates(name, rules)
    if len(found) != 1:
        return
    path = found[0]
    from jinja2 import TemplateSyntaxError  # deferred: ~20 ms of every CLI start

    try:
        _env(path.parent).parse(path.read_text(encoding="utf-8"), path.name, str(path))
    except TemplateSyntaxError as exc:
        raise ValueError(f"template {syntax_problem(exc, path)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"template {str(path)!r} cannot be read: {exc}") from None


def _candidates(name: str, rules: Path) -> list[Path]:
    path = Path(name)
    if path.is_absolute():
        return [path] if path.is_file() else []
    if rules.is_file():
        folders = [rules.parent]
    elif rules.is_dir():
        folders = _rule_folders(rules)
    else:
        return []
    return sorted({(d / path).resolve() for d in folders if (d / path).is_file()})


def _rule_folders(root: Path) -> list[Path]:
    """The rules directory and every folder in it holding a rules file (hidden ones skipped)."""
    folders = [root]
    for i, (folder, dirs, files) in enumerate(os.walk(root)):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if i >= _MAX_DIRS:
            break
        if i and any(f.endswith(_RULE_FILES) for f in files):
            folders.append(Path(folder))
    return folders


def template_names(path: Path, used_by: str = "") -> set[str]:
    """Variables a template reads (so declared ones can be fetched from the store first)."""
    from jinja2 import TemplateSyntaxError, meta  # deferred: ~20 ms of every CLI start

    env = _env(path.parent)
    try:
        source = path.read_text(encoding="utf-8")
        return set(meta.find_undeclared_variables(env.parse(source, path.name, str(path))))
    except (OSError, UnicodeDecodeError) as exc:
        raise ExecutorError(f"template {str(path)!r} cannot be read: {exc}{used_by}") from None
    except TemplateSyntaxError as exc:
        raise ExecutorError(f"template {syntax_problem(exc, path)}{used_by}") from None


def render_template(path: Path, context: Mapping[str, Any], used_by: str = "") -> str:
    """Render ``path`` in the sandbox; any error names the template line that raised it."""
    from jinja2 import TemplateError, TemplateSyntaxError  # deferred: ~20 ms of every CLI start

    env = _env(path.parent)
    try:
        return env.get_template(path.name).render(dict(context))
    except TemplateSyntaxError as exc:
        raise ExecutorError(f"template {syntax_problem(exc, path)}{used_by}") from None
    except Exception as exc:  # undefined names, sandbox refusals, a filter's TypeError …
        where = _frame(exc) or str(path)
        message = exc.message if isinstance(exc, TemplateError) and exc.message else str(exc)
        if not isinstance(exc, TemplateError):
            message = f"{type(exc).__name__}: {message}"
        raise ExecutorError(f"template {where}: {message}{used_by}") from None


def _frame(exc: BaseException) -> str | None:
    """``FILE:LINE`` of the innermost template frame of ``exc``'s traceback.

    Jinja2 rewrites a render error's traceback so that template code shows as
    frames of the template file, at its line.
    """
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename
        if name.endswith(".py") or name.startswith("<"):
            continue
        found = f"{name}:{frame.lineno}"
    return found


def _env(folder: Path) -> SandboxedEnvironment:
    key = str(folder.resolve())
    env = _ENVS.get(key)
    if env is None:
        from jinja2 import FileSystemLoader, StrictUndefined  # deferred: ~20 ms of every CLI start
        from jinja2.sandbox import SandboxedEnvironment

        env = _ENVS[key] = SandboxedEnvironment(
            loader=FileSystemLoader(key),
            undefined=StrictUndefined,
            autoescape=False,
            keep_trailing_newline=False,
            auto_reload=True,
        )
    return env
