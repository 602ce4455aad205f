"""Issue 10's engine half: stop:, atomic multi-step rules, cooldown:, the unmatched line.

The check-in rule below is written the obvious way (a guard, an increment, a
date stamp). Run concurrently by one user it must let exactly one check-in
through — over HTTP, on SQLite, on Redis and with two daemons on one Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.log_helpers import read_log
from tmy.errors import RuleError
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.testing import Bot, serving
from tmy.testing.bot import read_var

REPO = Path(__file__).resolve().parents[2]

CHECKIN = """
variables:
  checkins: {scope: user, default: 0}
  last_checkin: {scope: user, default: ""}
rules:
  - id: checkin
    triggers: ["签到", "check in"]
    steps:
      - {plugin: ADJUST, input: "今天已经签到过了", stop: "?= last_checkin == NOW[:10]"}
      - {plugin: ADJUST, input: "?= checkins + 1", save: checkins}
      - {plugin: ADJUST, input: "?= NOW[:10]", save: last_checkin}
      - {plugin: ADJUST, input: "签到成功，累计 {checkins} 次"}
"""


def load(text: str) -> Any:
    return load_sources([(Path("c.yaml"), text)], default_registry())


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _successes(answers: list[dict[str, Any]]) -> int:
    assert all(a["error"] is None for a in answers), [a["error"] for a in answers if a["error"]]
    assert {a["answer"] for a in answers} <= {"签到成功，累计 1 次", "今天已经签到过了"}
    return sum(a["answer"] == "签到成功，累计 1 次" for a in answers)


# -- stop: a refusal is an answer ---------------------------------------------------------------


async def test_stop_ends_the_run_normally_with_the_usual_reply() -> None:
    rules = """
variables:
  n: {scope: global, default: 0}
rules:
  - id: guard
    triggers: ["go *"]
    steps:
      - {plugin: ADJUST, input: "?= 'no: ' + QUESTION", stop: "?= QUESTION == 'away'"}
      - {plugin: ADJUST, input: "?= n + 1", save: n}
      - {plugin: ADJUST, input: "went {n}"}
  - id: always
    triggers: ["halt"]
    steps:
      - {plugin: ADJUST, input: "?= 'h'", save: PRE_ANSWER}
      - {plugin: ADJUST, input: "alted", stop: true}
      - {plugin: ADJUST, input: "never"}
"""
    async with Bot({"s.yaml": rules}) as bot:
        refused = await bot.ask("go away")
        assert (refused.text, refused.error, refused.stopped) == ("no: away", None, True)
        assert await bot.var("n") == 0  # the later steps did not run
        assert [s.uri for s in refused.steps] == ["guard/0"]
        assert await bot.say("go home") == "went 1"
        assert await bot.say("halt") == "halted"  # PRE_ANSWER + STEP_RESULT as usual
        assert (await bot.ask("go away")).as_dict()["stopped"] is True


async def test_save_step_error_keeps_its_seed_meaning() -> None:
    rules = """
rules:
  - id: refuse
    triggers: ["refuse"]
    steps:
      - {plugin: ADJUST, input: "not allowed", save: STEP_ERROR}
