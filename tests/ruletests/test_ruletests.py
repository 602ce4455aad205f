"""``run.py test``: the YAML ``tests:`` of rules files, run through the real engine.

Most cases call ``tmy.cli.main`` in-process on temporary rules files (real
loader, real SQLite store, real engine); the last ones run ``python run.py
test`` on the sample rules and the cookbook as a user would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from textwrap import dedent

import pytest

import tmy.ruletests  # noqa: F401  (registers the `test` command)
from tmy import cli

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("in_checkout")


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(dedent(text), encoding="utf-8")
    return path


def run_test(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["test", *args])
    out, err = capsys.readouterr()
    return code, out, err


COUNTER = """\
variables:
  visits: {scope: user, default: 0}
  total: {scope: global, default: 0}
rules:
  - id: hello
    triggers: ["hello"]
    steps:
      - {plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {plugin: ADJUST, input: "Hello {USER_NAME}, visit {visits}."}
  - id: fail
    triggers: ["fail"]
    on_error: "Sorry: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0"}
  - id: now
    triggers: ["now"]
    steps:
      - {plugin: ADJUST, input: "{NOW}"}
  - id: bump
    triggers: ["bump"]
    steps:
      - {plugin: ADJUST, input: "?= total + 1", save: total}
"""


def test_a_passing_file_prints_each_case_and_the_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - send: "hello"
    user: ann
    expect: "Hello ann, visit 1."
  - send: "hello"
    user: ann
    user_name: Ann
    expect: "Hello Ann, visit 2."
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 0, out
    assert f"PASS {path}:24  hello (user ann) → Hello ann, visit 1." in out
    assert f"PASS {path}:27  hello (user ann) → Hello Ann, visit 2." in out
    assert out.rstrip().endswith("2 passed, 0 failed")


def test_a_broken_expectation_fails_with_a_readable_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - send: "hello"
    expect: "Hello tester, visit 1."
  - send: "hello"
    expect: "Hello tester, visit 1."
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 1
    lines = out.splitlines()
    at = lines.index(f"FAIL {path}:26  hello")
    assert lines[at + 1 : at + 6] == [
        "     --- expected",
        "     +++ actual",
        "     @@ -1 +1 @@",
        "     -Hello tester, visit 1.",
        "     +Hello tester, visit 2.",
    ]
    assert "     rule: hello" in lines
    assert lines[-1] == "1 passed, 1 failed"


def test_expect_re_searches_the_reply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {send: hello, expect_re: "visit \\\\d+\\\\.$"}
  - {send: hello, expect_re: "^Bye"}
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 1
    assert f"PASS {path}:24  hello" in out
    assert f"FAIL {path}:25  hello" in out
    assert "expected a match for /^Bye/" in out
    assert "actual: Hello tester, visit 2." in out


def test_expect_error_true_or_a_part_of_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {send: fail, expect_error: true}
  - {send: fail, expect_error: "division by zero"}
  - {send: fail, expect: "Sorry: expression '1 / 0' failed: ZeroDivisionError: division by zero"}
  - {send: fail, expect_error: "no such thing"}
  - {send: hello, expect_error: true}
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 1, out
    assert out.count("PASS") == 3
    assert "expected an error containing 'no such thing'" in out
    assert "error: expression '1 / 0' failed: ZeroDivisionError: division by zero" in out
    assert "expected the run to fail, but it answered: Hello tester, visit 1." in out
    assert out.rstrip().endswith("3 passed, 2 failed")


def test_expect_no_reply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {send: "nothing matches this", expect_no_reply: true}
  - {send: hello, expect_no_reply: true}
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 1
    assert f"PASS {path}:24  nothing matches this → (no reply)" in out
    assert "expected no reply, got: Hello tester, visit 1." in out


def test_vars_preset_the_cases_user_and_cases_share_one_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {send: hello, user: ann, vars: {visits: 41}, expect: "Hello ann, visit 42."}
  - {send: hello, user: bob, expect: "Hello bob, visit 1."}
  - {send: hello, user: ann, expect: "Hello ann, visit 43."}
  - {send: bump, vars: {total: 9}, expect: "10"}
  - {send: bump, expect: "11"}
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 0, out
    assert "5 passed, 0 failed" in out


def test_a_preset_ranked_value_is_on_its_leaderboard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vars: writes the store directly; a rank: true value must still reach top()/rank_of()."""
    path = write(
        tmp_path,
        """\
variables:
  points: {scope: user, default: 0, rank: true}
rules:
  - id: board
    triggers: [board]
    steps:
      - plugin: ADJUST
        input: "?= str(rank_of('points')) + ' ' + ','.join(e['user'] for e in top('points', 3))"
tests:
  - {send: board, user: ann, vars: {points: 7}, expect: "1 ann"}
  - {send: board, user: bob, vars: {points: 9}, expect: "1 bob,ann"}
  - {send: board, user: ann, expect: "2 bob,ann"}
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 0, out
    assert "3 passed, 0 failed" in out


def test_each_file_starts_on_a_fresh_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, COUNTER, "a_rules.yaml")
    write(
        tmp_path, "tests:\n  - {send: bump, expect: '1'}\n  - {send: bump, expect: '2'}\n", "b.yaml"
    )
    write(tmp_path, "tests:\n  - {send: bump, expect: '1'}\n", "c.yaml")
    code, out, _ = run_test(capsys, str(tmp_path))
    assert code == 0, out
    assert "3 passed, 0 failed" in out


def test_now_pins_NOW_in_the_configured_timezone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "timezone: Asia/Shanghai\n", "tmy.yaml")
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {send: now, now: "2026-11-22T09:00:00+08:00", expect: "2026-11-22T09:00:00+08:00"}
  - {send: now, now: "2026-11-22T09:00:00Z", expect: "2026-11-22T09:00:00+00:00"}
  - {send: now, now: "2026-11-22 09:30", expect: "2026-11-22T09:30:00+08:00"}
  - {send: now, now: 2026-11-22T01:00:00+08:00, expect: "2026-11-22T01:00:00+08:00"}
  - {send: now, expect_re: "^20\\\\d\\\\d-"}
""",
    )
    code, out, _ = run_test(capsys, "--config", str(config), str(path))
    assert code == 0, out
    assert "5 passed, 0 failed" in out
    assert "2026-11-22" not in out.splitlines()[4]  # the last case runs on the real clock


