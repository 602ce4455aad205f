"""Hardening of trigger matching: regex triggers cannot stall the daemon (ReDoS), and
invisible characters cannot smuggle a word past a trigger."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.log_helpers import read_log
from tmy.adapters.http import HttpAdapter
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.rulebook.triggers import backtracking_risk, nested_quantifier, normalise
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
    assert normalise("cafe\u200b\u0301") == normalise("café") == "café"  # composed after
    assert normalise("naïve café") == "naïve café"
    assert normalise("plain ascii ") == "plain ascii"
    assert normalise("emoji 👍🏽 ok") == "emoji 👍🏽 ok"


def rule_warnings(triggers: list[str]) -> list[str]:
    """``check``'s warnings for one rule per trigger (rule ``r<n>``, trigger on line 3n+3)."""
    text = "rules:\n" + "".join(
        f"  - id: r{n}\n    triggers:\n      - {json.dumps(trigger)}\n"
        "    steps: [{plugin: ADJUST, input: x}]\n"
        for n, trigger in enumerate(triggers)
    )
    return list(load_sources([(Path("w.yaml"), text)], default_registry()).warnings)


def test_check_warns_about_repeated_alternatives_that_overlap() -> None:
    found = rule_warnings(["re:^(a|aa)+$", "re:(.|\\s)*x", "re:^(a|ab|b)+$", "re:^(?:foo|\\w)+$"])
    assert found == [
        "w.yaml:4: regex trigger 're:^(a|aa)+$' repeats a group that matches 'aa' both once"
        " and as several repetitions: it can backtrack exponentially on a near-miss;"
        " each message gives all regex triggers together 50 ms, then they are abandoned",
        "w.yaml:8: regex trigger 're:(.|\\\\s)*x' repeats a choice whose alternatives both"
        " match ' ': it can backtrack exponentially on a near-miss;"
        " each message gives all regex triggers together 50 ms, then they are abandoned",
        "w.yaml:12: regex trigger 're:^(a|ab|b)+$' repeats a group that matches 'ab' both once"
        " and as several repetitions: it can backtrack exponentially on a near-miss;"
        " each message gives all regex triggers together 50 ms, then they are abandoned",
        "w.yaml:16: regex trigger 're:^(?:foo|\\\\w)+$' repeats a group that matches 'foo' both"
        " once and as several repetitions: it can backtrack exponentially on a near-miss;"
        " each message gives all regex triggers together 50 ms, then they are abandoned",
    ]


def test_backtracking_risk_spares_ordinary_patterns_and_reads_regex_module_syntax() -> None:
    for pattern in ["^(a|aa)+$", "(?:a|a)*$", "(x|y|xy)*z", r"^(\p{Han}+)+$", r"^(?<n>a+)+$"]:
        assert backtracking_risk(pattern), pattern
    for pattern in [
        "(foo|bar)+",
        "(fo|foo)+$",  # every repetition starts with f: one way only
        "(ab|ac)*",
        r"(\w|\d)+$",  # one character class, not a choice
        r"^(hi|hello|hey)\b (?P<QUESTION>.+)$",
        r"^(?=.*tea)(?!.*coffee)",
        r"^(\w)\1$",
        r"(?:\s|,)+",
        "[[:alpha:]]+",
    ]:
        assert backtracking_risk(pattern) is None, pattern


def test_check_prints_no_stray_python_warnings_for_regex_module_syntax() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = rule_warnings(["re:^[[:alpha:]]+$", "re:^\\p{Han}+$"])
    assert found == []
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(
    "sneaky",
    [
        "bad\u034fword",  # combining grapheme joiner (Mn, default-ignorable)
        "bad\u3164word",  # Hangul filler (Lo, drawn blank)
        "bad\ufe0fword",  # variation selector after a letter
        "bad\U000e0101word",  # ideographic variation selector after a letter
        "bad\u180bword",  # Mongolian free variation selector
    ],
)
async def test_other_default_ignorable_characters_cannot_bypass_a_trigger(sneaky: str) -> None:
    async with Bot({"r.yaml": INVISIBLE_RULES}) as bot:
        reply = await bot.ask(f"you are a {sneaky} indeed")
        assert reply.rule == "filter"
        assert reply.text == "blocked: [you are a indeed]"


async def test_emoji_keep_their_presentation_selectors_in_question() -> None:
    async with Bot({"r.yaml": INVISIBLE_RULES}) as bot:
        assert await bot.say("hello I \u2764\ufe0f you 1\ufe0f\u20e3") == (
            "hi I \u2764\ufe0f you 1\ufe0f\u20e3"
        )
    assert normalise("I \u2764\ufe0f") == "I \u2764\ufe0f"


async def test_a_regex_trigger_written_with_an_invisible_character_still_matches() -> None:
    rules = (
        "rules:\n  - id: r\n    triggers: ['re:^bad\u200bword (?P<QUESTION>.+)$']\n"
        "    steps: [{plugin: ADJUST, input: 'got {QUESTION}'}]\n"
    )
    async with Bot({"r.yaml": rules}) as bot:
        assert await bot.say("badword here") == "got here"
        assert await bot.say("bad\u200bword there") == "got there"


def test_check_names_every_invisible_character_it_ignores() -> None:
    found = rule_warnings(["*bad\ufe0fword*", "*\u2764\ufe0f*", "x\u034fy", "re:a\u200bb"])
    assert found == [
        "w.yaml:4: trigger '*bad\ufe0fword*' contains invisible characters (U+FE0F):"
        " they are ignored (removed from messages and triggers before matching)",
        "w.yaml:12: trigger 'x\u034fy' contains invisible characters (U+034F):"
        " they are ignored (removed from messages and triggers before matching)",
        "w.yaml:16: trigger 're:a\\u200bb' contains invisible characters (U+200B):"
        " they are ignored (removed from messages and triggers before matching)",
    ]