"""
    async with Bot({"r.yaml": rules}) as bot:
        reply = await bot.ask("refuse")
        assert reply.error == "not allowed" and not reply.stopped


@pytest.mark.slow  # run.py processes
def test_ask_json_of_a_stop_refusal_has_no_error_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "c.yaml").write_text(CHECKIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    base = [sys.executable, "run.py", "--rules", str(tmp_path / "rules"),
            "--store", f"sqlite:///{tmp_path / 'x.db'}", "ask", "签到", "--json"]  # fmt: skip
    first = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["answer"] == "签到成功，累计 1 次"
    second = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    out = json.loads(second.stdout)
    assert out["error"] is None and out["answer"] == "今天已经签到过了" and out["stopped"] is True


async def test_run_stopped_is_logged_at_info(log_file: Path) -> None:
    async with Bot({"c.yaml": CHECKIN}) as bot:
        await bot.ask("签到")
        await bot.ask("签到")
    events = read_log(log_file)
    stopped = [e for e in events if e["event"] == "run.stopped"]
    assert len(stopped) == 1 and stopped[0]["level"] == "info"
    assert stopped[0]["uri"] == "checkin/0"
    assert not [e for e in events if e["event"] == "run.failed"]


def test_stop_must_name_known_variables() -> None:
    with pytest.raises(RuleError) as caught:
        load("rules:\n  - id: a\n    triggers: [a]\n    steps:\n"
             "      - {plugin: ADJUST, stop: '?= nope == 1'}\n")  # fmt: skip
    assert "c.yaml:5" in str(caught.value) and "'nope'" in str(caught.value)


# -- atomic multi-step rules --------------------------------------------------------------------


def test_the_checkin_rule_gets_an_atomic_span_and_check_lists_it() -> None:
    book = load(CHECKIN)
    rule = book.by_id["checkin"]
    assert rule.atomic_vars == ("checkins", "last_checkin")
    assert rule.atomic_span == (0, 2)
    assert book.locked_variables >= {"checkins", "last_checkin"}
    (line,) = book.atomic_report
    assert line.startswith("c.yaml:6: rule 'checkin' holds checkins, last_checkin")
    assert "checkin/0 to checkin/2" in line


def test_atomic_false_opts_out_and_single_step_rules_have_no_span() -> None:
    book = load(CHECKIN.replace("    triggers:", "    atomic: false\n    triggers:"))
    assert book.by_id["checkin"].atomic_vars == () and book.atomic_report == ()
    plain = load(
        "variables: {n: {default: 0}}\nrules:\n  - id: inc\n    triggers: [inc]\n"
        "    steps:\n      - {plugin: ADJUST, input: '?= n + 1', save: n}\n"
        "      - {plugin: ADJUST, input: 'n is {n}'}\n"
    )
    assert plain.by_id["inc"].atomic_vars == ()  # one read-modify-write step: its own lock


async def _post_all(url: str, n: int, user: str = "ann") -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        responses = await asyncio.gather(
            *(client.post("/v1/messages", json={"text": "签到", "user": user}) for _ in range(n))
        )
    return [r.json() for r in responses]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def test_50_concurrent_checkins_over_http_let_exactly_one_through(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = f"sqlite:///{tmp_path / 'c.db'}"
    if backend == "redis":
        url, prefix = (
            request.getfixturevalue("redis_url"),
            request.getfixturevalue("redis_namespace"),
        )
        store = f"{url}?prefix={prefix}"
    async with serving({"c.yaml": CHECKIN}, store=store) as daemon:
        answers = await _post_all(daemon.url, 50)
        assert _successes(answers) == 1
        assert await read_var(daemon.engine, "checkins", user="ann", platform="http") == 1


async def test_without_the_span_the_guard_lets_several_through(tmp_path: Path) -> None:
    """The control: atomic: false shows what the span prevents (concurrent runs interleave)."""
    rules = CHECKIN.replace("    triggers:", "    atomic: false\n    triggers:").replace(
        '"签到成功，累计 {checkins} 次"}',
        '"签到成功，累计 {checkins} 次"}\n'
        '      - {plugin: ADJUST, input: "?= checkins", when: "?= False"}',
    )
    slow = rules.replace(
        '- {plugin: ADJUST, input: "?= checkins + 1", save: checkins}',
        '- {plugin: HTTP, url: "http://127.0.0.1:9/", timeout: 0.05, on_error: continue}\n'
        '      - {plugin: ADJUST, input: "?= checkins + 1", save: checkins}',
    )
    async with Bot({"c.yaml": slow}) as bot:
        answers = await asyncio.gather(*(bot.ask("签到", user="bob") for _ in range(20)))
        assert sum(a.text.startswith("签到成功") for a in answers) > 1


async def test_a_slow_step_inside_the_span_still_lets_exactly_one_through(tmp_path: Path) -> None:
    slow = CHECKIN.replace(
        '- {plugin: ADJUST, input: "?= checkins + 1", save: checkins}',
        '- {plugin: HTTP, url: "http://127.0.0.1:9/", timeout: 0.05, on_error: continue}\n'
        '      - {plugin: ADJUST, input: "?= checkins + 1", save: checkins}',
    )
    async with Bot({"c.yaml": slow}) as bot:
        answers = await asyncio.gather(*(bot.ask("签到", user="bob") for _ in range(20)))
        assert sum(a.text.startswith("签到成功") for a in answers) == 1
        assert await bot.var("checkins", user="bob") == 1


async def test_overlapping_spans_in_opposite_order_do_not_deadlock() -> None:
    rules = """
