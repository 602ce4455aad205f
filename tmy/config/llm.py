"""The ``llm:`` section of config/tmy.yaml, validated, plus the environment fallbacks.

This module is the one place that knows its shape and refuses a wrong key with
its full dotted name, when the settings load rather than in the middle of a
conversation; ``settings.llm`` is the frozen :class:`LLMConfig` it returns (with
``llm.memory`` parsed by :mod:`tmy.config.memory` as its ``memory``).

Which model answers when a step names none (``default_model``):

1. ``llm.default`` when set;
2. else the model built from the environment (``TMY_LLM_API_KEY`` /
   ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` / ``TMY_LLM_BASE_URL``,
   ``TMY_LLM_MODEL``) — so a key in the environment is enough, no config edits;
3. else the first model under ``llm.models``;
4. else ``TESTONLY``, the built-in mock (the daemon logs that once at start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tmy import redact
from tmy.config.check import check_section
from tmy.config.memory import MemoryConfig, load_memory_config
from tmy.errors import ConfigError

MOCK = "TESTONLY"
ENV_MODEL = "env"
SCENES = ("general", "branch", "loop")
RESPONSE_FORMATS = ("json_object", "json_schema", "none")
# A response body (or a whole SSE stream) bigger than this fails the call: a provider that
# streams forever must not fill the daemon's memory. Streams repeat ~150 bytes of JSON per
# token, so 8 MiB still holds answers of tens of thousands of tokens.
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
# pictures an LLM step sends (images:, vision:): each downloaded one at most this many bytes
# (providers refuse bigger ones: OpenAI's limit is 20 MB, most others' less), and at most
# this many per request
DEFAULT_MAX_IMAGE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_IMAGES = 8

DEFAULT_SCENE_PROMPTS = {
    "general": "You are a helpful assistant in a chat. Answer in the language of the question.",
    "branch": (
        "You judge whether a condition holds for the given content. "
        "Reply with 1 when it holds and 0 when it does not."
    ),
    "loop": (
        "You decide whether a repeated task should run once more, given the condition "
        "and the latest result. Reply with 1 to continue and 0 to stop."
    ),
}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One named model: where it lives and how to talk to it."""

    name: str
    base_url: str
    model: str
    api_key_env: str = ""
    api_key: str = ""  # resolved from api_key_env at load time; never logged
    timeout: float = 60.0
    temperature: float | None = None
    max_tokens: int | None = None
    fallback: tuple[str, ...] = ()
    stream: bool = False
    response_format: str = "json_object"
    headers: tuple[tuple[str, str], ...] = ()
    vision: bool = True  # false: the model takes no pictures (check refuses images:/vision:)

    @property
    def is_mock(self) -> bool:
        """The TESTONLY mock answers this model (no network)."""
        return self.base_url == MOCK

    def describe(self) -> str:
        """How errors and logs name the model: which id at which endpoint (never a secret)."""
        if self.is_mock:
            return MOCK
        return f"{self.name} ({self.model} at {redact.safe_url(self.base_url)})"


@dataclass(frozen=True, slots=True)
class LLMConfig:
    """Everything the LLM answerer is configured with; see docs/llm.md for each key."""

    models: Mapping[str, ModelConfig]
    default: str
    retries: int = 2
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    retry_after_cap: float = 20.0
    deadline: float = 0.0  # seconds per step; 0: the step timeout
    max_tool_turns: int = 12
    scene_prompts: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType(dict(DEFAULT_SCENE_PROMPTS))
    )
    per_user_daily_tokens: int = 0
    daily_tokens: int = 0
    # seconds between writes of the usage counters (llm.budget.flush_interval; tmy.llm.tally);
    # 0: written at every call
    usage_flush_interval: float = 1.0
    history_turns: int = 20
    history_max_tokens: int = 3000
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_images: int = DEFAULT_MAX_IMAGES
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # llm.memory
    # the model the rule tests' mock stands in for when no llm.default is written: the first
    # model under llm.models (not the env one), see mocked()
    mock_default: str = MOCK

    @property
    def default_model(self) -> ModelConfig:
        """The model a step without ``model:`` uses."""
        return self.models[self.default]

    @property
    def uses_mock(self) -> bool:
        """The default model is the mock (the daemon says so once at start)."""
        return self.default_model.is_mock

    def model(self, name: str | None) -> ModelConfig:
        """The model called ``name`` (the default for None); ConfigError naming the known ones."""
        if not name:
            return self.default_model
        found = self.models.get(name)
        if found is None:
            raise ConfigError(f"unknown LLM model {name!r}; {known_models(self.models)}")
        return found


