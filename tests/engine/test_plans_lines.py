"""The FAQ way's plain check: the run.done line the engine
writes itself is the one :func:`tmy.engine.tracing.log_run` writes, for texts and ids
drawn from every class of character orjson treats apart; the kept verdicts of joined
ids cannot be poisoned by another split of the same characters; the chat switch the
engine asks is the one it holds.

Real rules, a real SQLite store, logging into a real buffer.
"""

from __future__ import annotations

import io
import random
import re
from typing import Any

import orjson
import pytest

from tests.support.engines import engine_of
from tmy import logs
from tmy.engine import said
from tmy.engine.core import Engine
from tmy.engine.plans import _FRAC, _SUB_MS
from tmy.engine.said import plain as _plain
from tmy.engine.switch import ChatSwitch
from tmy.engine.tracing import log_run
from tmy.logs import PREVIEW
from tmy.message import Message
from tmy.store import Store

FAQ = 'We open at 9 "sharp"'

RULES = """
rules:
  - id: faq
    triggers: ["hours", "when open*", "re:^ask (?P<QUESTION>.*)$"]
    steps:
      - {plugin: ADJUST, input: "We open at 9 \\"sharp\\""}
  - id: three
    triggers: ["three *"]
    steps:
      - {plugin: ADJUST, input: "one"}
      - {plugin: ADJUST, input: [1, 2]}
      - {plugin: ADJUST, input: "We open at 9 \\"sharp\\""}
"""
QUICK_RULES = RULES.replace(', "re:^ask (?P<QUESTION>.*)$"', "")  # the index's quick way

_STAMP = re.compile(rb'"timestamp":"[^"]*"')
# beyond ASCII: printable (Latin, CJK, astral), and not (no-break and zero-width spaces,
# line and paragraph separators, a byte-order mark, bidi marks), combining marks
_WIDE = ["é", "营", "业", "😀", "\u00a0", "\u200b", "\u2028", "\u2029", "\ufeff", "\u200f",
         "\u0301", "\u00ad", "Ω", "ß", "ﬁ", "Ａ"]  # fmt: skip
# every class of ASCII character orjson writes apart, and the printable rest
_SPECIAL = ['"', "\\", "\t", "\n", "\x00", "\x1b", "\x1f", "\x7f", " ", "/", "'", "<", "&"]
_ALPHABET = _SPECIAL + [chr(c) for c in range(0x21, 0x7F)]


pytestmark = pytest.mark.usefixtures("nothing_bound")  # as in a daemon: conftest.py


def make_engine(store: Store, rules: str = RULES, **kw: Any) -> Engine:
    return engine_of(rules, store, **kw)


def run_lines(buffer: io.BytesIO) -> list[bytes]:
    logs.flush()
    return [x for x in buffer.getvalue().splitlines() if b'"event":"run.done"' in x]


async def answered_as_log_run(engine: Engine, buffer: io.BytesIO, message: Message) -> bytes:
    """Hand ``message`` to the engine; its run.done line must be log_run's for the same run
    (byte for byte but the timestamp). The engine's line."""
    mark = len(run_lines(buffer))
    reply = await engine.handle(message)
    text = message.text  # as the engine left it (valid Unicode)
    assert (reply.text, reply.error) == (FAQ, None) and reply.rule in ("faq", "three"), reply
    (line,) = run_lines(buffer)[mark:]
    match = engine.rulebook.index.match(text)
    assert match is not None
    seconds = orjson.loads(line)["ms"] / 1000  # the general way times the run apart
    log_run(match, message, text, reply, seconds, True, False, trace=reply.trace_id)
    (want,) = run_lines(buffer)[mark + 1 :]
    assert _STAMP.sub(b"", line) == _STAMP.sub(b"", want), (text, message.user)
    return line


def _word(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(size))


@pytest.mark.parametrize("rules", [RULES, QUICK_RULES], ids=["filtered", "quick"])
async def test_random_texts_and_ids_give_log_runs_line(
    store: Store, log_buffer: io.BytesIO, rules: str
) -> None:
    """600 messages, each text and id drawn from quotes, backslashes, control characters,
    DEL and printable ASCII (the FAQ way's plain check, either answer), through three
    triggers (prefix, exact, regex QUESTION), texts near and past the line's cut; with
    a regex in the rulebook (the full lookup) and without (the index's quick way)."""
    engine = make_engine(store, rules)
    rng = random.Random(24)
    for n in range(600):
        kind = n % 3
        if kind == 0:
            text = "when open " + _word(rng, rng.choice([0, 1, 3, 12, PREVIEW - 10, PREVIEW + 3]))
        elif kind == 1:
            text = "hours"
        else:
            text = "ask " + _word(rng, rng.choice([1, 5, 30]))
        if engine.rulebook.index.match(text) is None:  # "ask \n" (the regex), no regex
            continue
        user = _word(rng, rng.choice([0, 1, 4])) if n % 4 else "u1"
        chat = _word(rng, rng.choice([1, 4])) if n % 5 else "g1"
        platform = "test" if n % 7 else _word(rng, 3)
        message = Message(text, user=user, chat=chat, platform=platform)
        await answered_as_log_run(engine, log_buffer, message)