variables:
  a: {default: 0}
  b: {default: 0}
rules:
  - id: ab
    triggers: [ab]
    steps:
      - {plugin: ADJUST, input: "?= a", save: x}
      - {plugin: ADJUST, input: "?= b + x + 1", save: b}
      - {plugin: ADJUST, input: "?= a + 1", save: a}
  - id: ba
    triggers: [ba]
    steps:
      - {plugin: ADJUST, input: "?= b", save: y}
      - {plugin: ADJUST, input: "?= a + 1", save: a}
      - {plugin: ADJUST, input: "?= b + 1", save: b}
"""
    async with Bot({"d.yaml": rules}) as bot:
        replies = await asyncio.wait_for(
            asyncio.gather(*(bot.ask(t) for _ in range(20) for t in ("ab", "ba"))), 60
        )
        assert all(r.error is None for r in replies)
        assert await bot.var("a") == 40


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(120)
async def test_two_daemons_on_redis_let_exactly_one_checkin_through(
    tmp_path: Path, redis_url: str, redis_namespace: str
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "c.yaml").write_text(CHECKIN)
    store = f"{redis_url}?prefix={redis_namespace}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env["TMY_WATCH"] = "0"
    ports = [_free_port(), _free_port()]
    daemons = [
        subprocess.Popen(
            [
                sys.executable,
                "run.py",
                "serve",
                "--no-console",
                "--rules",
                str(rules),
                "--store",
                store,
                "--http",
                f"127.0.0.1:{port}",
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        for port in ports:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "daemon did not start"
                    await asyncio.sleep(0.1)
        batches = await asyncio.gather(
            *(_post_all(f"http://127.0.0.1:{port}", 25, user="cara") for port in ports)
        )
        assert _successes([a for batch in batches for a in batch]) == 1
    finally:
        for d in daemons:
            d.send_signal(signal.SIGTERM)
        for d in daemons:
            try:
                d.wait(20)
            except subprocess.TimeoutExpired:
                d.kill()


# -- cooldown -----------------------------------------------------------------------------------

COOL = """
rules:
  - id: roll
    triggers: [roll]
    cooldown: {seconds: 30, per: user, reply: "slow down {USER_NAME}, {COOLDOWN_LEFT}s left"}
    steps: [{plugin: ADJUST, input: "rolled"}]
  - id: quiet
    triggers: [quiet]
    cooldown: {seconds: 30, per: chat}
    steps: [{plugin: ADJUST, input: "shh"}]
  - id: once
    triggers: [once]
    cooldown: {seconds: 30, per: global, reply: "later"}
    steps: [{plugin: ADJUST, input: "done"}]
