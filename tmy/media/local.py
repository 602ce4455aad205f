"""A reply's own files: only those under ``media/`` in the rules directory.

The rules directory also holds the rules YAML and the prompt templates (system
prompts, sometimes keys in ``env:`` defaults); a reply map can be talked into
naming any path (an LLM's ``returns: dict`` answer, an HTTP step's JSON), so a
path may only name a file under ``<rules dir>/media/`` — when ``rules`` is a
single file, ``media/`` beside it. Paths are written relative to the rules
directory (``media/cat.png``) or absolute; ``..`` and symlinks leading out of
``media/`` are refused.
"""

from __future__ import annotations

from pathlib import Path

from tmy.media.dataurl import Media, MediaError, sniff

MEDIA_DIR = "media"


def inside(path: str, base_dir: Path) -> Path:
    """``path`` (relative to ``base_dir``, or absolute) resolved, when it lies under
    ``base_dir`` once every symlink and ``..`` is followed; MediaError otherwise."""
    base = base_dir.resolve()
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    real = candidate.resolve()
    if real != base and base not in real.parents:
        raise MediaError(f"{path!r} is outside the rules directory {base}; only files under it")
    return real


def read_file(path: str, base_dir: Path, limit: int) -> Media:
    """A file under ``base_dir`` (see :func:`inside`), at most ``limit`` bytes."""
    real = inside(path, base_dir)
    if not real.is_file():
        raise MediaError(f"{path!r}: no such file under {base_dir}")
    size = real.stat().st_size
    if size > limit:
        raise MediaError(f"{path!r} is {size} bytes (the limit is {limit})")
    with real.open("rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew since stat
        raise MediaError(f"{path!r} is larger than {limit} bytes")
    return Media(data, sniff(data, real.name))


def media_dir(rules: Path) -> Path:
    """``<rules dir>/media`` (``rules`` a directory, or a rules file beside it)."""
    base = rules if rules.is_dir() else rules.parent
    return base / MEDIA_DIR


def reply_file(source: str, rules: Path, limit: int) -> Media:
    """The file ``source`` names (relative to the rules directory, or absolute), when
    it lies under :func:`media_dir` once every ``..`` and symlink is followed; at
    most ``limit`` bytes. :class:`MediaError` names the media directory otherwise."""
    folder = media_dir(rules)
    base = folder.parent
    candidate = Path(source).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    real, allowed = candidate.resolve(), folder.resolve()
    if allowed not in real.parents:
        hint = ""
        if not Path(source).is_absolute() and ".." not in Path(source).parts:
            hint = f" (put it there and write '{MEDIA_DIR}/{Path(source).name}')"
        raise MediaError(
            f"{source!r} is not in the media directory {folder}: a reply sends only files "
            f"from there{hint}"
        )
    return read_file(str(real), allowed, limit)
