"""The engine's units (tmy/engine/core.py and the modules carved out of it).

Gates (sizes, ids, admins, the ``.tmy`` command intercept, the chat switch),
trace ids, reply assembly (answers, error texts, what a finished run keeps),
cooldowns and the services, each through real objects: rules loaded by the
real loader, a real Registry, a SQLite store in ``tmp_path``, the real chat
switch and command front end.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest

from tests.support.engines import engine_of as make_engine
from tmy.command import Command, Result
from tmy.commands.chat import ChatCommands
from tmy.config import Settings
from tmy.engine import cooldowns, replies
from tmy.engine.core import LAST_RESORT_REPLY, Engine
from tmy.engine.gates import Admins, id_refusal, valid_unicode
from tmy.engine.services import Services
from tmy.engine.switch import ChatSwitch
from tmy.engine.tracing import step_fields, trace_id
from tmy.errors import ConfigError
from tmy.executors import default_registry
from tmy.logs import PREVIEW
from tmy.message import Message, StepRecord
from tmy.rulebook.loader import load_sources
from tmy.store import Store

ECHO = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{QUESTION}"}
"""


def msg(text: str, **kw: Any) -> Message:
    kw.setdefault("user", "u1")
    kw.setdefault("platform", "test")
    return Message(text, **kw)


# -- gates ------------------------------------------------------------------------------------


async def test_a_message_over_the_length_limit_is_refused_before_matching(store: Store) -> None:
    engine = make_engine(ECHO, store, settings=Settings(max_message_chars=10))
    reply = await engine.handle(msg("echo " + "x" * 10))
    assert reply.rule is None and reply.text == ""
    assert reply.error == "message too long: 15 characters (the limit is 10)"
    assert (await engine.handle(msg("echo hi"))).text == "hi"


async def test_bad_ids_are_refused_and_usual_ids_pass(store: Store) -> None:
    engine = make_engine(ECHO, store, settings=Settings(max_id_chars=16))
    long_user = await engine.handle(msg("echo hi", user="u" * 17, chat="c"))
    assert long_user.rule is None and long_user.error.startswith("bad message: ")
    assert "user" in long_user.error
    not_text = await engine.handle(msg("echo hi", chat=42))  # type: ignore[arg-type]
    assert not_text.error is not None and "chat" in not_text.error
    assert (await engine.handle(msg("echo hi", user="é", chat="c"))).text == "hi"  # full check


def test_id_refusal_names_the_first_bad_id() -> None:
    assert id_refusal(msg("", user="ok", chat="c"), 256) is None
    problem = id_refusal(msg("", user="x" * 300), 256)
    assert problem == "'user' is 300 characters long (the limit is 256)"


def test_lone_surrogates_become_replacement_characters() -> None:
    assert valid_unicode("plain") == "plain"
    assert valid_unicode("a\ud800b") == "a\ufffdb"


async def test_a_lone_surrogate_in_a_message_reaches_the_rule_as_u_fffd(store: Store) -> None:
    engine = make_engine(ECHO, store)
    assert (await engine.handle(msg("echo a\ud800b"))).text == "a\ufffdb"


def test_admins_match_platform_user_pairs_and_bare_ids_apart() -> None:
    admins = Admins({"telegram:42", "7"})
    assert admins.admits("telegram", "42") and not admins.admits("http", "42")
    assert admins.admits("discord", "7") and not admins.admits("discord", "x:7")
    assert not Admins(())


async def test_the_admin_flag_is_set_from_the_admins_setting(store: Store) -> None:
    rules = """
rules:
  - id: secret
    triggers: [secret]
    admin_only: true
    steps: [{plugin: ADJUST, input: "s"}]
"""
    engine = make_engine(rules, store, settings=Settings(admins=frozenset({"test:boss"})))
    assert (await engine.handle(msg("secret", user="boss"))).text == "s"
    refused = await engine.handle(msg("secret", user="other"))
    assert refused.rule is None
    assert refused.reason == "rule 'secret' matched but it answers admins only (admin_only)"


def _commands(settings: Settings) -> ChatCommands:
    async def ping(inv: Any) -> Result:
        return Result(f"pong {inv.who.user}")

    table = {"ping": Command("ping", "answers pong", ping)}
    return ChatCommands(table, SimpleNamespace(settings=settings), prefix="!op")


