"""The TESTONLY mock to the letter of seed 000, through the real bot.

* ``MOCK:REPAIR``: unusable on the first attempt; once the retry hint is in the
  system prompt, a success — for a judgement (``when_llm`` / ``while_llm``) that
  is ``1``, as ``MOCK:TRUE`` would answer;
* ``MOCK:FAIL``: unusable every time — on a step without an output contract the
  error says the model's answer was unusable (no contract was declared), on a
  step with one it is still a contract error.

Rules run in :class:`tmy.testing.Bot` (real engine, real SQLite store, the mock
as the model because no llm config is given).
"""

from __future__ import annotations

from tests.support.llm_helpers import ASK, rules
from tmy.testing import Bot

JUDGED = """      - plugin: ADJUST
        input: "branch taken"
        when_llm: "the weather is nice"
"""


async def test_repair_on_a_judgement_takes_the_branch_after_exactly_one_retry() -> None:
    async with Bot({"r.yaml": rules(JUDGED)}) as bot:
        reply = await bot.ask("t MOCK:REPAIR")
        assert reply.error is None
        assert reply.text == "branch taken" and not reply.steps[0].skipped
        (judged,) = reply.steps[0].extra["when_llm"]
        assert judged["verdict"] is True
        assert judged["repairs"] == 1 and len(judged["calls"]) == 2


async def test_repair_on_a_judgement_is_1_even_when_the_words_do_not_match() -> None:
    # Without REPAIR the mock derives a judgement from shared words; the repaired
    # answer is 1 regardless, like MOCK:TRUE: "the weather is nice" shares none here.
    async with Bot({"r.yaml": rules(JUDGED)}) as bot:
        assert (await bot.ask("t MOCK:TRUE")).text == "branch taken"
        plain = await bot.ask("t unrelated words")
        assert plain.steps[0].skipped
        assert (await bot.ask("t MOCK:REPAIR unrelated words")).text == "branch taken"


async def test_repair_with_no_retries_left_is_an_error() -> None:
    steps = """      - plugin: ADJUST
        when_llm: {condition: "anything", retries: 0}
"""
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t MOCK:REPAIR")
        assert reply.error is not None and reply.error.startswith("when_llm: ")
        assert len(reply.steps[0].extra["when_llm"][0]["calls"]) == 1


async def test_repair_on_a_loop_judgement_repeats_the_step() -> None:
    steps = """      - plugin: ADJUST
        input: "?= STEP_RESULT + '+'"
        while_llm: "keep going"
        max_loops: 3
"""
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t MOCK:REPAIR")
        assert reply.error is None
        assert reply.text == "MOCK:REPAIR+++"  # every repaired judgement said 1: capped at 3
        record = reply.steps[0]
        assert record.extra["loops_capped"] is True
        judgements = record.extra["while_llm"]
        assert len(judgements) == 2  # asked after runs 1 and 2; run 3 hit max_loops
        assert all(j["verdict"] is True and j["repairs"] == 1 for j in judgements)


async def test_repair_on_a_contract_succeeds_after_the_hint() -> None:
    steps = ASK + "        returns: list\n"
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t MOCK:REPAIR these words")
        assert reply.error is None
        assert reply.steps[0].result == ["MOCK:REPAIR", "these", "words"]
        stats = reply.steps[0].extra["llm"]
        assert stats["repairs"] == 1 and len(stats["calls"]) == 2


async def test_repair_with_a_response_answers_that_response_after_the_hint() -> None:
    steps = ASK + "        returns: dict\n"
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask('t MOCK:REPAIR MOCK:RESPONSE:{"ok": true}')
        assert reply.error is None and reply.steps[0].result == {"ok": True}
        assert reply.steps[0].extra["llm"]["repairs"] == 1


async def test_repair_on_a_plain_question_succeeds_after_the_hint() -> None:
    async with Bot({"r.yaml": rules(ASK)}) as bot:
        reply = await bot.ask("t MOCK:REPAIR hello")
        assert reply.error is None
        assert reply.text == "[TESTONLY mock · 0 earlier turns] You said: MOCK:REPAIR hello"
        assert reply.steps[0].extra["llm"]["repairs"] == 1


async def test_fail_on_a_plain_question_says_the_answer_was_unusable() -> None:
    async with Bot({"r.yaml": rules(ASK + "        retries: 1\n")}) as bot:
        reply = await bot.ask("t MOCK:FAIL")
        assert reply.error == (
            "the model's answer was unusable after 2 attempts: the answer was empty"
        )
        assert "contract" not in reply.error
        assert reply.text == f"failed: {reply.error}"
        assert len(reply.steps[0].extra["llm"]["calls"]) == 2


async def test_fail_on_a_contract_step_is_still_a_contract_error() -> None:
    async with Bot({"r.yaml": rules(ASK + "        returns: int\n")}) as bot:
        reply = await bot.ask("t MOCK:FAIL")
        assert reply.error == (
            "the model's answer did not meet the output contract after 3 attempts: "
            "the answer was empty"
        )


async def test_fail_on_a_judgement_is_an_error_naming_the_hook() -> None:
    async with Bot({"r.yaml": rules(JUDGED)}) as bot:
        reply = await bot.ask("t MOCK:FAIL")
        assert reply.error is not None and reply.error.startswith("when_llm: ")
        assert reply.text.startswith("failed: when_llm: ")
