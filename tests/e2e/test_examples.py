"""The demos in examples/ and the starter set in rules/: every file's YAML ``tests:`` pass.

The served ``rules/`` is what a newcomer starts from, so it must not take everyday words
(``hi``, ``hello``, ``ai …``, ``记住…``) away from the rules they write; the demos that do
live in ``examples/``, and each must keep carrying its own tests and passing them — the
suite runs them here, one file at a time as a user would (``run.py test FILE``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tmy.ruletests  # noqa: F401  (registers the `test` command)
from tests.support.checkout import shipped
from tmy import cli
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.y*ml"))
SERVED = [p for p in shipped("rules") if p.suffix in (".yaml", ".yml")]  # not an operator's
EVERYDAY = ["hi", "hello", "Hello", "help", "帮助", "joke", "ai hello", "ai 你好", "记住 我叫安",
            "remember my cat", "chat hi", "translate bonjour", "签到", "抽奖"]  # fmt: skip


pytestmark = pytest.mark.usefixtures("in_checkout")


def run_test(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    code = cli.main(["test", str(path.relative_to(REPO))])
    out, err = capsys.readouterr()
    return code, out + err


def test_the_demos_moved_to_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"basics.yaml", "llm.yaml", "memory.yaml"}
    assert not {p.name for p in SERVED} & {"basics.yaml", "llm.yaml", "memory.yaml"}


@pytest.mark.parametrize("path", EXAMPLES + SERVED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_and_starter_file_passes_its_own_tests(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "\ntests:\n" in path.read_text(encoding="utf-8"), f"{path.name} carries no tests"
    code, out = run_test(capsys, path)
    assert code == 0, out
    assert out.rstrip().endswith(" 0 failed") and " 0 passed" not in out


def test_examples_check_clean_together(capsys: pytest.CaptureFixture[str]) -> None:
    """``--rules examples`` (the README's way to try them) loads all of them at once."""
    assert cli.main(["check", "examples"]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


@pytest.mark.parametrize("path", SERVED, ids=lambda p: p.name)
def test_each_starter_file_opens_with_comments_for_a_newcomer(path: Path) -> None:
    head = path.read_text(encoding="utf-8").splitlines()[:5]
    assert all(line.startswith("#") for line in head), f"{path.name}: say what to change"


async def test_the_served_rules_leave_everyday_words_to_the_newcomer(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"
    starter = tmp_path / "rules"
    starter.mkdir()
    for path in SERVED:  # what the checkout ships, not rules an operator added
        (starter / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    async with Bot(starter, plugins=REPO / "plugins", store=store) as bot:
        for text in EVERYDAY:
            reply = await bot.ask(text)
            assert reply.rule is None, f"the starter rule {reply.rule!r} answers {text!r}"
        assert await bot.say(".ping") == "pong (test)"


async def test_a_newcomers_ai_rule_is_the_only_one_answering(tmp_path: Path) -> None:
    """The issue's collision: a newcomer's own ``ai *`` beside the served rules wins alone."""
    mine = tmp_path / "rules"
    mine.mkdir()
    for path in SERVED:
        (mine / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (mine / "mine.yaml").write_text(
        'rules:\n  - {id: mine, triggers: ["ai *", "hello"],\n'
        '     steps: [{plugin: ADJUST, input: "mine"}]}\n',
        encoding="utf-8",
    )
    async with Bot(mine, plugins=REPO / "plugins", store=f"sqlite:///{tmp_path}/s.db") as bot:
        for text in ["ai hello", "hello"]:
            explained = await bot.ask(text)
            assert (explained.rule, explained.text) == ("mine", "mine")
