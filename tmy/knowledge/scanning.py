"""Which files a knowledge base's roots hold: a folder walked, links kept inside it.

:func:`scan` takes the roots of one ingestion (folders and files, absolute) and
gives the files to read, the roots that do not exist, the entries it left out
with a reason, and the roots it did not walk to their end.

**Links.** A root may be a link (the operator named it). Inside a folder a
link to a file is taken only when its target lies in that folder, and a link
to a folder is not entered: a link dropped into a watched folder cannot put
``/etc``'s or the config's text into a base (name such a file in ``paths``),
and link loops cost nothing. The walk runs in a worker thread and stops at
:data:`MAX_FILES` files / :data:`MAX_ENTRIES` entries per folder.

**Names.** A file whose path is not valid UTF-8 is left out (the store keeps
text only; one such name used to stop the whole base's ingestion); hidden files
and folders (``.``/``#`` first, ``~`` last, ``__pycache__``) are not read.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tmy.knowledge.config import DEFAULT_INCLUDE

MAX_FILES = 100_000
"""Files taken from one folder; past it (or past :data:`MAX_ENTRIES` entries seen) the scan
stops there, says so, and prunes nothing under that folder."""
MAX_ENTRIES = 1_000_000


@dataclass(frozen=True, slots=True)
class File:
    """A file found under a root: its absolute path, the root, its source name."""

    path: Path
    root: Path
    source: str


def _hidden(relative: Path) -> bool:
    return any(
        part.startswith((".", "#")) or part.endswith("~") or part == "__pycache__"
        for part in relative.parts
    )


def _matches(name: str, include: Sequence[str]) -> bool:
    folded = name.casefold()
    return any(fnmatch.fnmatchcase(folded, pattern.casefold()) for pattern in include)


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(slots=True)
class Scan:
    """What :func:`scan` found: the files, the roots that do not exist, the entries left out
    (``{source, reason}``: a link out of its folder, a folder too large or unreadable), and
    the roots not scanned to their end (their documents are never pruned)."""

    files: list[File] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    partial: list[Path] = field(default_factory=list)


def _walk(root: Path, include: Sequence[str], out: Scan) -> None:
    """The files of the folder ``root`` (sorted), links not followed out of it: a link to a
    file is taken when its target lies inside the folder, a link to a folder is not entered
    (no loops, no other folders' files); at most :data:`MAX_FILES` files and
    :data:`MAX_ENTRIES` entries (the rest left out, the root marked partial)."""
    real_root = os.path.realpath(root)
    found: list[File] = []
    seen = 0
    errors: list[OSError] = []  # a subfolder that cannot be listed is not a deleted one
    for folder, dirs, names in os.walk(root, onerror=errors.append, followlinks=False):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not _hidden(Path(d)))
        for d in dirs:
            if (here / d).is_symlink():
                source = (here / d).relative_to(root).as_posix()
                out.refused.append({"source": source, "reason": "a link to a folder: not followed"})
        seen += len(dirs) + len(names)
        for name in sorted(names):
            path = here / name
            if _hidden(Path(name)) or not _matches(name, include):
                continue
            source = path.relative_to(root).as_posix()
            if path.is_symlink() and not inside(os.path.realpath(path), real_root):
                reason = f"a link to {os.path.realpath(path)}, outside {root}: name it in paths"
                out.refused.append({"source": source, "reason": reason})
            elif path.is_file():
                _take(File(path, root, source), found, out)
        if len(found) > MAX_FILES or seen > MAX_ENTRIES:
            why = f"more than {MAX_FILES} files or {MAX_ENTRIES} entries: the rest not read"
            out.refused.append({"source": str(root), "reason": why})
            out.partial.append(root)
            break
    for error in errors:
        where = Path(error.filename or root)
        source = where.relative_to(root).as_posix() if inside(str(where), str(root)) else str(where)
        out.refused.append({"source": source, "reason": f"cannot list it: {error.strerror}"})
    if errors and root not in out.partial:  # its documents are kept, not pruned
        out.partial.append(root)
    out.files.extend(sorted(found[:MAX_FILES], key=lambda f: f.source))


def _take(file: File, found: list[File], out: Scan) -> None:
    """Add ``file`` to ``found`` — unless its path is not valid UTF-8 (the store keeps text
    only: one such name used to stop the whole base's ingestion)."""
    if _storable(str(file.path)):
        found.append(file)
    else:
        out.refused.append({"source": file.source, "reason": "its name is not UTF-8: rename it"})


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a name's undecodable bytes, as surrogates (PEP 383)
        return False
    return True


def shown(text: str) -> str:
    """``text`` fit for the log and the report (undecodable name bytes as U+FFFD)."""
    if _storable(text):
        return text
    with contextlib.suppress(UnicodeEncodeError):
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text.encode("utf-8", "replace").decode("utf-8")


def scan(roots: Sequence[Path], include: Sequence[str] = DEFAULT_INCLUDE) -> Scan:
    """The files under ``roots`` (sorted per root; see :class:`Scan`). A root may itself be a
    link (the operator named it); links inside a folder stay inside it (:func:`_walk`).
    Blocking: :func:`ingest` runs it in a worker thread."""
    out = Scan()
    for root in roots:
        root = Path(os.path.abspath(root))
        if root.is_file():
            _take(File(root, root, root.name), out.files, out)
        elif root.is_dir():
            _walk(root, include, out)
        else:
            out.missing.append(root)
    return out