async def test_admin_commands_never_reach_the_rules(store: Store) -> None:
    rules = """
rules:
  - id: all
    triggers: ["*"]
    steps: [{plugin: ADJUST, input: "rule"}]
"""
    settings = Settings(admins=frozenset({"boss"}))
    engine = make_engine(rules, store, settings=settings, commands=_commands(settings))
    answered = await engine.handle(msg("!op ping", user="boss"))
    assert answered.text == "pong boss" and answered.rule is None
    refused = await engine.handle(msg("!op ping", user="nobody"))  # no reply, no rule either
    assert refused.text == "" and refused.rule is None
    # the prefix inside a longer word is not a command: the rules get it
    assert (await engine.handle(msg("!opera", user="boss"))).rule == "all"
    assert (await engine.handle(msg("hello"))).rule == "all"


async def test_a_switched_off_chat_runs_no_rule_and_names_the_prefix(store: Store) -> None:
    settings = Settings()
    switch = ChatSwitch(store)
    engine = make_engine(ECHO, store, commands=_commands(settings), switch=switch)
    here, there = msg("echo hi", chat="g1"), msg("echo hi", chat="g2")
    await switch.set(here, True)
    off = await engine.handle(here)
    assert off.rule is None and off.text == ""
    assert off.reason == "the bot is switched off in this chat (an admin can say '!op on')"
    assert (await engine.handle(there)).text == "hi"
    # a second engine (another daemon) on the same store learns it from the store, not a cache
    other = make_engine(ECHO, store, switch=ChatSwitch(store))
    assert (await other.handle(msg("echo hi", chat="g1"))).reason.endswith("say '.tmy on')")
    await switch.set(here, False)
    assert (await engine.handle(here)).text == "hi"


# -- trace ids --------------------------------------------------------------------------------