async def test_texts_and_ids_beyond_ascii_give_log_runs_line(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """Beyond ASCII the engine takes the general way, which hands a constant rule's line to
    ConstantPlan.log (its plain check now lets printable non-ASCII through unescaped):
    one-step and three-step rules, 400 messages."""
    engine = make_engine(store)
    rng = random.Random(25)
    alphabet = _ALPHABET + _WIDE * 6
    for n in range(400):
        head = ("when open ", "three ")[n % 2]
        text = head + "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 4, 20])))
        if engine.rulebook.index.match(text) is None:
            continue
        user = "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 3]))) if n % 3 else "ü"
        chat = "".join(rng.choice(_WIDE) for _ in range(2)) if n % 4 else "g1"
        await answered_as_log_run(engine, log_buffer, Message(text, user=user, chat=chat))


@pytest.mark.parametrize(
    ("splits"),
    [
        [("ab", "c", "test"), ("a", "bc", "test"), ("", "abc", "test"), ("abc", "t", "est")],
        [('a"', "b", "test"), ("a", '"b', "test"), ("a", "b", '"test')],
        [("a\\", "b", "t"), ("a", "\\b", "t"), ("a", "b", "\\t")],
        [("a\tb", "c", "t"), ("a", "\tbc", "t")],
    ],
)
async def test_one_joined_key_from_several_splits_gives_each_its_own_line(
    store: Store, log_buffer: io.BytesIO, splits: list[tuple[str, str, str]]
) -> None:
    """The kept verdict is per joined ids: another split of the same characters (which
    joins to the same key) is as plain or not, and each line names its own ids."""
    engine = make_engine(store)
    for user, chat, platform in splits * 2:
        message = Message("when open now", user=user, chat=chat, platform=platform)
        line = await answered_as_log_run(engine, log_buffer, message)
        event = orjson.loads(line)
        assert (event["user"], event["chat"], event["platform"]) == (user, chat, platform)


async def test_the_kept_verdicts_cleared_midway_change_no_line(
    store: Store, log_buffer: io.BytesIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    said.SAID_IDS.clear()
    monkeypatch.setattr(said.SAID_IDS, "kept", 2)
    engine = make_engine(store)
    for user in ("u1", 'q"', "u2", "b\\", "u1", 'q"', "t\tab", "u1"):
        await answered_as_log_run(engine, log_buffer, Message("hours", user=user, chat="g"))
        assert len(said.SAID_IDS) <= 2


async def test_faq_lines_under_a_fresh_on_verdict_are_log_runs(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """With the App's chat switch: once the verdict is cached "on" the FAQ way writes the
    line itself (verdicts read from the dict taken when the engine was made)."""
    switch = ChatSwitch(store)
    engine = make_engine(store, switch=switch)
    for user in ("u1", 'we"ird', "u1", "x\\y"):
        await answered_as_log_run(engine, log_buffer, Message("hours", user=user, chat="g1"))
    assert switch.cached(Message("hours", user="u1", chat="g1")) is False


async def test_a_switch_assigned_after_the_engine_is_made_is_the_one_asked(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """The FAQ way reads the engine's switch as it is now: an embedder (or an Engine
    subclass) that sets ``engine.switch`` after construction gets the new switch's
    verdict, "off" here."""
    first, second = ChatSwitch(store), ChatSwitch(store)
    engine = make_engine(store, switch=first)
    here = Message("hours", user="u1", chat="g1", platform="test")
    for _ in range(2):  # the first switch's fresh "on" verdict for g1
        reply = await engine.handle(Message("hours", user="u1", chat="g1", platform="test"))
        assert reply.text == FAQ
    assert first.cached(here) is False
    engine.switch = second
    await second.set(here, True)  # the engine's switch now: g1 off
    off = await engine.handle(Message("hours", user="u1", chat="g1", platform="test"))
    assert off.rule is None and off.reason is not None and "switched off" in off.reason


def test_plain_is_what_orjson_writes_as_it_is_for_every_code_point() -> None:
    """_plain(c) only when orjson writes c as its UTF-8 between the quotes (every code
    point, surrogates included): the plain way never writes what orjson would escape."""
    wrong = []
    for c in range(0x110000):
        ch = chr(c)
        if _plain(ch) and orjson.dumps(ch) != b'"' + ch.encode() + b'"':
            wrong.append(hex(c))
    assert wrong == []
    assert not _plain('"') and not _plain("\\") and not _plain("\x00") and _plain("é")


def test_the_ms_tables_are_orjsons_float() -> None:
    """A step's ms as the FAQ way writes it (table below a millisecond, else whole ms and
    the table's fraction) is orjson's rendering of micros / 1000, up to a day."""
    rng = random.Random(5)
    for micros in range(1000):
        assert _SUB_MS[micros].encode() == orjson.dumps(micros / 1000)
    for micros in [*range(1000, 200_000), *(rng.randrange(86_400_000_000) for _ in range(50_000))]:
        assert f"{micros // 1000}{_FRAC[micros % 1000]}".encode() == orjson.dumps(micros / 1000)
