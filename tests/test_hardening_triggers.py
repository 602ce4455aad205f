"""Hardening of trigger matching: regex triggers cannot stall the daemon (ReDoS), and
invisible characters cannot smuggle a word past a trigger."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from log_helpers import read_log

from tmy.adapters.http import HttpAdapter
from tmy.rulebook.triggers import nested_quantifier, normalise
from tmy.testing import Bot

REDOS_RULES = """
rules:
  - id: ping
    triggers: [ping]
    steps:
      - {plugin: ADJUST, input: pong}
  - id: nested
    triggers: ["re:^(a+)+$"]
    steps:
      - {plugin: ADJUST, input: "all a"}
  - id: alternation
    triggers: ["re:^(a|aa)+$"]
    steps:
      - {plugin: ADJUST, input: "all a again"}
  - id: overlap
    triggers: ["re:(x+x+)+y"]
    steps:
      - {plugin: ADJUST, input: "x then y"}
"""


@pytest.fixture
async def served() -> AsyncIterator[httpx.AsyncClient]:
    async with Bot({"r.yaml": REDOS_RULES}) as bot:
        adapter = HttpAdapter("127.0.0.1:0")
        await adapter.start(bot.engine.handle)
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{adapter.port}", timeout=60
            ) as client:
                yield client
        finally:
            await adapter.stop()


@pytest.mark.parametrize("attack", ["a" * 40 + "!", "a" * 70 + "!", "x" * 60])
async def test_catastrophic_regex_does_not_stall_other_chats(served, attack: str) -> None:
    client = served

    async def ping_latency() -> float:
        await asyncio.sleep(0.05)  # let the attack reach the engine first
        started = time.perf_counter()
        reply = (await client.post("/v1/messages", json={"text": "ping", "user": "b"})).json()
        assert reply["answer"] == "pong"
        return time.perf_counter() - started

    started = time.perf_counter()
    attack_reply, latency = await asyncio.gather(
        client.post("/v1/messages", json={"text": attack, "user": "mallory"}), ping_latency()
    )
    attack_seconds = time.perf_counter() - started
    assert attack_reply.status_code == 200
    assert latency < 1.0, f"ping waited {latency:.2f}s behind the regex attack"
    assert attack_seconds < 2.0, f"the attack message took {attack_seconds:.2f}s"


async def test_an_abandoned_regex_is_logged_and_the_others_still_match(log_file: Path) -> None:
    async with Bot({"r.yaml": REDOS_RULES}) as bot:
        assert (await bot.ask("aaaa")).rule == "nested"  # the patterns still work on a match
        reply = await bot.ask("a" * 80 + "!")
        assert reply.rule is None
        assert (await bot.ask("ping")).text == "pong"
    events = read_log(log_file)
    timeouts = [e for e in events if e["event"] == "trigger.regex_timeout"]
    assert timeouts and timeouts[0]["trigger"] == "re:^(a|aa)+$"


REGEX_RULES = """
rules:
  - id: add
    triggers: ["re:^add (?P<item>\\\\w+)(?: x(?P<count>\\\\d+))?$"]
    steps:
      - {plugin: ADJUST, input: "{item}:{MAGIC}"}
  - id: ask
    triggers: ["re:^(?P<QUESTION>.+)\\\\?$"]
    steps:
      - {plugin: ADJUST, input: "Q={QUESTION}"}
  - id: strict
    case_sensitive: true
    triggers: ["re:^Hello$"]
    steps:
      - {plugin: ADJUST, input: "exact case"}
  - id: lookaround
    triggers: ["re:^(?=.*tea)(?!.*coffee)", "re:^(\\\\w)\\\\1$"]
    steps:
      - {plugin: ADJUST, input: "tea or double"}