def test_trace_ids_are_16_hex_digits_unique_with_one_process_prefix() -> None:
    ids = [trace_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(re.fullmatch("[0-9a-f]{16}", t) for t in ids)
    assert len({t[:8] for t in ids}) == 1


async def test_every_reply_carries_its_own_trace_id(store: Store) -> None:
    engine = make_engine(ECHO, store)
    matched = await engine.handle(msg("echo a"))
    unmatched = await engine.handle(msg("nothing"))
    assert matched.trace_id != unmatched.trace_id
    assert re.fullmatch("[0-9a-f]{16}", unmatched.trace_id)


def test_step_fields_keep_short_json_values_and_preview_the_rest() -> None:
    record = StepRecord("r/0", "ADJUST", input=7, result="x" * (PREVIEW + 1), error="")
    fields = step_fields(record)
    assert fields["input"] == 7 and fields["error"] is None
    assert fields["result"] != record.result and len(fields["result"]) <= PREVIEW + 10
    assert step_fields(StepRecord("r/0", "ADJUST", input=2**70))["input"] != 2**70


# -- reply assembly ---------------------------------------------------------------------------


async def test_the_reply_is_pre_answer_result_post_answer(store: Store) -> None:
    rules = """
rules:
  - id: wrap
    triggers: [wrap]
    steps:
      - {plugin: ADJUST, input: "<", save: PRE_ANSWER}
      - {plugin: ADJUST, input: ">", save: POST_ANSWER}
      - {plugin: ADJUST, input: "?= 40 + 2"}
"""
    engine = make_engine(rules, store)
    assert (await engine.handle(msg("wrap"))).text == "<42>"


async def test_a_reply_over_the_limit_answers_the_error_text_instead(store: Store) -> None:
    rules = """
rules:
  - id: big
    triggers: [big]
    on_error: "too big"
    steps: [{plugin: ADJUST, input: "0123456789ABCDEF"}]
  - id: quoting
    triggers: [quoting]
    on_error: "{STEP_RESULT}"
    steps: [{plugin: ADJUST, input: "0123456789ABCDEF"}]
"""
    settings = Settings(max_reply_chars=10, error_reply="failed")
    engine = make_engine(rules, store, settings=settings)
    big = await engine.handle(msg("big"))
    assert big.text == "too big" and big.rule == "big"
    assert big.error == "the reply is 16 characters long (limits.max_reply_chars is 10)"
    # an on_error quoting the refused reply falls back to error_reply
    assert (await engine.handle(msg("quoting"))).text == "failed"


async def test_the_last_resort_when_even_error_reply_is_too_long(store: Store) -> None:
    rules = """
rules:
  - id: fails
    triggers: [fails]
    steps: [{plugin: ADJUST, input: "x", save: STEP_ERROR}]
"""
    settings = Settings(max_reply_chars=5, error_reply="far too long an error text")
    engine = make_engine(rules, store, settings=settings)
    reply = await engine.handle(msg("fails"))
    assert reply.error == "x" and reply.text == LAST_RESORT_REPLY


async def test_error_reply_may_use_run_locals_only(store: Store) -> None:
    with pytest.raises(ConfigError, match="refers to 'nope'"):
        make_engine(ECHO, store, settings=Settings(error_reply="oops {nope}"))
    template = replies.error_reply_template(Settings(error_reply="oops: {STEP_ERROR}"))
    assert template.names == {"STEP_ERROR"}


async def test_a_finished_run_keeps_its_summary_and_session(store: Store) -> None:
    rules = """
rules:
  - id: chat
    triggers: ["chat *"]
    session: 60
    steps:
      - {plugin: ADJUST, input: '?= [QUESTION, "ok"]', save: STEP_SUMMARY}
      - {plugin: ADJUST, input: "ok {QUESTION}"}
  - id: bad
    triggers: [bad]
    steps:
      - {plugin: ADJUST, input: "just text", save: STEP_SUMMARY}
"""
    engine = make_engine(rules, store)
    assert (await engine.handle(msg("chat hello"))).text == "ok hello"
    assert await engine.summary_for(msg("")) == ["hello", "ok"]
    follow = await engine.handle(msg("more please"))  # no trigger: the session's rule
    assert follow.rule == "chat" and follow.text == "ok more please"
    other_user = await engine.handle(msg("more please", user="u2"))
    assert other_user.rule is None
    assert (await engine.handle(msg("bad", user="u3"))).text == "just text"
    assert await engine.summary_for(msg("", user="u3")) is None  # not a pair: not kept


# -- cooldowns --------------------------------------------------------------------------------


COOLING = """
rules:
  - id: daily
    triggers: [daily]
    cooldown: {seconds: 600, per: chat, reply: "wait {COOLDOWN_LEFT}s, {USER}"}
    steps: [{plugin: ADJUST, input: "done"}]
  - id: quiet
    triggers: [quiet]
    cooldown: 600
    steps: [{plugin: ADJUST, input: "done"}]
"""


async def test_a_cooldown_answers_its_reply_within_the_window(store: Store) -> None:
    engine = make_engine(COOLING, store)
    engine.fixed_now = "2026-01-01T00:00:00+00:00"  # cooldowns count from the pinned NOW
    assert (await engine.handle(msg("daily", chat="g"))).text == "done"
    cooled = await engine.handle(msg("daily", chat="g", user="u2"))  # per chat: same window
    assert cooled.text == "wait 600s, u2" and cooled.rule == "daily"
    assert cooled.reason == "rule 'daily' is cooling down (600 s left)"
    assert (await engine.handle(msg("daily", chat="h"))).text == "done"
    assert (await engine.handle(msg("quiet"))).text == "done"
    silent = await engine.handle(msg("quiet"))
    assert silent.text == "" and silent.rule == "quiet"
    rule = engine.rulebook.by_id["daily"]
    assert await engine.cooldown_left(rule, msg("", chat="g")) == 600
    assert await engine.cooldown_left(rule, msg("", chat="z")) == 0
    engine.fixed_now = "2026-01-01T00:10:01+00:00"
    assert (await engine.handle(msg("daily", chat="g"))).text == "done"


def test_cooldown_keys_by_scope() -> None:
    registry = default_registry()
    book = load_sources(
        [
            (
                Path("r.yaml"),
                """
rules:
  - {id: g, triggers: [g], cooldown: {seconds: 1, per: global}, steps: [{plugin: ADJUST}]}
  - {id: c, triggers: [c], cooldown: {seconds: 1, per: chat}, steps: [{plugin: ADJUST}]}
  - {id: u, triggers: [u], cooldown: 1, steps: [{plugin: ADJUST}]}
""",
            )
        ],
        registry,
    )
    m = msg("", user="a/b", chat="c%d", platform="tg")
    keys = [cooldowns.cooldown_key(book.by_id[r], m) for r in "gcu"]
    assert keys == ["cooldown/g", "cooldown/c/chat/tg/c%25d", "cooldown/u/user/tg/a%2Fb"]


# -- services ---------------------------------------------------------------------------------


async def test_services_derive_shares_the_client_and_state_and_closes_only_its_own(
    store: Store,
) -> None:
    state = {"ext": object()}
    registry = default_registry()
    services = Services(Settings(), store, registry, MappingProxyType(state))
    engine = Engine(load_sources([(Path("r.yaml"), ECHO)], registry), services)
    assert services.engine is engine
    derived = services.derive(store)
    assert derived.http is services.http and derived.state is services.state
    assert derived.engine is None and derived.registry is registry
    await derived.aclose()
    assert not services.http.is_closed
    client = services.http
    await services.aclose()
    assert client.is_closed
