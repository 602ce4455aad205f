"""``events:`` on rules and ``session: {seconds, debounce}``: loaded, indexed, and
refused with file:line when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.app import build_registry
from tmy.config import Settings
from tmy.errors import RuleErrors
from tmy.rulebook.loader import load_rulebook


def _load(tmp_path: Path, text: str):
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8")
    return load_rulebook(tmp_path / "r.yaml", build_registry(Settings()))


def _errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(RuleErrors) as err:
        _load(tmp_path, text)
    return [str(e) for e in err.value.errors]


def test_an_events_only_rule_loads_and_the_rulebook_indexes_it_in_order(tmp_path: Path) -> None:
    book = _load(
        tmp_path,
        """
rules:
  - id: welcome
    events: [member_join, member_leave]
    steps: [{plugin: ADJUST, input: "hi {USER}"}]
  - id: both
    triggers: [hello]
    events: member_join
    steps: [{plugin: ADJUST, input: "{EVENT}"}]
""",
    )
    assert book.by_id["welcome"].events == ("member_join", "member_leave")
    assert book.by_id["both"].events == ("member_join",)
    assert [r.id for r in book.events["member_join"]] == ["welcome", "both"]
    assert [r.id for r in book.events["member_leave"]] == ["welcome"]
    assert "poke" not in book.events


def test_an_unknown_event_is_a_load_error_with_its_line_and_a_suggestion(tmp_path: Path) -> None:
    errors = _errors(
        tmp_path,
        """
rules:
  - id: welcome
    events:
      - member_join
      - member_joined
    steps: [{plugin: ADJUST, input: hi}]
""",
    )
    assert len(errors) == 1
    assert ":6:" in errors[0]
    assert "unknown event 'member_joined'" in errors[0]
    assert "did you mean 'member_join'" in errors[0]


def test_events_must_be_a_list_of_kinds(tmp_path: Path) -> None:
    errors = _errors(
        tmp_path,
        "rules:\n  - id: w\n    events: {a: 1}\n    steps: [{plugin: ADJUST, input: hi}]\n",
    )
    assert ":3:" in errors[0] and "'events:' must be a list of event kinds" in errors[0]


def test_session_takes_seconds_or_a_map_with_debounce(tmp_path: Path) -> None:
    book = _load(
        tmp_path,
        """
rules:
  - id: plain
    triggers: [a]
    session: 30
    steps: [{plugin: ADJUST, input: a}]
  - id: burst
    triggers: [b]
    session: {seconds: 60, debounce: 5}
    steps: [{plugin: ADJUST, input: b}]
""",
    )
    assert (book.by_id["plain"].session, book.by_id["plain"].debounce) == (30.0, 0.0)
    assert (book.by_id["burst"].session, book.by_id["burst"].debounce) == (60.0, 5.0)
    assert book.has_sessions


@pytest.mark.parametrize(
    ("session", "message"),
    [
        ("{seconds: 60, debounse: 5}", "unknown key 'debounse'"),
        ("{debounce: 5}", "'seconds' must be a number > 0"),
        ("{seconds: 60, debounce: -1}", "'debounce' must be a number of seconds >= 0"),
        ("{seconds: 5, debounce: 5}", "must be shorter than the session"),
        ("{seconds: 60, debounce: true}", "'debounce' must be a number"),
        ("-3", "'session:' is a number of seconds >= 0"),
        ("soon", "'session:' is a number of seconds >= 0"),
    ],
)
def test_a_bad_session_is_a_load_error_with_its_line(
    tmp_path: Path, session: str, message: str
) -> None:
    errors = _errors(
        tmp_path,
        f"rules:\n  - id: r\n    triggers: [a]\n    session: {session}\n"
        "    steps: [{plugin: ADJUST, input: a}]\n",
    )
    assert any(":4:" in e and message in e for e in errors), errors


def test_templates_naming_the_new_locals_are_not_unknown(tmp_path: Path) -> None:
    book = _load(
        tmp_path,
        """
rules:
  - id: r
    events: [friend_request]
    steps:
      - plugin: ADJUST
        input: "{EVENT} {EVENT_RAW} {EVENT_DATA} {IMAGES} {ATTACHMENTS} {REPLY_TO} {BURST}"
      - {plugin: ADJUST, input: "?= True", save: APPROVE}
      - {plugin: ADJUST, input: "{APPROVE} {APPROVE_REASON}"}
""",
    )
    assert book.by_id["r"].events == ("friend_request",)


def test_a_variable_may_not_take_a_context_local_name(tmp_path: Path) -> None:
    errors = _errors(
        tmp_path,
        "variables:\n  EVENT: {default: 0}\nrules: []\n",
    )
    assert "built-in run local" in errors[0]


def test_check_warns_about_a_shadowed_event_rule_and_a_request_without_approve(
    tmp_path: Path,
) -> None:
    book = _load(
        tmp_path,
        """
rules:
  - id: narrow
    events: [member_join]
    platforms: [onebot]
    steps: [{plugin: ADJUST, input: a}]
  - id: first
    events: [member_join, friend_request]
    steps: [{plugin: ADJUST, input: b}]
  - id: shadowed
    events: [member_join]
    steps: [{plugin: ADJUST, input: c}]
  - id: decides
    events: [join_request]
    steps: [{plugin: ADJUST, input: "?= True", save: APPROVE}]
""",
    )
    file = str(tmp_path / "r.yaml")
    assert list(book.warnings) == [
        f"{file}:10: rule 'shadowed' never gets the event member_join: rule 'first' "
        f"({file}:7) lists it first and its filters admit every one",
        f"{file}:7: rule 'first' answers friend_request but no step saves APPROVE "
        "(true/false): the request stays pending",
    ]
