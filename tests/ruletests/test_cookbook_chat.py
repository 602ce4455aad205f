"""The cookbook's whole-chat recipes: a welcome, a join approval, a picture described.

Each recipe's own YAML tests run through ``run.py test`` as a user runs them
(``tmy.cli.main``, real loader, real engine, real SQLite store, the TESTONLY
mock); then the same recipe answers events and pictures sent to the real engine
by ``tmy.testing.Bot`` the way an adapter hands them over (``Message.event``,
``Message.attachments``), so the recipes are checked apart from the rule-test
harness too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tmy.ruletests  # noqa: F401  (registers the `test` command)
from tmy import cli
from tmy.message import Attachment, Event
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]
COOKBOOK = REPO / "docs" / "cookbook"

pytestmark = pytest.mark.usefixtures("in_checkout")


def run_json(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, list[dict]]:
    code = cli.main(["test", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)["cases"]


@pytest.mark.parametrize("name", ["welcome.yaml", "join_approval.yaml", "describe_image.yaml"])
def test_each_recipe_passes_its_own_tests(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, cases = run_json(capsys, COOKBOOK / name)
    failed = [c for c in cases if not c["ok"]]
    assert code == 0 and not failed, failed
    assert len(cases) >= 2


def test_the_welcome_recipe_tests_events(capsys: pytest.CaptureFixture[str]) -> None:
    _, cases = run_json(capsys, COOKBOOK / "welcome.yaml")
    sent = [c.get("send_event") for c in cases]
    assert {"member_join", "member_leave"} <= set(sent)
    assert cases[-1]["send"] is not None and cases[-1]["expectation"] == "expect_no_reply"


def test_the_join_approval_recipe_checks_both_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its cases expect approve: true and approve: false; a recipe whose check is turned
    round fails exactly those cases, so the approve expectation is really compared."""
    recipe = COOKBOOK / "join_approval.yaml"
    _, cases = run_json(capsys, recipe)
    decided = [c["approve"] for c in cases if "approve" in c]
    assert True in decided and False in decided
    text = recipe.read_text(encoding="utf-8")
    check = "join_answer.lower() in EVENT_DATA.get('comment', '').lower()"
    assert check in text
    flipped = tmp_path / "flipped.yaml"
    flipped.write_text(text.replace(check, f"not ({check})"), encoding="utf-8")
    code, cases = run_json(capsys, flipped)
    assert code == 1
    assert {c["name"] for c in cases if not c["ok"]} == {c["name"] for c in cases if "approve" in c}


async def test_the_recipes_answer_events_the_way_adapters_send_them() -> None:
    rules = {
        "welcome.yaml": (COOKBOOK / "welcome.yaml").read_text(encoding="utf-8"),
        "join.yaml": (COOKBOOK / "join_approval.yaml").read_text(encoding="utf-8"),
    }
    async with Bot(rules) as bot:
        joined = Event("member_join", "notice.group_increase", {"user": "10001"})
        reply = await bot.ask("", user="10001", chat="group:5", platform="onebot", event=joined)
        assert reply.rule == "welcome" and "第 1 位新成员" in reply.text
        assert reply.outgoing is not None and reply.outgoing.mentions == ["10001"]
        ask = {"user": "10002", "chat": "group:5", "platform": "onebot"}
        right = Event("join_request", "request.group.add", {"comment": "问题：…\n答案：TMY"})
        reply = await bot.ask("", **ask, event=right)
        assert (reply.rule, reply.approve, reply.text) == ("join-check", True, "")
        wrong = Event("join_request", "request.group.add", {"comment": "答案：不知道"})
        reply = await bot.ask("", **ask, event=wrong)
        assert (reply.approve, reply.text) == (False, "")
        assert reply.approve_reason.startswith("答案不对")


async def test_the_describe_recipe_sends_the_message_picture_to_the_model() -> None:
    rules = {"describe.yaml": (COOKBOOK / "describe_image.yaml").read_text(encoding="utf-8")}
    async with Bot(rules) as bot:
        picture = Attachment("image", url="https://example.com/cat.jpg", mime="image/jpeg")
        reply = await bot.ask("[image] 描述", attachments=(picture,))
        assert reply.rule == "describe-image" and reply.error is None
        assert "· 1 image]" in reply.text, reply.text
        other = Attachment("image", url="https://example.com/dog.png", mime="image/png")
        two = await bot.ask("[image][image]这是什么", attachments=(picture, other))
        assert "· 2 images]" in two.text, two.text
        none = await bot.ask("描述")
        assert none.text.startswith("请在同一条消息里发图片")