"""


async def test_cooldown_per_user_chat_and_global(tmp_path: Path) -> None:
    async with Bot({"c.yaml": COOL}) as bot:
        assert await bot.say("roll", user="ann") == "rolled"
        again = await bot.ask("roll", user="ann", user_name="Ann")
        assert again.error is None and again.text.startswith("slow down Ann, ")
        assert again.text.endswith("s left") and "cooling down" in (again.reason or "")
        assert await bot.say("roll", user="bob") == "rolled"  # per user
        assert await bot.say("quiet", user="ann", chat="g1") == "shh"
        muted = await bot.ask("quiet", user="bob", chat="g1")  # same chat: cooled, no reply
        assert (muted.text, muted.error, muted.rule) == ("", None, "quiet")
        assert await bot.say("quiet", user="bob", chat="g2") == "shh"
        assert await bot.say("once", user="ann") == "done"
        assert await bot.say("once", user="zed", platform="other") == "later"


async def test_concurrent_messages_run_a_cooled_rule_once_and_the_window_is_in_the_store(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    async with Bot({"c.yaml": COOL}, store=store) as one:
        replies = await asyncio.gather(*(one.ask("roll", user="ann") for _ in range(30)))
        assert sum(r.text == "rolled" for r in replies) == 1
    async with Bot({"c.yaml": COOL}, store=store) as other:  # another daemon, same store
        assert (await other.ask("roll", user="ann")).text.startswith("slow down")


@pytest.mark.parametrize(
    ("cooldown", "message"),
    [
        ("{seconds: 0}", "'seconds' must be a number > 0"),
        ("{seconds: 5, per: team}", "'per' must be user, chat or global"),
        ("{seconds: 5, wait: 1}", "unknown key 'wait'"),
        ("{seconds: 5, reply: 'hi {nope}'}", "'reply' reads 'nope'"),
        ("soon", "cooldown must be"),
    ],
)
def test_bad_cooldowns_are_refused_with_file_and_line(cooldown: str, message: str) -> None:
    with pytest.raises(RuleError) as caught:
        load(f"rules:\n  - id: a\n    triggers: [a]\n    cooldown: {cooldown}\n"
             "    steps: [{plugin: ADJUST}]\n")  # fmt: skip
    assert "c.yaml:4" in str(caught.value) and message in str(caught.value)


# -- the unmatched line and its reason ----------------------------------------------------------


async def test_an_unmatched_message_logs_one_info_line_with_its_reason(log_file: Path) -> None:
    rules = """
rules:
  - id: secret
    triggers: [secret]
    private: true
    steps: [{plugin: ADJUST, input: s}]
  - id: boss
    triggers: [boss]
    admin_only: true
    steps: [{plugin: ADJUST, input: b}]