HTTP_RULES = """\
rules:
  - id: weather
    triggers: ["weather *"]
    on_error: "no weather: {STEP_ERROR}"
    steps:
      - plugin: HTTP
        url: "{base}/weather/{QUESTION}"
      - {plugin: ADJUST, input: "{QUESTION}: {STEP_RESULT[temp]} C"}
  - id: post
    triggers: ["post *"]
    steps:
      - plugin: HTTP
        url: "{base}/items"
        method: POST
        json: {name: "{QUESTION}"}
        result: status
"""


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback that records every request it gets."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b'{"temp": 99}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_http_is_canned_or_refused_and_never_leaves_the_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: tuple[str, list[str]]
) -> None:
    base, seen = server
    rules = HTTP_RULES.replace("{base}", base)
    path = write(
        tmp_path,
        rules
        + f"""\
tests:
  - send: weather Paris
    http:
      "{base}/weather/Paris": {{json: {{temp: 21}}}}
    expect: "Paris: 21 C"
  - name: a glob, and a city that needs encoding
    send: weather 北京 west
    http:
      "{base}/weather/*": {{json: {{temp: 3}}}}
    expect: "北京 west: 3 C"
  - name: a list of canned responses, by method
    send: post milk
    http:
      - {{url: "{base}/items", method: GET, status: 500}}
      - {{url: "{base}/items", method: POST, status: 201, text: created}}
    expect: "201"
  - name: an error status
    send: weather Atlantis
    http:
      "{base}/weather/Atlantis": {{status: 404, text: "Unknown location"}}
    expect_error: "HTTP 404"
  - name: no canned response
    send: weather Paris
    expect_error: >-
      outbound HTTP refused in tests: {base}/weather/Paris
      (give the test an http: canned response)
  - name: refused, and the failure says so
    send: weather Rome
    expect: "Rome: 20 C"
""",
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 1, out
    assert "5 passed, 1 failed" in out
    assert f"http: GET {base}/weather/Rome → refused (no canned response)" in out
    assert seen == []  # the real server on that URL never heard a thing


def test_the_llm_is_the_mock_whatever_the_config_and_environment_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-sent")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    config = write(
        tmp_path,
        """\
        llm:
          default: real
          models:
            real: {base_url: "http://127.0.0.1:9/v1", model: gpt-x, api_key_env: OPENAI_API_KEY}
        """,
        "tmy.yaml",
    )
    path = write(
        tmp_path,
        """\
        rules:
          - id: ai
            triggers: ["ai *"]
            steps:
              - {plugin: LLM}
          - id: named
            triggers: ["named *"]
            steps:
              - {plugin: LLM, model: env}
        tests:
          - {send: "ai MOCK:RESPONSE:hi", expect: "hi"}
          - {send: "ai hello", expect: "[TESTONLY mock · 0 earlier turns] You said: hello"}
          - {send: "named MOCK:RESPONSE:also mocked", expect: "also mocked"}
        """,
    )
    code, out, _ = run_test(capsys, "--config", str(config), str(path))
    assert code == 0, out
    assert "3 passed, 0 failed" in out


