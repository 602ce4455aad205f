"""Rule tests for platform events: ``send_event:`` (+ ``event_data:``) and ``approve:``."""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent

import pytest

import tmy.ruletests  # noqa: F401  (registers the `test` command)
from tmy import cli

pytestmark = pytest.mark.usefixtures("in_checkout")

RULES = """\
rules:
  - id: welcome
    events: [member_join]
    private: false
    steps:
      - {plugin: ADJUST, input: "welcome {USER} to {CHAT} ({EVENT_RAW})"}
  - id: join
    events: [join_request]
    steps:
      - plugin: ADJUST
        input: "?= 'tmy' in EVENT_DATA['comment']"
        save: APPROVE
      - {plugin: ADJUST, input: "wrong answer", save: APPROVE_REASON, when: "?= not APPROVE"}
      - {plugin: ADJUST, input: "?= ''"}
tests:
  - name: a welcome in the group
    send_event: member_join
    user: ann
    chat: "group:1"
    private: false
    expect: "welcome ann to group:1 (test)"
  - name: the right answer lets ann in
    send_event: join_request
    user: ann
    chat: "group:1"
    event_data: {comment: "答案：tmy"}
    approve: true
    expect_no_reply: true
  - name: a wrong one keeps bob out
    send_event: join_request
    user: bob
    chat: "group:1"
    event_data: {comment: "no idea"}
    approve: false
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(dedent(text), encoding="utf-8")
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["test", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_event_cases_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, str(_write(tmp_path, RULES)), "--json")
    assert code == 0, (out, err)
    cases = json.loads(out)["cases"]
    assert [c["ok"] for c in cases] == [True, True, True]
    assert [c.get("send_event") for c in cases] == ["member_join", "join_request", "join_request"]
    assert [c.get("approve") for c in cases] == [None, True, False]


def test_a_wrong_decision_fails_with_what_the_run_decided(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = RULES.replace("approve: false", "approve: true").replace(
        'comment: "答案：tmy"}', 'comment: "x"}'
    )
    code, out, _ = _run(capsys, str(_write(tmp_path, text)))
    assert code == 1
    assert "expected approve: true, the run decided: false" in out
    assert "event join_request (user bob)" in out


def test_bad_event_cases_are_file_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = RULES.split("tests:")[0] + dedent(
        """\
        tests:
          - {send_event: member_joined, expect: x}
          - {send: hi, send_event: poke, expect: x}
          - {send: hi, event_data: {a: 1}, expect: x}
          - {send_event: poke, event_data: [1], expect: x}
          - {send_event: join_request, approve: "yes"}
          - {send_event: poke}
        """
    )
    path = _write(tmp_path, text)
    code, _, err = _run(capsys, str(path))
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == (
        f"{path}:16: test case: 'send_event: member_joined' is not an event (did you mean "
        "'member_join'?); the events are member_join, member_leave, friend_request, "
        "group_invite, join_request, poke, reaction, message_recall, button"
    )
    assert lines[1].startswith(f"{path}:17: test case: each case needs 'send: <message>'")
    assert lines[1].endswith("not send and send_event")
    assert lines[2] == f"{path}:18: test case: 'event_data' goes with 'send_event: <kind>'"
    assert lines[3] == (
        f"{path}:19: test case: 'event_data' must be a map of EVENT_DATA fields: {{comment: hi}}"
    )
    assert lines[4] == (
        f"{path}:20: test case: 'approve' is true or false (the run's APPROVE), got 'yes'"
    )
    assert lines[5].startswith(f"{path}:21: test case: say what to expect")
    assert len(lines) == 6


def test_a_case_attaches_pictures_that_a_vision_step_sends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
    rules:
      - id: look
        triggers: [look]
        steps:
          - {plugin: ADJUST, input: "{IMAGES[0][url]} of {ATTACHMENTS}", save: FIRST}
          - {plugin: LLM, vision: true, input: "MOCK:IMAGES"}
          - {plugin: ADJUST, input: "{STEP_RESULT}; {FIRST}"}
    tests:
      - send: look
        images: [https://example.com/a.png, "data:image/png;base64,iVBORw0KGgo="]
        expect_re: "^2 images; https://example.com/a.png of "
      - send: look
        images: https://example.com/b.png
        expect_re: "^1 image; "
      - {send: look, images: [ftp://x/y.png], expect: x}
    """
    path = _write(tmp_path, text)
    code, _, err = _run(capsys, str(path))
    assert code == 2
    assert err.splitlines() == [
        f"{path}:15: test case: 'images' is a picture URL or a list of them (http(s):// or "
        "data:image/…), e.g. images: [https://example.com/cat.png]"
    ]
    path.write_text(dedent(text).rsplit("  - {send: look, images", 1)[0], encoding="utf-8")
    code, out, err = _run(capsys, str(path))
    assert code == 0, (out, err)


def test_a_case_quotes_a_message_and_its_event_data_names_the_case_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
    rules:
      - id: quote
        triggers: [what]
        steps:
          - {plugin: ADJUST, input: "nothing quoted", when: "?= not REPLY_TO"}
          - {plugin: ADJUST, input: "{REPLY_TO[user]} said {REPLY_TO[text]}", when: "?= REPLY_TO"}
      - id: poked
        events: [poke]
        steps: [{plugin: ADJUST, input: "{USER} = {EVENT_DATA[user]}"}]
    tests:
      - {send: what, reply_to: {text: lunch at noon, user: ann}, expect: ann said lunch at noon}
      - {send: what, reply_to: just this, expect: " said just this"}
      - {send: what, expect: nothing quoted}
      - {send_event: poke, user: bob, event_data: {user: mallory}, expect: bob = bob}
    """
    code, out, err = _run(capsys, str(_write(tmp_path, text)))
    assert code == 0, (out, err)
    path = _write(tmp_path, text.replace("reply_to: just this", "reply_to: [1]"))
    code, _, err = _run(capsys, str(path))
    assert code == 2 and "'reply_to' is the quoted message's text, or a map" in err