"""


async def test_regex_triggers_keep_python_syntax_and_groups() -> None:
    async with Bot({"r.yaml": REGEX_RULES}) as bot:
        assert await bot.say("add milk") == "milk:add milk"
        assert await bot.say("ADD Milk x3") == "Milk:ADD Milk x3"  # case-insensitive by default
        assert await bot.say("add 牛奶") == "牛奶:add 牛奶"  # Unicode \w, as in Python's re
        assert await bot.say("where is it?") == "Q=where is it"
        assert await bot.say("Hello") == "exact case"
        assert (await bot.ask("hello")).rule is None
        assert await bot.say("green tea please") == "tea or double"  # lookahead
        assert (await bot.ask("tea and coffee")).rule is None
        assert await bot.say("zz") == "tea or double"  # backreference


def test_nested_quantifiers_are_recognised() -> None:
    for pattern in ["^(a+)+$", "(a*)*b", r"^(\w+\s?)*$", "((ab)+c)*", "(?:x+){2,}"]:
        assert nested_quantifier(pattern), pattern
    for pattern in ["^add (?P<item>.+)$", "a+b+", "(ab)+", "(a|b)*c", "(a+)?", "(?:x{2})+", "["]:
        assert not nested_quantifier(pattern), pattern


def test_check_warns_about_nested_quantifiers_and_invisible_characters(tmp_path: Path) -> None:
    import subprocess
    import sys

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        "rules:\n"
        "  - id: slow\n"
        "    triggers:\n"
        '      - "re:^(a+)+$"\n'
        "    steps: [{plugin: ADJUST, input: x}]\n"
        "  - id: hidden\n"
        "    triggers:\n"
        '      - "*bad\\u200bword*"\n'
        "    steps: [{plugin: ADJUST, input: y}]\n"
        "  - id: fine\n"
        '    triggers: ["re:^ok (?P<x>.+)$"]\n'
        "    steps: [{plugin: ADJUST, input: z}]\n",
        encoding="utf-8",
    )
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(repo / "run.py"), "check", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr  # warnings, not errors
    assert (
        f"{rules / 'r.yaml'}:4: regex trigger 're:^(a+)+$' has a nested quantifier" in (done.stderr)
        or "r.yaml:4: regex trigger 're:^(a+)+$' has a nested quantifier" in done.stderr
    )
    assert "r.yaml:8: trigger" in done.stderr and "U+200B" in done.stderr
    assert "re:^ok" not in done.stderr


INVISIBLE_RULES = """
rules:
  - id: filter
    triggers: ["*badword*"]
    steps:
      - {plugin: ADJUST, input: "blocked: [{QUESTION}]"}
  - id: greet
    triggers: ["hello *"]
    steps:
      - {plugin: ADJUST, input: "hi {QUESTION}"}
  - id: hidden_trigger
    triggers: ["zero\\u200bwidth"]
    steps:
      - {plugin: ADJUST, input: "found"}
"""


@pytest.mark.parametrize(
    "sneaky",
    [
        "bad\u200bword",  # zero-width space
        "bad\u200cword",  # zero-width non-joiner
        "bad\u200dword",  # zero-width joiner
        "bad\u2060word",  # word joiner
        "bad\ufeffword",  # byte-order mark
        "bad\u00adword",  # soft hyphen
        "b\u200ba\u200bd\u200bw\u200bo\u200br\u200bd",
        "bad\u202eword",  # bidi override
    ],
)
async def test_invisible_characters_cannot_bypass_a_trigger(sneaky: str) -> None:
    async with Bot({"r.yaml": INVISIBLE_RULES}) as bot:
        reply = await bot.ask(f"you are a {sneaky} indeed")
        assert reply.rule == "filter"
        assert reply.text == "blocked: [you are a indeed]"


async def test_questions_stay_aligned_and_triggers_with_invisible_characters_match() -> None:
    async with Bot({"r.yaml": INVISIBLE_RULES}) as bot:
        assert await bot.say("\u200bhello\u200b Ann\u200b") == "hi Ann"
        assert await bot.say("hello 世\u200b界") == "hi 世界"
        assert await bot.say("zerowidth") == "found"  # the trigger's own U+200B is ignored too


def test_normalise_removes_only_invisible_format_characters() -> None:
    assert normalise("  ａｂｃ\u200b  ") == "abc"  # NFKC + Cf removal + trim
    assert normalise("naïve café") == "naïve café"
    assert normalise("plain ascii ") == "plain ascii"
    assert normalise("emoji 👍🏽 ok") == "emoji 👍🏽 ok"