def test_fire_runs_a_scheduled_rule_as_its_schedule_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        """\
        rules:
          - id: morning
            schedule:
              cron: "0 9 * * *"
              timezone: Asia/Shanghai
              input: digest
              send_to: [{platform: onebot, chat: "group:1"}]
            steps:
              - {plugin: ADJUST, input: "{QUESTION} for {CHAT} at {FIRE_TIME} by {USER}"}
        tests:
          - fire: morning
            now: "2026-11-22T01:00:00Z"
            expect: "digest for group:1 at 2026-11-22T09:00:00+08:00 by cron"
        """,
    )
    code, out, _ = run_test(capsys, str(path))
    assert code == 0, out
    assert f"PASS {path}:11  fire morning → digest for group:1" in out


def test_invalid_cases_are_file_line_errors_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - send: hello
    expct: "Hello tester, visit 1."
  - {expect: "x"}
  - {send: hello, expect: "a", expect_re: "b"}
  - send: hello
    vars: {visit: 1}
    expect: "x"
  - {send: hello, now: "next tuesday", expect: "x"}
  - {send: hello, http: {"https://x.test/": {jsn: {}}}, expect: "x"}
  - {fire: hello, expect: "x"}
  - {send: hello, expect: "fine"}
""",
    )
    code, out, err = run_test(capsys, str(path))
    assert code == 2
    assert "PASS" not in out and "FAIL" not in out
    assert err.splitlines() == [
        f"{path}:25: test case: unknown key 'expct' (did you mean 'expect'?); a case has "
        "name, send, fire, send_event, event_data, user, user_name, chat, platform, private, "
        "mention, admin, images, reply_to, vars, now, seed, http, expect, expect_re, expect_error, "
        "expect_no_reply, approve",
        f"{path}:26: test case: each case needs 'send: <message>' (or 'fire: <scheduled rule "
        "id>', or 'send_event: <event>')",
        f"{path}:27: test case: one expectation per case, got expect and expect_re "
        "(split it into two cases)",
        f"{path}:29: test case: 'vars': 'visit' is not a declared variable "
        "(did you mean 'visits'?) (declared: total, visits)",
        f"{path}:31: test case: 'now' must be an ISO date and time like "
        "\"2026-11-22T09:00:00+08:00\", got 'next tuesday'",
        f"{path}:32: test case: 'http' 'https://x.test/': unknown key 'jsn' "
        "(did you mean 'json'?); a response has status, json, body, text, headers, method",
        f"{path}:33: test case: 'fire: hello': that rule has no schedule: (test it with 'send:')",
    ]


def test_rule_errors_are_reported_like_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        """\
        rules:
          - id: x
            triggers: [x]
            steps:
              - {plugin: NOPE}
        tests:
          - {send: x, expect: y}
        """,
    )
    code, out, err = run_test(capsys, str(path))
    assert code == 2
    assert f"{path}:5:" in err and "NOPE" in err
    assert out == ""


def test_k_selects_cases_and_earlier_ones_still_build_the_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {send: hello, expect: "Hello tester, visit 1."}
  - {name: second visit, send: hello, expect: "Hello tester, visit 2."}
  - {send: hello, expect: "Hello tester, visit 3."}
""",
    )
    code, out, _ = run_test(capsys, str(path), "-k", "second")
    assert code == 0, out
    assert out.splitlines() == [
        f"PASS {path}:25  second visit: hello → Hello tester, visit 2.",
        "1 passed, 0 failed",
    ]
    code, out, err = run_test(capsys, str(path), "-k", "no such case")
    assert code == 1
    assert "no test case matches -k 'no such case'" in err


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path,
        COUNTER
        + """\
tests:
  - {name: first, send: hello, expect: "Hello tester, visit 1."}
  - {send: hello, expect: "wrong"}
""",
    )
    code, out, _ = run_test(capsys, str(path), "--json")
    assert code == 1
    result = json.loads(out)
    assert (result["passed"], result["failed"]) == (1, 1)
    first, second = result["cases"]
    assert first == {
        "file": str(path),
        "line": 24,
        "name": "first",
        "send": "hello",
        "fire": None,
        "ok": True,
        "expectation": "expect",
        "expected": "Hello tester, visit 1.",
        "actual": "Hello tester, visit 1.",
        "error": None,
        "rule": "hello",
        "seed": None,
        "detail": [],
    }
    assert second["ok"] is False
    assert second["actual"] == "Hello tester, visit 2."
    assert "-wrong" in second["detail"]