def known_models(models: Mapping[str, Any]) -> str:
    """The tail of an "unknown model" error: what the user could have meant."""
    return f"configured models: {', '.join(sorted(models))}"


_TOP = {
    "default": str,
    "models": dict,
    "retries": int,
    "backoff_base": (int, float),
    "backoff_cap": (int, float),
    "retry_after_cap": (int, float),
    "deadline": (int, float),
    "max_tool_turns": int,
    "scene_prompts": dict,
    "budget": dict,
    "history": dict,
    "max_response_bytes": int,
    "max_image_bytes": int,
    "max_images": int,
    "memory": dict,  # long-term memory: validated by tmy/config/memory.py (docs/memory.md)
}
_MODEL = {
    "base_url": str,
    "model": str,
    "api_key_env": str,
    "timeout": (int, float),
    "temperature": (int, float),
    "max_tokens": int,
    "fallback": list,
    "stream": bool,
    "response_format": str,
    "headers": dict,
    "vision": bool,
}
_BUDGET = {"per_user_daily_tokens": int, "daily_tokens": int, "flush_interval": (int, float)}
_HISTORY = {"turns": int, "max_tokens": int}


def _env_model(env: Mapping[str, str]) -> ModelConfig | None:
    """The endpoint the environment names, if any (a key, or a base URL for keyless servers)."""
    key_var = next((v for v in ("TMY_LLM_API_KEY", "OPENAI_API_KEY") if env.get(v)), "")
    base = env.get("TMY_LLM_BASE_URL") or env.get("OPENAI_BASE_URL") or ""
    if not key_var and not env.get("TMY_LLM_BASE_URL"):
        return None
    return ModelConfig(
        name=ENV_MODEL,
        base_url=(base or "https://api.openai.com/v1").rstrip("/"),
        model=env.get("TMY_LLM_MODEL") or "gpt-4o-mini",
        api_key_env=key_var,
        api_key=env.get(key_var, "") if key_var else "",
    )


def _model(name: str, raw: Any, env: Mapping[str, str]) -> ModelConfig:
    where = f"llm.models.{name}"
    data = check_section(where, raw, _MODEL)
    base = data.get("base_url")
    if not base:
        raise ConfigError(f"'{where}.base_url' is required (e.g. https://api.openai.com/v1)")
    if base != MOCK and not base.startswith(("http://", "https://")):
        raise ConfigError(f"'{where}.base_url' must start with http:// or https:// (or be {MOCK})")
    model = data.get("model") or (MOCK if base == MOCK else "")
    if not model:
        raise ConfigError(f"'{where}.model' is required: the provider's model id")
    key_env = data.get("api_key_env") or ""
    fmt = data.get("response_format") or "json_object"
    if fmt not in RESPONSE_FORMATS:
        raise ConfigError(f"'{where}.response_format' must be one of {', '.join(RESPONSE_FORMATS)}")
    fallback = data.get("fallback") or []
    if not all(isinstance(f, str) for f in fallback):
        raise ConfigError(f"'{where}.fallback' must be a list of model names")
    headers = data.get("headers") or {}
    temp = data.get("temperature")
    return ModelConfig(
        name=name,
        base_url=base.rstrip("/"),
        model=str(model),
        api_key_env=key_env,
        api_key=env.get(key_env, "") if key_env else "",
        timeout=float(data.get("timeout") or 60.0),
        temperature=float(temp) if temp is not None else None,
        max_tokens=data.get("max_tokens"),
        fallback=tuple(fallback),
        stream=bool(data.get("stream", False)),
        response_format=fmt,
        headers=tuple((str(k), str(v)) for k, v in headers.items()),
        vision=bool(data.get("vision", True)),
    )


def _register_secrets(model: ModelConfig) -> None:
    """Its API key, a password in its base URL and credential headers: redacted everywhere."""
    redact.add(model.api_key)
    redact.add_url(model.base_url)
    for name, value in model.headers:
        redact.add_header(name, value)


