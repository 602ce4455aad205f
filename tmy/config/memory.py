"""``llm.memory:`` in config/tmy.yaml and the ``memory:`` key of an LLM step, validated.

Both are checked when the daemon starts / the rules load: a wrong key is an
error naming it (``unknown key 'llm.memory.dialogue.kep' (did you mean
'keep'?)``; a rule's ``memory: {maxx: 3}`` is a ``file:line`` error).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tmy.config.check import check_section
from tmy.errors import ConfigError
from tmy.hints import did_you_mean

SCOPES = ("user", "chat", "global")
DEFAULT_MIN_SCORE = 0.35
DEFAULT_MAX = 6
DEFAULT_DIALOGUE = 3


@dataclass(frozen=True, slots=True)
class DialogueConfig:
    """Dialogue summaries (对话记忆): when a conversation ends, one short summary is kept."""

    enabled: bool = True
    model: str = ""  # a name in llm.models; "" = llm.default
    max_chars: int = 40  # the summary's target length (asked for, not cut at)
    keep: int = 60  # summaries kept per user (oldest dropped)
    idle: float = 600.0  # seconds of silence that end a conversation (a rule's session: wins)
    max_turns: int = 0  # turns after which a conversation is summarised; 0 = llm.history.turns
    recent_days: float = 7.0  # summaries this recent are shown even when not lexically relevant


@dataclass(frozen=True, slots=True)
class EmbeddingsConfig:
    """Optional dense recall through an OpenAI-compatible ``POST {base_url}/embeddings``."""

    model: str = ""  # a name in llm.models: its base_url, key and headers are used; "" = off
    id: str = "text-embedding-3-small"  # the provider's embedding model id
    min_similarity: float = 0.5  # cosine similarity that makes an entry a dense candidate
    timeout: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.model)


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Everything ``llm.memory`` configures; see docs/memory.md."""

    max_entries: int = 200  # per user, per chat and global; least used / oldest dropped first
    # In a chat / global scope: one (non-admin) user's entries. At it, that user's own entry
    # goes first, so one user cannot push out everyone else's; 0 = no per-user bound.
    max_shared_entries_per_user: int = 20
    max_entry_chars: int = 300  # REMEMBER refuses longer entries; recall cuts at this
    max_block_chars: int = 1500  # the recalled lines together (the headers come on top)
    min_score: float = DEFAULT_MIN_SCORE  # default threshold of memory: steps
    recency_half_life_days: float = 30.0
    secrets: tuple[re.Pattern[str], ...] = ()  # extra patterns REMEMBER refuses
    dialogue: DialogueConfig = field(default_factory=DialogueConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)


_TOP = {
    "max_entries": int,
    "max_shared_entries_per_user": int,
    "max_entry_chars": int,
    "max_block_chars": int,
    "min_score": (int, float),
    "recency_half_life_days": (int, float),
    "secrets": list,
    "dialogue": dict,
    "embeddings": dict,
}
_DIALOGUE = {
    "enabled": bool,
    "model": str,
    "max_chars": int,
    "keep": int,
    "idle": (int, float),
    "max_turns": int,
    "recent_days": (int, float),
}
_EMBEDDINGS = {"model": str, "id": str, "min_similarity": (int, float), "timeout": (int, float)}


