"""tmy.llm.EXTENSION: what it adds, its lifespan's runtime (runtime_of), the recall slot, the
serve notice. The app is given the extension explicitly: nothing is installed by importing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

import tmy.llm
from tmy.app import App
from tmy.config import Settings
from tmy.config.memory import RecallSpec
from tmy.errors import ConfigError, ExecutorError
from tmy.executors.registry import ExecutorSpec
from tmy.extension import Extension
from tmy.llm import executor, judged, tools
from tmy.llm.runtime import STATE_KEY, Runtime, runtime_of
from tmy.message import Message

REPO = Path(__file__).resolve().parents[2]

RULES = """
rules:
  - id: chat
    triggers: ["chat *"]
    steps:
      - plugin: LLM
        memory: 3
"""


def _settings(**llm: object) -> Settings:
    return Settings(plugins=Path("/nonexistent"), store="sqlite:///:memory:", llm=dict(llm))


@pytest.fixture
async def app() -> AsyncIterator[App]:
    async with App(_settings(), extensions=(tmy.llm.EXTENSION,), rule_texts={"r.yaml": RULES}) as a:
        yield a


def test_the_extension_names_what_it_adds() -> None:
    ext = tmy.llm.EXTENSION
    assert isinstance(ext, Extension) and ext.name == STATE_KEY == "llm"
    assert list(ext.step_keys) == ["when_llm", "while_llm", "max_loops"]
    assert isinstance(ext.step_keys["when_llm"].hook, judged.WhenLLM)
    assert isinstance(ext.step_keys["while_llm"].hook, judged.WhileLLM)
    assert ext.step_keys["max_loops"].hook is None
    assert ext.rule_keys["tool"].validate is tools.validate_tool
    assert ext.rule_keys["tool"].locals is tools.tool_locals
    assert [c.name for c in ext.commands] == ["ctx", "budget"]
    with pytest.raises(TypeError):
        ext.step_keys["x"] = ext.step_keys["max_loops"]  # type: ignore[index]


def test_the_llm_executor_is_checked_against_the_validated_settings() -> None:
    (spec,) = tmy.llm.EXTENSION.executors(
        _settings(models={"m": {"base_url": "http://x/v1", "model": "x"}})
    )
    assert isinstance(spec, ExecutorSpec) and spec.name == "LLM" and spec.run is executor.llm_step
    assert spec.check is not None
    spec.check({"model": "m"})
    with pytest.raises(ValueError, match="'nope' is not configured"):
        spec.check({"model": "nope"})
    with pytest.raises(ValueError, match="memory"):
        spec.check({"memory": {"scope": ["user"]}})  # the memory: schema lives in tmy.config


async def test_the_lifespan_yields_the_runtime_runtime_of_reads(app: App) -> None:
    services = app.engine.services
    rt = runtime_of(services)
    assert isinstance(rt, Runtime) and app.state["llm"] is rt and rt.services is services
    assert rt.config.default_model.is_mock and rt.recall is None


async def test_runtime_of_names_the_missing_extension() -> None:
    async with App(_settings(), rule_texts={"r.yaml": "rules: []"}) as bare:
        with pytest.raises(ExecutorError, match="LLM extension is not installed"):
            runtime_of(bare.engine.services)


async def test_a_memory_step_without_a_recall_provider_is_a_step_error(app: App) -> None:
    reply = await app.engine.handle(Message("chat hello", user="ann"))
    assert reply.error is not None and "needs the memory extension" in reply.error


class _Recall:
    def __init__(self) -> None:
        self.asked: list[tuple[str, RecallSpec]] = []
        self.answered: list[tuple[str, str]] = []

    async def before_request(self, job: object, spec: RecallSpec, query: str) -> str:
        self.asked.append((query, spec))
        return "<memory>\n- a fact\n</memory>"

    async def after_answer(self, job: object, spec: RecallSpec, ask: str, answer: str) -> None:
        self.answered.append((ask, answer))

    def ctx_lines(self, details: object) -> list[str]:
        return ["# recalled"]


async def test_a_recall_provider_fills_the_tail_and_sees_the_turn(app: App) -> None:
    rt, provider = runtime_of(app.engine.services), _Recall()
    with rt.recall_by(provider):
        assert rt.recall is provider and rt.derive(rt.services).recall is provider
        with pytest.raises(ConfigError, match="two extensions"), rt.recall_by(_Recall()):
            pass
        reply = await app.engine.handle(Message("chat hello", user="ann"))
    assert rt.recall is None
    assert reply.error is None and "- a fact" in reply.text  # the mock echoes the tail
    assert provider.asked == [("hello", RecallSpec(max=3))]
    assert provider.answered and provider.answered[0][0] == "hello"


async def test_serving_warns_once_that_the_mock_answers(app: App) -> None:
    with capture_logs() as logs:
        async with tmy.llm.EXTENSION.serving(app.engine.services):
            pass
    assert [e["event"] for e in logs] == ["llm.mock"]


@pytest.mark.slow  # a fresh interpreter
def test_tmy_llm_imports_nothing_from_tmy_memory() -> None:
    code = "import sys, tmy.llm; print([m for m in sys.modules if m.startswith('tmy.memory')])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