def load_config(
    raw: Mapping[str, Any] | LLMConfig | None, env: Mapping[str, str] | None = None
) -> LLMConfig:
    """Validate the ``llm:`` section and resolve models; ConfigError naming the offending key.

    An LLMConfig is returned as it is: it was checked when it was made.
    """
    if isinstance(raw, LLMConfig):
        return raw
    env = os.environ if env is None else env
    data = check_section("llm", dict(raw or {}), _TOP)
    models: dict[str, ModelConfig] = {MOCK: ModelConfig(MOCK, MOCK, MOCK)}
    env_model = _env_model(env)
    raw_models = data.get("models") or {}
    if env_model is not None and ENV_MODEL not in raw_models:
        models[ENV_MODEL] = env_model
    for name, spec in raw_models.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"llm.models: model names are non-empty strings, got {name!r}")
        models[name] = _model(name, spec, env)
    for model in models.values():
        for fb in model.fallback:
            if fb not in models:
                raise ConfigError(
                    f"'llm.models.{model.name}.fallback' names unknown model {fb!r}; "
                    f"{known_models(models)}"
                )
    for model in models.values():
        _register_secrets(model)
    default = data.get("default") or ""
    if default and default not in models:
        raise ConfigError(f"'llm.default' names unknown model {default!r}; {known_models(models)}")
    if not default:
        default = ENV_MODEL if env_model is not None else next(iter(raw_models), MOCK)
    scenes = check_section(
        "llm.scene_prompts", data.get("scene_prompts"), dict.fromkeys(SCENES, str)
    )
    budget = check_section("llm.budget", data.get("budget"), _BUDGET)
    history = check_section("llm.history", data.get("history"), _HISTORY)
    flush = budget.get("flush_interval")
    if flush is not None and not 0 <= flush <= 3600:
        raise ConfigError("'llm.budget.flush_interval' must be between 0 and 3600 seconds")
    max_bytes = data.get("max_response_bytes")
    if max_bytes is not None and max_bytes < 1:
        raise ConfigError("'llm.max_response_bytes' must be at least 1")
    for key in ("max_image_bytes", "max_images"):
        if data.get(key) is not None and data[key] < 1:
            raise ConfigError(f"'llm.{key}' must be at least 1")
    tool_turns = data.get("max_tool_turns")
    if tool_turns is not None and tool_turns < 1:
        raise ConfigError("'llm.max_tool_turns' must be at least 1")

    def pick(key: str, fallback: Any) -> Any:
        value = data.get(key)
        return fallback if value is None else value

    memory = load_memory_config(data)
    return LLMConfig(
        models=MappingProxyType(models),
        default=default,
        retries=int(pick("retries", 2)),
        backoff_base=float(pick("backoff_base", 0.5)),
        backoff_cap=float(pick("backoff_cap", 8.0)),
        retry_after_cap=float(pick("retry_after_cap", 20.0)),
        deadline=float(pick("deadline", 0.0)),
        max_tool_turns=int(pick("max_tool_turns", 12)),
        scene_prompts=MappingProxyType({**DEFAULT_SCENE_PROMPTS, **scenes}),
        per_user_daily_tokens=int(budget.get("per_user_daily_tokens") or 0),
        daily_tokens=int(budget.get("daily_tokens") or 0),
        usage_flush_interval=float(1.0 if flush is None else flush),
        history_turns=int(history.get("turns", 20) if history.get("turns") is not None else 20),
        history_max_tokens=int(history.get("max_tokens") or 3000),
        max_response_bytes=int(pick("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES)),
        max_image_bytes=int(pick("max_image_bytes", DEFAULT_MAX_IMAGE_BYTES)),
        max_images=int(pick("max_images", DEFAULT_MAX_IMAGES)),
        memory=memory,
        mock_default=data.get("default") or next(iter(raw_models), MOCK),
    )


def mocked(config: LLMConfig) -> LLMConfig:
    """``config`` with every model answered by the TESTONLY mock (what rule tests run on).

    Model names stay (a step's ``model: fast`` must still load), each now points at
    the mock; the ``env`` model is shadowed the same way, so an API key in the
    environment never sends a test to a real provider. The default is ``llm.default``
    when written, else the first configured model.
    """
    models = {
        name: replace(m, base_url=MOCK, api_key_env="", api_key="", stream=False)
        for name, m in config.models.items()
    }
    models.setdefault(ENV_MODEL, ModelConfig(ENV_MODEL, MOCK, MOCK))
    return replace(config, models=MappingProxyType(models), default=config.mock_default)
