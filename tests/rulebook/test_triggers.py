"""Triggers: kinds, normalisation, MAGIC/QUESTION, precedence, filters, sessions, dead ones."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.log_helpers import read_log
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.rulebook.triggers import backtracking_risk, nested_quantifier, normalise, parse_trigger
from tmy.testing import Bot, serving


def rule(rid: str, *triggers: str, **extra: Any) -> dict[str, Any]:
    """A rule whose reply shows which rule fired and what it captured."""
    step = {"plugin": "ADJUST", "input": rid + "|{MAGIC}|{QUESTION}"}
    return {"id": rid, "triggers": list(triggers), "steps": [step], **extra}


def book(*rules: dict[str, Any]) -> dict[str, str]:
    return {"t.yaml": yaml.safe_dump({"rules": list(rules)}, allow_unicode=True, sort_keys=False)}


async def answer(rules: dict[str, str], text: str, **kw: Any) -> str:
    async with Bot(rules) as bot:
        return (await bot.ask(text, **kw)).text


# -- kinds, MAGIC and QUESTION --------------------------------------------------------

KINDS = [
    # (trigger, text, expected "rule|MAGIC|QUESTION")
    ("hello", "hello", "r|hello|"),
    ("translate *", "translate Good Morning", "r|translate|Good Morning"),
    ("翻译*", "翻译 你好世界 ", "r|翻译|你好世界"),
    ("*吗", "你好吗", "r|吗|你好"),
    ("*please", "a joke please", "r|please|a joke"),
    ("*weather*", "how is the weather today", "r|weather|how is the today"),
    ("*", "anything at all", "r||anything at all"),
]


@pytest.mark.parametrize(("trigger", "text", "expected"), KINDS)
async def test_trigger_kinds_set_magic_and_question(trigger: str, text: str, expected: str) -> None:
    assert await answer(book(rule("r", trigger)), text) == expected


@pytest.mark.parametrize(
    ("trigger", "text"),
    [("hello", "hello there"), ("hello", "oh hello"), ("joke*", "a joke"), ("*joke", "joke now"),
     ("*joke*", "jok"), ("re:^\\d+$", "12a")],
)  # fmt: skip
async def test_non_matching_text_reaches_no_rule(trigger: str, text: str) -> None:
    async with Bot(book(rule("r", trigger))) as bot:
        reply = await bot.ask(text)
    assert reply.rule is None
    assert reply.text == ""
    assert reply.error is None


async def test_regex_named_groups_become_locals_and_magic_is_the_match() -> None:
    r = rule("w", r"re:(?P<city>[A-Z]\w+) weather( in (?P<QUESTION>\w+))?")
    r["steps"][0]["input"] = "{city}|{MAGIC}|{QUESTION}"
    rules = book(r)
    assert await answer(rules, "Paris weather in May please") == "Paris|Paris weather in May|May"
    assert await answer(rules, "Rome weather") == "Rome|Rome weather|"


async def test_pre_input_step_result_starts_equal_to_question() -> None:
    r = {"id": "p", "triggers": ["say *"], "steps": [{"plugin": "ADJUST"}]}
    assert await answer(book(r), "say Hello World") == "Hello World"


async def test_question_keeps_the_users_capitals_although_matching_is_folded() -> None:
    assert await answer(book(rule("r", "Translate *")), "TRANSLATE Good Morning") == (
        "r|Translate|Good Morning"
    )


# -- normalisation --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["hello", "  hello \n", "HELLO", "HeLLo", "ｈｅｌｌｏ", "\u3000hello\u3000"],
)
async def test_nfkc_trim_and_casefold(text: str) -> None:
    assert await answer(book(rule("r", "hello")), text) == "r|hello|"


async def test_casefold_handles_more_than_lower() -> None:
    rules = book(rule("r", "STRASSE"), rule("f", "ﬁle*"))
    async with Bot(rules) as bot:
        assert (await bot.ask("straße")).rule == "r"
        assert (await bot.ask("FILE x")).text == "f|file|x"


async def test_case_sensitive_rule() -> None:
    rules = book(rule("cs", "Hello", case_sensitive=True), rule("ci", "*", priority=-1))
    async with Bot(rules) as bot:
        assert (await bot.ask("Hello")).rule == "cs"
        assert (await bot.ask("hello")).rule == "ci"
        assert (await bot.ask("HELLO")).rule == "ci"


async def test_case_sensitive_regex() -> None:
    rules = book(rule("cs", "re:^Yes$", case_sensitive=True), rule("ci", "re:^no$"))
    async with Bot(rules) as bot:
        assert (await bot.ask("yes")).rule is None
        assert (await bot.ask("Yes")).rule == "cs"
        assert (await bot.ask("NO")).rule == "ci"


# -- precedence -----------------------------------------------------------------------

PAIRS = [
    # (loser, winner, text) — the loser comes first in the file, so file order cannot explain it
    (rule("loser", "joke*"), rule("winner", "joke"), "joke"),
    (rule("loser", "*please"), rule("winner", "joke*"), "joke please"),
    (rule("loser", "*joke*"), rule("winner", "*please"), "a joke please"),
    (rule("loser", "re:joke"), rule("winner", "*joke*"), "a joke now"),
    (rule("loser", "*"), rule("winner", "re:^a"), "abc"),
    (rule("loser", "joke"), rule("winner", "*", priority=1), "joke"),
    (rule("loser", "joke", priority=-1), rule("winner", "*joke*"), "joke"),
    (rule("loser", "joke*"), rule("winner", "joke about*"), "joke about cats"),
    (rule("loser", "*ok*"), rule("winner", "*joke*"), "a joke now"),
    (rule("loser", "*cats"), rule("winner", "*big cats"), "big cats"),
]


@pytest.mark.parametrize(
    ("loser", "winner", "text"), PAIRS, ids=[p[2] + "-" + str(i) for i, p in enumerate(PAIRS)]
)
async def test_precedence(loser: dict[str, Any], winner: dict[str, Any], text: str) -> None:
    async with Bot(book(loser, winner)) as bot:
        assert (await bot.ask(text)).rule == "winner"


async def test_file_order_breaks_ties() -> None:
    async with Bot(book(rule("first", "hi"), rule("second", "hi"))) as bot:
        assert (await bot.ask("hi")).rule == "first"


async def test_file_order_across_files_follows_sorted_paths(tmp_path: Path) -> None:
    for name, rid in (("b.yaml", "from_b"), ("a.yaml", "from_a"), ("sub/0.yml", "from_sub")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        text = book(rule(rid, "hi" if rid != "from_sub" else "sub"))["t.yaml"]
        (tmp_path / name).write_text(text, encoding="utf-8")
    async with Bot(tmp_path) as bot:
        assert (await bot.ask("hi")).rule == "from_a"
        assert (await bot.ask("sub")).rule == "from_sub"  # .yml below subfolders loads too


async def test_matching_many_rules_picks_the_right_one() -> None:
    rules = [rule(f"r{i}", f"word{i}", f"cmd{i} *") for i in range(2000)]
    async with Bot(book(*rules)) as bot:
        assert (await bot.ask("WORD1234")).text == "r1234|word1234|"
        assert (await bot.ask("cmd77 go")).text == "r77|cmd77|go"
        assert (await bot.ask("cmd2000 go")).rule is None


async def test_word_prefixes_and_longer_prefixes_of_the_same_length_both_fire() -> None:
    """ "say *" is looked up by the text's first word; "a b *" (same length, two words)
    and "sa*" by length: each fires where it should, and the longest literal wins."""
    rules = book(rule("word", "say *"), rule("two", "a b *"), rule("short", "sa*"))
    async with Bot(rules) as bot:
        assert (await bot.ask("say hi there")).text == "word|say|hi there"
        assert (await bot.ask("a b c")).text == "two|a b|c"
        assert (await bot.ask("sa")).text == "short|sa|"
        assert (await bot.ask("sayonara")).text == "short|sa|yonara"
        assert (await bot.ask("say")).text == "word|say|"  # "say *" fires on a bare "say"
        assert (await bot.ask("a bc")).rule is None
        low = await bot.ask("SAY  Loud ")  # folded match, the user's capitals in QUESTION
        assert low.text == "word|say|Loud"


# -- filters --------------------------------------------------------------------------


async def test_platform_filter_falls_through_to_the_next_candidate() -> None:
    rules = book(rule("tg", "hi", platforms=["telegram"]), rule("any", "*"))
    async with Bot(rules) as bot:
        assert (await bot.ask("hi", platform="telegram")).rule == "tg"
        assert (await bot.ask("hi", platform="qq")).rule == "any"


async def test_chat_filter() -> None:
    async with Bot(book(rule("g", "hi", chats=["g1", "g2"]))) as bot:
        assert (await bot.ask("hi", chat="g2")).rule == "g"
        assert (await bot.ask("hi", chat="g3")).rule is None
        assert (await bot.ask("hi")).rule is None  # a private chat is not g1/g2


async def test_private_and_group_filters() -> None:
    rules = book(rule("dm", "hi", private=True), rule("grp", "hi", private=False))
    async with Bot(rules) as bot:
        assert (await bot.ask("hi")).rule == "dm"  # no chat: the private chat with the bot
        assert (await bot.ask("hi", chat="room")).rule == "grp"
        assert (await bot.ask("hi", chat="room", private=True)).rule == "dm"


async def test_admin_only_rules() -> None:
    rules = book(rule("admin", "reload", admin_only=True))
    async with Bot(rules, admins=frozenset({"test:boss", "root"})) as bot:
        assert (await bot.ask("reload", user="boss")).rule == "admin"
        assert (await bot.ask("reload", user="root", platform="qq")).rule == "admin"
        assert (await bot.ask("reload", user="boss", platform="qq")).rule is None
        assert (await bot.ask("reload", user="mallory")).rule is None
        assert (await bot.ask("reload", user="x", is_admin=True)).rule == "admin"


# -- sessions -------------------------------------------------------------------------


def session_rules(seconds: float = 30) -> dict[str, str]:
    return book(rule("quiz", "quiz", session=seconds), rule("help", "help"))


async def test_follow_ups_reach_the_session_rule_without_the_trigger() -> None:
    async with Bot(session_rules()) as bot:
        assert (await bot.ask("what?")).rule is None
        assert (await bot.ask("quiz", chat="room")).text == "quiz|quiz|"
        follow = await bot.ask("Paris", chat="room")
        assert follow.rule == "quiz"
        assert follow.text == "quiz||Paris"  # no trigger: MAGIC "", QUESTION the whole text
        assert (await bot.ask("and again", chat="room")).rule == "quiz"


async def test_session_belongs_to_one_user_in_one_chat() -> None:
    async with Bot(session_rules()) as bot:
        await bot.ask("quiz", user="ann", chat="room")
        assert (await bot.ask("Paris", user="bob", chat="room")).rule is None
        assert (await bot.ask("Paris", user="ann", chat="other")).rule is None
        assert (await bot.ask("Paris", user="ann", chat="room", platform="qq")).rule is None
        assert (await bot.ask("Paris", user="ann", chat="room")).rule == "quiz"


async def test_a_trigger_still_wins_during_a_session() -> None:
    async with Bot(session_rules()) as bot:
        await bot.ask("quiz")
        assert (await bot.ask("help")).rule == "help"


async def test_rule_without_session_keeps_none_open() -> None:
    async with Bot(session_rules()) as bot:
        await bot.ask("help")
        assert (await bot.ask("Paris")).rule is None


async def test_session_ends_after_its_seconds() -> None:
    async with Bot(session_rules(0.5)) as bot:
        await bot.ask("quiz")
        await asyncio.sleep(1.2)  # well past the 0.5 s session
        assert (await bot.ask("Paris")).rule is None


# -- dead triggers --------------------------------------------------------------------


async def test_dead_trigger_warning_names_file_line_and_winner() -> None:
    async with Bot(book(rule("a", "hi"), rule("b", "hi", "hello"))) as bot:
        warnings = bot.engine.rulebook.warnings
    assert len(warnings) == 1
    assert warnings[0].startswith("t.yaml:")
    assert "'hi'" in warnings[0] and "'b'" in warnings[0] and "'a'" in warnings[0]
    assert "never fire" in warnings[0]


async def test_higher_priority_catch_all_kills_every_other_trigger() -> None:
    rules = book(rule("all", "*", priority=9), rule("x", "joke*"), rule("y", "*cats"))
    async with Bot(rules) as bot:
        dead = "\n".join(bot.engine.rulebook.warnings)
    assert "'joke*'" in dead and "'*cats'" in dead


async def test_no_warning_when_the_trigger_can_still_fire() -> None:
    rules = book(
        rule("short", "jo*"),
        rule("long", "joke*"),  # longer literal: wins for "joke…", "jo…" still goes to short
        rule("tg", "hi", platforms=["telegram"]),
        rule("open", "hi"),  # filtered winner: other platforms still reach "open"
        rule("re1", "re:x"),
        rule("re2", "re:x"),  # regex triggers are not analysed
    )
    async with Bot(rules) as bot:
        assert bot.engine.rulebook.warnings == ()


@pytest.mark.parametrize(
    ("source", "case_sensitive", "anchor"),
    [
        (r"re:^rx0-(?P<word>\w+)$", False, "rx0-"),
        (r"re:^Hello (?P<n>\w+)", True, "Hello "),
        (r"re:^HeLLo", False, "hello"),
        ("re:(?i)^Hello", True, ""),
        ("re:hello", False, ""),
        ("re:(?m)^ab", False, ""),
        (r"re:^\p{Han}+", False, ""),
    ],
)
def test_a_regex_anchored_on_literal_text_is_skipped_for_other_texts(
    source: str, case_sensitive: bool, anchor: str
) -> None:
    assert parse_trigger(source, case_sensitive=case_sensitive).anchor == anchor


def test_anchored_regexes_still_match_what_they_should() -> None:
    from tmy.executors import default_registry
    from tmy.rulebook.loader import load_sources

    book = load_sources(
        [(Path("r.yaml"), "rules:\n  - id: rx\n    triggers: ['re:^RX-(?P<QUESTION>\\w+)$']\n"
          "    steps: [{plugin: ADJUST}]\n")],
        default_registry(),
    )  # fmt: skip
    index = book.index
    assert index.match("rx-abc").question == "abc"  # case folded like any trigger
    assert index.match("  RX-abc ").question == "abc"
    assert index.match("xrx-abc") is None


# -- the user's text as sent: matched on NFKC, QUESTION cut from the original -----------------

SENT = "我的猫叫咪咪，它３岁！"  # full-width comma, digit and exclamation mark: NFKC folds them


async def test_remember_stores_the_text_as_sent_not_its_nfkc_form() -> None:
    from tmy.memory import entries

    rules = {
        "m.yaml": "rules:\n"
        '  - {id: remember, triggers: ["记住*"], steps: [{plugin: REMEMBER}]}\n'
        '  - {id: echo, triggers: ["记住 *"], priority: -1, steps: [{plugin: ADJUST}]}\n'
    }
    async with Bot(rules) as bot:
        reply = await bot.ask(f"记住 {SENT}", user="ann")
        assert reply.text == f"好的，我记住了：{SENT}"
        stored = await entries.owner_entries(
            bot.engine.services.store, entries.user_key("test", "ann")
        )
        assert [e["text"] for e in stored] == [SENT]
        assert reply.steps[0].input == SENT  # what REMEMBER (or an LLM step) was given


AS_SENT = [
    # (trigger, text, expected "rule|MAGIC|QUESTION"): QUESTION keeps full-width forms
    ("记住*", f"记住 {SENT}", f"r|记住|{SENT}"),
    ("ask *", "ASK  Ｈｅｌｌｏ，Ｗｏｒｌｄ！ ", "r|ask|Ｈｅｌｌｏ，Ｗｏｒｌｄ！"),
    ("*吗？", "你３岁了吗？", "r|吗?|你３岁了"),  # MAGIC: the trigger's literal, as before
    ("*吗?", "你３岁了吗？", "r|吗?|你３岁了"),  # the trigger's own form does not matter
    ("*find*", "ａ，ＦＩＮＤ ｘ！", "r|find|ａ， ｘ！"),
    ("*", " Ｈｉ，ａｌｌ！ ", "r||Ｈｉ，ａｌｌ！"),
    ("ask *", "ask ß ﬁ㍻ ２", "r|ask|ß ﬁ㍻ ２"),  # casefold and NFKC change lengths
    ("straße *", "STRASSE Ｎｏ．１", "r|straße|Ｎｏ．１"),  # the literal folds longer (ss)
    ("*ﬁle", "ｍｙ ﬁle", "r|file|ｍｙ"),
    ("hi *", "hi 世\u200b界！", "r|hi|世界！"),  # invisible characters stay out
    ("note *", "note cafe\u0301 ２", "r|note|cafe\u0301 ２"),  # combining mark kept as sent
]


@pytest.mark.parametrize(("trigger", "text", "expected"), AS_SENT)
async def test_question_is_cut_from_the_text_as_sent(
    trigger: str, text: str, expected: str
) -> None:
    assert await answer(book(rule("r", trigger)), text) == expected


async def test_case_sensitive_triggers_cut_from_the_text_as_sent_too() -> None:
    rules = book(rule("r", "Ask *", case_sensitive=True))
    assert await answer(rules, "Ask ２＋２，ｐｌｅａｓｅ") == "r|Ask|２＋２，ｐｌｅａｓｅ"


async def test_regex_named_groups_and_magic_are_as_sent() -> None:
    r = rule("w", r"re:^(?P<city>\w+) weather in (?P<QUESTION>.+?)[?!]?$")
    r["steps"][0]["input"] = "{city}|{MAGIC}|{QUESTION}"
    assert await answer(book(r), "Ｐａｒｉｓ weather in ５ days！") == (
        "Ｐａｒｉｓ|Ｐａｒｉｓ weather in ５ days！|５ days"
    )


async def test_a_session_follow_up_is_the_text_as_sent() -> None:
    async with Bot(session_rules()) as bot:
        await bot.ask("quiz", chat="room")
        assert (await bot.ask(" Ｐａｒｉｓ！ ", chat="room")).text == "quiz||Ｐａｒｉｓ！"


def test_text_map_keeps_the_normalised_cut_where_nfkc_composes_across_it() -> None:
    from tmy.rulebook.index import TriggerIndex
    from tmy.rulebook.triggers import TextMap

    sent = TextMap(f"记住 {SENT}")
    assert sent.after(2, True) == SENT and sent.before(3, True) == "记住"
    odia = TextMap("\u0b47\u0b3e x")  # two starters NFKC composes into one (U+0B4B)
    assert odia.index(0, False, up=True) == 0 and odia.index(1, False, up=True) == 2
    assert odia.after(2, False) == "x"

    class R:
        id, priority = "r", 0
        triggers = (parse_trigger("re:(?P<QUESTION>\u0b4b)", case_sensitive=False),)

    match = TriggerIndex([R]).match("ａ \u0b47\u0b3e")
    assert match is not None and match.question == "\u0b47\u0b3e"  # mapped: a clean cut


def test_text_map_boundaries_agree_with_normalising_the_original_prefix() -> None:
    """Every mapped cut is where the original's own normalised prefix reaches the position."""
    import random
    import unicodedata

    from tmy.rulebook.triggers import TextMap, normal_form

    alphabet = [*"ab Xy记住，。！？３Ａ", "ﬁ", "ß", "㍻", "\u0301", "e", "\u0b47", "\u0b3e",
                "\u1100", "\u1161", "\u11a8", "\u3000", "\u00a8", "\u200b", "İ", "①"]  # fmt: skip
    rnd = random.Random(19)
    for _ in range(400):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 16)))
        cleaned, full = normal_form(text)
        tm = TextMap(cleaned, full)
        lead = len(full) - len(full.lstrip())
        for folded in (False, True):

            def length(k: int, folded: bool = folded, cleaned: str = cleaned) -> int:
                piece = unicodedata.normalize("NFKC", cleaned[:k])
                return len(piece.casefold() if folded else piece)

            size = len(full.strip().casefold() if folded else full.strip())
            for pos in range(size + 1):
                up, down = tm.index(pos, folded, up=True), tm.index(pos, folded, up=False)
                if up is not None:
                    assert length(up) >= pos + lead or up == len(cleaned), (text, pos)
                if down is not None:
                    assert length(down) <= pos + lead, (text, pos)
                if up is not None and down is not None:
                    assert down <= up, (text, pos)


# -- from test_hardening_triggers.py (issue 7 hardening: ReDoS and invisible characters)


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
    async with (
        serving({"r.yaml": REDOS_RULES}) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=60) as client,
    ):
        yield client


@pytest.mark.parametrize("attack", ["a" * 40 + "!", "a" * 70 + "!", "x" * 60])
async def test_catastrophic_regex_does_not_stall_other_chats(served, attack: str) -> None:
    """Unbounded, these texts backtrack for hours on the event loop; with the regex budget
    the attack is no match and a ping sent meanwhile is answered (bounded by a timeout,
    not timed)."""
    client = served

    async def ping() -> dict[str, Any]:
        await asyncio.sleep(0.05)  # let the attack reach the engine first
        return (await client.post("/v1/messages", json={"text": "ping", "user": "b"})).json()

    async with asyncio.timeout(30):
        attack_reply, pinged = await asyncio.gather(
            client.post("/v1/messages", json={"text": attack, "user": "mallory"}), ping()
        )
    assert attack_reply.status_code == 200
    assert pinged["answer"] == "pong"


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


@pytest.mark.slow  # run.py check processes
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
    repo = Path(__file__).resolve().parents[2]
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