def _check(where: str, data: Any, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The llm config's section check, keys set to null dropped (they mean "the default")."""
    return {k: v for k, v in check_section(where, data, schema).items() if v is not None}


def load_memory_config(llm: Mapping[str, Any] | None) -> MemoryConfig:
    """``llm.memory`` validated (ConfigError naming the key); defaults when absent.

    ``llm`` is the raw ``llm:`` section: its model names are what the memory's
    ``model:`` keys may name. :func:`tmy.config.llm.load_config` calls this, so
    ``settings.memory`` is checked once, with the rest of ``llm:``.
    """
    raw = (llm or {}).get("memory")
    data = _check("llm.memory", raw, _TOP)
    dlg = _check("llm.memory.dialogue", data.pop("dialogue", None), _DIALOGUE)
    emb = _check("llm.memory.embeddings", data.pop("embeddings", None), _EMBEDDINGS)
    patterns = []
    for i, pattern in enumerate(data.pop("secrets", None) or []):
        try:
            patterns.append(re.compile(str(pattern)))
        except re.error as exc:
            raise ConfigError(f"'llm.memory.secrets[{i}]' is not a valid regex: {exc}") from None
    for key in ("max_entries", "max_entry_chars", "max_block_chars"):
        if key in data and data[key] < 1:
            raise ConfigError(f"'llm.memory.{key}' must be at least 1")
    if "keep" in dlg and dlg["keep"] < 1:
        raise ConfigError("'llm.memory.dialogue.keep' must be at least 1")
    if "max_chars" in dlg and dlg["max_chars"] < 5:
        raise ConfigError("'llm.memory.dialogue.max_chars' must be at least 5")
    models = (llm or {}).get("models") or {}
    for where, name in (("dialogue", dlg.get("model")), ("embeddings", emb.get("model"))):
        if name and name != "TESTONLY" and name not in models and name != "env":
            raise ConfigError(
                f"'llm.memory.{where}.model' names unknown model {name!r}; "
                f"configured models: {', '.join(sorted(['TESTONLY', *models]))}"
            )
    if emb.get("model") == "TESTONLY":
        raise ConfigError("'llm.memory.embeddings.model' must be a real endpoint, not TESTONLY")
    floats = ("min_score", "recency_half_life_days")
    return MemoryConfig(
        **{k: (float(v) if k in floats else v) for k, v in data.items()},
        secrets=tuple(patterns),
        dialogue=DialogueConfig(
            **{k: (float(v) if k in ("idle", "recent_days") else v) for k, v in dlg.items()}
        ),
        embeddings=EmbeddingsConfig(
            **{k: (float(v) if k in ("min_similarity", "timeout") else v) for k, v in emb.items()}
        ),
    )


# -- the memory: key of an LLM step ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecallSpec:
    """A step's ``memory:``: how much to recall, from where, above which score."""

    max: int = DEFAULT_MAX
    scopes: tuple[str, ...] = SCOPES
    min_score: float | None = None  # None: llm.memory.min_score
    dialogue: int = DEFAULT_DIALOGUE  # dialogue summaries shown (0: none)
    summarize: bool = True  # this step's turns count towards the conversation's summary


_STEP_KEYS = ("max", "scopes", "min_score", "dialogue", "summarize")


def recall_spec(raw: Any) -> RecallSpec | None:
    """``memory: 6`` or ``memory: {max, scopes, min_score, dialogue, summarize}``; None = off.

    Raises ValueError with a message fit for ``file:line: …``.
    """
    if raw is None or raw is False or raw == 0:
        return None
    if raw is True:
        return RecallSpec()
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 0:
            raise ValueError("memory must be a number of entries >= 0, or a mapping")
        return RecallSpec(max=raw)
    if not isinstance(raw, dict):
        raise ValueError(
            "memory: expected a number of entries (memory: 6) or "
            "{max, scopes, min_score, dialogue, summarize}"
        )
    unknown = [k for k in raw if k not in _STEP_KEYS]
    if unknown:
        hint = did_you_mean(str(unknown[0]), _STEP_KEYS)
        raise ValueError(
            f"memory: unknown key {unknown[0]!r}{hint}; allowed: {', '.join(_STEP_KEYS)}"
        )
    out: dict[str, Any] = {}
    for key in ("max", "dialogue"):
        if key in raw:
            value = raw[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"memory.{key} must be a whole number >= 0")
            out[key] = value
    if "scopes" in raw:
        scopes = raw["scopes"]
        if isinstance(scopes, str):
            scopes = [scopes]
        if not isinstance(scopes, list) or not all(s in SCOPES for s in scopes):
            raise ValueError(f"memory.scopes must be a list of {', '.join(SCOPES)}")
        out["scopes"] = tuple(dict.fromkeys(scopes))
    if "min_score" in raw:
        value = raw["min_score"]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
            raise ValueError("memory.min_score must be a number from 0 to 1")
        out["min_score"] = float(value)
    if "summarize" in raw:
        if not isinstance(raw["summarize"], bool):
            raise ValueError("memory.summarize must be true or false")
        out["summarize"] = raw["summarize"]
    return RecallSpec(**out)