def test_a_rules_folder_without_tests_is_not_a_silent_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, COUNTER)
    code, _, err = run_test(capsys, str(tmp_path))
    assert code == 1
    assert "no test cases in" in err


@pytest.mark.parametrize("folder", ["rules", "examples", "docs/cookbook"])
def test_the_samples_and_the_cookbook_pass(folder: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_test(capsys, folder)
    assert code == 0, out
    assert " 0 failed" in out


def test_every_cookbook_recipe_passes_on_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    recipes = sorted((REPO / "docs" / "cookbook").glob("*.yaml"))
    assert {p.stem for p in recipes} >= {
        "faq", "checkin", "lottery", "http_lookup", "llm_qa", "digest", "cooldown",
    }  # fmt: skip
    for recipe in recipes:
        code, out, _ = run_test(capsys, str(recipe.relative_to(REPO)))
        assert code == 0, out


@pytest.mark.slow
def test_run_py_test_as_a_user_runs_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}

    def run_py(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "run.py", "test", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = run_py("rules/")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("passed, 0 failed")
    done = run_py("docs/cookbook/")
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yaml"
    text = (REPO / "docs" / "cookbook" / "checkin.yaml").read_text(encoding="utf-8")
    broken.write_text(text.replace("累计 100 次", "累计 101 次"), encoding="utf-8")
    done = run_py(str(broken))
    assert done.returncode == 1
    assert "-签到成功，累计 101 次" in done.stdout
    assert "+签到成功，累计 100 次" in done.stdout
    assert re.search(r"\n\d+ passed, 1 failed$", done.stdout.rstrip())  # the rest still pass


def test_the_cookbook_shows_each_recipe_file_exactly() -> None:
    doc = (REPO / "docs" / "cookbook.md").read_text(encoding="utf-8")
    shown = re.findall(
        r"\[`docs/cookbook/([\w.]+)`\]\(cookbook/\1\):\n\n```yaml\n(.*?)\n```", doc, re.S
    )
    files = sorted(p.name for p in (REPO / "docs" / "cookbook").glob("*.yaml"))
    assert sorted(name for name, _ in shown) == files
    for name, text in shown:
        recipe = (REPO / "docs" / "cookbook" / name).read_text(encoding="utf-8")
        assert text == recipe.rstrip("\n"), f"docs/cookbook.md shows an old {name}"


def test_a_vars_preset_must_fit_the_configured_value_limit(tmp_path: Path) -> None:
    """A case's ``vars:`` is written to the store: ``limits.max_value_bytes`` bounds it."""
    from tmy.config import Settings
    from tmy.ruletests.parsing import load_cases

    case = '  - {send: hello, vars: {visits: "%s"}, expect: "x"}\n' % ("x" * 2000)
    path = write(tmp_path, COUNTER + "tests:\n" + case)
    cases, errors = load_cases(Settings(), path)
    assert len(cases) == 1 and errors == []
    cases, errors = load_cases(Settings(max_value_bytes=1000), path)
    assert cases == [] and len(errors) == 1
    assert "test case: 'vars':" in errors[0] and "visits" in errors[0]
