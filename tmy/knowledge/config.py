"""The ``knowledge:`` config section: named knowledge bases, each over some files.

::

    knowledge:
      faq:                                  # the base's name (letters, digits, _ . -)
        paths: [docs/faq/]                  # folders and files; relative: to the config's folder
        include: ["*.md", "*.txt", "*.html", "*.pdf"]   # file name patterns inside folders
        chunk: {chars: 800, overlap: 100}   # chunk length and how much neighbours share
        embeddings: {model: emb, id: bge-m3}   # optional: vectors too (a model in llm.models)
        watch: true                         # the daemon re-ingests files changed under paths

Checked once, when the settings load: an unknown key, a wrong type, a bad
name or chunk size is a ConfigError naming ``knowledge.<name>.<key>``. Whether
``embeddings.model`` names a configured LLM model is checked when the app
opens (the ``llm:`` section is another section's business). ``settings.sections
["knowledge"]`` is a read-only mapping of base name → :class:`KnowledgeBaseConfig`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tmy.config import Settings
from tmy.config.check import check_section
from tmy.errors import ConfigError

SECTION = "knowledge"
DEFAULT_INCLUDE = ("*.md", "*.txt", "*.html", "*.pdf")
MIN_CHARS, MAX_CHARS = 100, 20_000
DEFAULT_CHARS, DEFAULT_OVERLAP = 800, 100
NAME_RE = re.compile(r"[^\W][\w.-]{0,63}")
"""A base name: a letter, digit or ``_`` then up to 63 of those, ``.`` and ``-``. No ``/``,
no braces (a base names a store namespace ``kb/<name>``: on a Redis Cluster ``{…}`` is the
hash tag), no spaces (it is a word of ``kb`` commands)."""

_BASE = {
    "paths": list,
    "include": list,
    "chunk": dict,
    "embeddings": dict,
    "watch": bool,
}
_CHUNK = {"chars": int, "overlap": int}
_EMBEDDINGS = {"model": str, "id": str, "min_similarity": (int, float), "timeout": (int, float)}


@dataclass(frozen=True, slots=True)
class ChunkConfig:
    """Chunks of about ``chars`` characters; consecutive ones share about ``overlap``."""

    chars: int = DEFAULT_CHARS
    overlap: int = DEFAULT_OVERLAP


@dataclass(frozen=True, slots=True)
class KbEmbeddings:
    """Vectors through an OpenAI-compatible ``POST {base_url}/embeddings`` of ``model``
    (a name in ``llm.models``); ``id`` is the provider's embedding model."""

    model: str
    id: str = "text-embedding-3-small"
    min_similarity: float = 0.3  # a chunk under it is not ranked by the vector list
    timeout: float = 30.0

    @property
    def identity(self) -> str:
        """What the vectors were made with: a change re-embeds every document."""
        return f"{self.model}/{self.id}"


@dataclass(frozen=True, slots=True)
class KnowledgeBaseConfig:
    """One base of ``knowledge:`` (see the module docstring); ``paths`` as written."""

    name: str
    paths: tuple[str, ...] = ()
    include: tuple[str, ...] = DEFAULT_INCLUDE
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    embeddings: KbEmbeddings | None = None
    watch: bool = True


def check_name(name: Any, where: str = "knowledge base") -> str:
    """``name`` when it can name a base, else ValueError saying what a name may hold."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"{where} name {name!r} is not allowed: letters, digits, '_', '.' and '-' "
            "(starting with a letter, digit or '_'), at most 64"
        )
    return name


def _strings(where: str, items: list[Any]) -> tuple[str, ...]:
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"'{where}[{i}]' must be a non-empty string, got {item!r}")
    return tuple(items)


def _chunk(where: str, raw: Any) -> ChunkConfig:
    data = check_section(where, raw, _CHUNK)
    chars = DEFAULT_CHARS if data.get("chars") is None else data["chars"]
    overlap = DEFAULT_OVERLAP if data.get("overlap") is None else data["overlap"]
    if not MIN_CHARS <= chars <= MAX_CHARS:
        raise ConfigError(f"'{where}.chars' must be {MIN_CHARS} to {MAX_CHARS}, got {chars}")
    if overlap * 2 > chars:
        raise ConfigError(f"'{where}.overlap' must be at most half of chars ({chars // 2})")
    return ChunkConfig(chars, overlap)


def _embeddings(where: str, raw: Any) -> KbEmbeddings | None:
    data = {k: v for k, v in check_section(where, raw, _EMBEDDINGS).items() if v is not None}
    if not data:
        return None
    if not data.get("model"):
        raise ConfigError(f"'{where}.model' is required: a model name from llm.models")
    if "timeout" in data and data["timeout"] <= 0:
        raise ConfigError(f"'{where}.timeout' must be positive")
    return KbEmbeddings(**data)


def parse_base(name: str, raw: Any) -> KnowledgeBaseConfig:
    """One base's settings; ConfigError naming ``knowledge.<name>.<key>``."""
    where = f"{SECTION}.{name}"
    try:
        check_name(name)
    except ValueError as exc:
        raise ConfigError(f"'{where}': {exc}") from None
    data = check_section(where, raw, _BASE)
    paths = _strings(f"{where}.paths", data.get("paths") or [])
    include = _strings(f"{where}.include", data["include"]) if data.get("include") else None
    return KnowledgeBaseConfig(
        name=name,
        paths=paths,
        include=include or DEFAULT_INCLUDE,
        chunk=_chunk(f"{where}.chunk", data.get("chunk")),
        embeddings=_embeddings(f"{where}.embeddings", data.get("embeddings")),
        watch=True if data.get("watch") is None else data["watch"],
    )


def parse(raw: Mapping[str, Any]) -> Mapping[str, KnowledgeBaseConfig]:
    """``knowledge:`` as written → base name → :class:`KnowledgeBaseConfig` (read-only)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"'{SECTION}' must be a mapping of base names, got {raw!r}")
    return MappingProxyType({str(k): parse_base(str(k), v) for k, v in raw.items()})


def bases_of(settings: Settings) -> Mapping[str, KnowledgeBaseConfig]:
    """The app's configured bases (none when the settings carry no ``knowledge:``)."""
    found = settings.sections.get(SECTION)
    return found if isinstance(found, Mapping) else MappingProxyType({})


def config_folder(settings: Settings) -> Path:
    """Where relative paths are read from: the config file's folder (as ``rules:``, a relative
    SQLite store and ``backup.path`` are), else the working directory."""
    source = Path(settings.source)
    if settings.source != "<defaults>" and source.is_file():
        return source.absolute().parent
    return Path.cwd()


def resolve(settings: Settings, path: str) -> Path:
    """One of ``paths`` as an absolute path (``~`` expanded)."""
    found = Path(path).expanduser()
    return found if found.is_absolute() else config_folder(settings) / found


def roots_of(settings: Settings, base: KnowledgeBaseConfig) -> list[Path]:
    """The base's ``paths``, absolute."""
    return [resolve(settings, p) for p in base.paths]
