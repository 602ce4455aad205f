"""User plugins (tmy/executors/plugins.py): a folder of Python files each registering
executors; options checked at load time, errors naming the file and line, crashes and
timeouts failing the step, never the bot."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from tests.support.steps import run_steps
from tmy.errors import ConfigError, RuleErrors
from tmy.executors import default_registry
from tmy.executors.plugins import load_plugins
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]


GOOD_PLUGIN = """
import asyncio
from tmy.executors.registry import Option


async def shout(value, cfg, ctx):
    return value.upper() + cfg["suffix"]


async def crash(value, cfg, ctx):
    return {}["missing"]


async def slow(value, cfg, ctx):
    await asyncio.sleep(10)


def register(registry):
    registry.add("SHOUT", shout, takes=str,
                 options={"suffix": Option(str, default="", doc="appended")})
    registry.add("NEED", shout, options={"suffix": Option(str, required=True)})
    registry.add("CRASH", crash)
    registry.add("SLOW", slow)
"""


def plugin_dir(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


async def test_plugin_executor_with_options(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    reply = await run_steps('- {plugin: SHOUT, suffix: "!{USER}"}', "go hey", plugins=folder)
    assert reply.text == "HEY!tester"


async def test_shipped_example_plugin_loads() -> None:
    reply = await run_steps("- {plugin: UPPER}", "go shipped", plugins=REPO / "plugins")
    assert reply.text == "SHIPPED"


@pytest.mark.parametrize(
    ("step", "hint"),
    [
        ("- {plugin: SHOUT, sufix: x}", "did you mean 'suffix'"),
        ("- {plugin: SHOUT, suffix: 5}", "'suffix' must be str"),
        ("- {plugin: NEED}", "needs 'suffix:'"),
    ],
)
async def test_plugin_options_are_validated_at_load_time(
    tmp_path: Path, step: str, hint: str
) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    with pytest.raises(RuleErrors, match=rf"x\.yaml:\d+: .*{hint}"):
        await run_steps(step, plugins=folder)


async def test_a_crashing_plugin_fails_the_step_not_the_bot(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    rules = "rules:\n  - {id: c, triggers: [c], steps: [{plugin: CRASH}]}\n"
    rules += "  - {id: ok, triggers: [ok], steps: [{plugin: SHOUT}]}\n"
    async with Bot({"x.yaml": rules}, plugins=folder) as bot:
        reply = await bot.ask("c")
        assert reply.error is not None and "KeyError" in reply.error
        assert await bot.say("ok") == ""


async def test_step_timeout_stops_a_slow_executor(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, good=GOOD_PLUGIN)
    async with asyncio.timeout(30):
        reply = await run_steps("- {plugin: SLOW, timeout: 0.2}", plugins=folder)
    assert reply.error is not None and "timed out" in reply.error and "r/0" in reply.error


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("x = 1\ndef register(registry):\n    registry.add('X', None\n", "SyntaxError"),
        ("import no_such_module_anywhere\n", "ModuleNotFoundError"),
        ("x = 1\n", "register(registry)"),
        ("def register(registry):\n    raise RuntimeError('boom')\n", "boom"),
        ("def register(registry):\n    registry.add('ADJUST', None)\n", "registered twice"),
        ("def register(registry):\n    registry.add('bad name', None)\n", "'bad name'"),
    ],
)
def test_plugin_loading_errors_name_the_file(tmp_path: Path, source: str, hint: str) -> None:
    folder = plugin_dir(tmp_path, broken=source)
    with pytest.raises(ConfigError) as info:
        load_plugins(folder, default_registry())
    assert str(folder / "broken.py") in str(info.value)
    assert hint in str(info.value)


def test_plugin_syntax_error_gives_the_line(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, broken="a = 1\nb = (\n")
    with pytest.raises(ConfigError, match=r"broken\.py:\d+"):
        load_plugins(folder, default_registry())


def test_files_starting_with_underscore_are_skipped(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, _helper="raise RuntimeError('never imported')\n",
                        good=GOOD_PLUGIN)  # fmt: skip
    registry = default_registry()
    loaded = load_plugins(folder, registry)
    assert loaded == [str(folder / "good.py")]
    assert "SHOUT" in registry


async def test_bot_start_fails_on_a_broken_plugin(tmp_path: Path) -> None:
    folder = plugin_dir(tmp_path, broken="raise ValueError('bad plugin')\n")
    with pytest.raises(ConfigError, match=r"broken\.py.*bad plugin"):
        await run_steps("- {plugin: ADJUST}", plugins=folder)