"""
    async with Bot({"u.yaml": rules}) as bot:
        nothing = await bot.ask("hello there")
        group = await bot.ask("secret", chat="g1", private=False)
        boss = await bot.ask("boss")
    assert nothing.reason == "no trigger matched"
    assert group.reason == "rule 'secret' matched but it answers private chats only"
    assert boss.reason == "rule 'boss' matched but it answers admins only (admin_only)"
    lines = read_log(log_file)
    unmatched = {e["trace_id"]: e for e in lines if e["event"] == "message.unmatched"}
    assert set(unmatched) == {nothing.trace_id, group.trace_id, boss.trace_id}
    assert unmatched[nothing.trace_id]["level"] == "info"
    assert unmatched[group.trace_id]["text"] == "secret"


# -- check catches more at load -----------------------------------------------------------------


def test_a_list_mode_on_a_variable_whose_default_is_not_a_list_is_refused() -> None:
    with pytest.raises(RuleError) as caught:
        load(
            "variables:\n  prizes: {default: 'car'}\nrules:\n  - id: draw\n"
            "    triggers: [draw]\n    steps:\n"
            "      - {plugin: ADJUST, input: SHIFT, INPUT: prizes}\n"
        )
    text = str(caught.value)
    assert "c.yaml:7" in text and "'prizes'" in text and "default: []" in text
    # a nested position is not checked (its container is a dict of lists)
    load(
        "variables:\n  queues: {default: {}}\nrules:\n  - id: draw\n"
        "    triggers: [draw]\n    steps:\n"
        "      - {plugin: ADJUST, input: SHIFT, INPUT: 'queues[{USER}]'}\n"
    )


def test_a_bad_scope_gives_one_error_not_follow_on_ones() -> None:
    with pytest.raises(RuleError) as caught:
        load(
            "variables:\n  hits: {scope: users, default: 0}\nrules:\n  - id: hit\n"
            "    triggers: [hit]\n    steps:\n"
            "      - {plugin: ADJUST, input: '?= hits + 1', save: hits}\n"
        )
    text = str(caught.value)
    assert "scope 'users' must be one of global, chat, user" in text
    assert "never set" not in text and "declare it" not in text


# -- explain through the admin command ----------------------------------------------------------


async def test_admin_explain_command_explains_without_changing_anything() -> None:
    async with Bot({"c.yaml": CHECKIN}, admins=["test:root"]) as bot:
        assert bot.engine.commands is not None, "admin commands are wired in every App"
        out = (await bot.ask(".tmy explain 签到", user="root")).text
        assert "checkin" in out and "签到成功" in out
        assert await bot.var("checkins", user="root") == 0  # a dry run: nothing stored
        assert await bot.say("签到", user="root") == "签到成功，累计 1 次"
        usage = (await bot.ask(".tmy explain", user="root")).text
        assert "usage: explain TEXT" in usage
        assert (await bot.ask(".tmy explain 签到", user="mallory")).text == ""  # not an admin


async def test_explain_dry_runs_are_marked_in_the_log_and_trace(log_file: Path) -> None:
    from tmy.explain import explain
    from tmy.tracelog import build_view, render

    async with Bot({"c.yaml": CHECKIN}) as bot:
        from tmy.message import Message

        ex = await explain(bot.engine, Message("签到", user="ann", platform="test"))
        assert ex.reply["text"] == "签到成功，累计 1 次"
    events = [e for e in read_log(log_file) if e.get("trace_id") == ex.trace_id]
    (run,) = [e for e in events if e["event"] == "run.done"]
    assert run["dry_run"] is True
    assert "dry run" in render(build_view(ex.trace_id, events))


async def test_explain_shows_what_a_rule_in_cooldown_answers() -> None:
    from tmy.explain import explain
    from tmy.message import Message

    async with Bot({"c.yaml": COOL}) as bot:
        assert await bot.say("roll", user="ann") == "rolled"
        ex = await explain(
            bot.engine, Message("roll", user="ann", user_name="Ann", platform="test")
        )
        assert ex.reply["text"].startswith("slow down Ann, ")
        assert "cooling down" in (ex.reason or "")


@pytest.mark.slow  # run.py processes
def test_ask_on_an_admin_command_prints_only_the_answer(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env["TMY_ADMINS"] = "boss"
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "c.yaml").write_text(CHECKIN)
    out = subprocess.run(
        [sys.executable, "run.py", "--rules", str(tmp_path / "rules"), "--store",
         f"sqlite:///{tmp_path / 'x.db'}", "--user", "boss", "ask", ".tmy rules checkin"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "checkin" in out.stdout
    assert "no reply" not in out.stderr


@pytest.mark.slow  # run.py processes
def test_a_rule_tests_now_also_moves_the_cooldown_clock(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "rules:\n  - id: roll\n    triggers: [roll]\n"
        '    cooldown: {seconds: 60, reply: "wait {COOLDOWN_LEFT}s"}\n'
        "    steps: [{plugin: ADJUST, input: rolled}]\n"
        "tests:\n"
        '  - {send: roll, now: "2026-11-24T10:00:00+00:00", expect: rolled}\n'
        '  - {send: roll, now: "2026-11-24T10:00:30+00:00", expect: "wait 30s"}\n'
        '  - {send: roll, now: "2026-11-24T10:01:01+00:00", expect: rolled}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    out = subprocess.run(
        [sys.executable, "run.py", "test", str(tmp_path / "c.yaml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed, 0 failed" in out.stdout
