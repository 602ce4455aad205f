"""Schedules (tmy.cron.schedule): validation with file:line, fire times, bounds at load."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.cron.scheduled import UTC_ZONE, load, rule_with
from tmy.cron import Schedule, Timing, validate_schedule
from tmy.errors import RuleError

# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ('{cron: "61 * * * *"}', "bad cron expression '61 * * * *'"),
        ('{cron: "* * *"}', "Wrong number of fields"),
        ("{every: 10x}", "'every:' must be a positive interval"),
        ("{every: 0s}", "'every:' must be a positive interval"),
        ('{cron: "* * * * *", every: 5s}', "exactly one of"),
        ("{every: 5s, timezone: Mars/Olympus}", "unknown timezone 'Mars/Olympus'"),
        ("{every: 5s, send_to: [{platform: icq, chat: '1'}]}", "unknown platform 'icq'"),
        ("{every: 5s, send_to: [{platform: onebot}]}", "needs a text 'chat:'"),
        ("{every: 5s, misfire_grace: -1}", "misfire_grace"),
        ("{every: 5s, at: noon}", "unknown key 'at'"),
    ],
)
def test_check_refuses_bad_schedules_with_file_and_line(schedule: str, message: str) -> None:
    text = f"rules:\n  - id: job\n    schedule: {schedule}\n    steps: [{{plugin: ADJUST}}]\n"
    with pytest.raises(RuleError) as caught:
        load(text)
    assert "c.yaml:3" in str(caught.value)
    assert message in str(caught.value)


def test_a_rule_may_have_triggers_and_a_schedule_and_fire_time_is_known() -> None:
    book = load(
        "rules:\n  - id: both\n    triggers: [digest]\n"
        "    schedule: {cron: '0 9 * * 1-5', timezone: Asia/Shanghai,"
        " send_to: [{platform: onebot, chat: 'group:1'}], input: daily}\n"
        "    steps: [{plugin: ADJUST, input: '{QUESTION} {FIRE_TIME}'}]\n"
    )
    schedule = book.by_id["both"].extras["schedule"]
    assert schedule.cron == "0 9 * * 1-5" and schedule.input == "daily"
    assert schedule.send_to[0].chat == "group:1"


def test_every_is_aligned_to_the_epoch_so_every_daemon_agrees() -> None:
    schedule = validate_schedule({"every": "30s"})
    timing = Timing(schedule, UTC_ZONE)
    moment = datetime(2026, 11, 24, 10, 0, 17, 500_000, tzinfo=UTC)
    assert timing.after(moment) == datetime(2026, 11, 24, 10, 0, 30, tzinfo=UTC)
    assert timing.after(datetime(2026, 11, 24, 10, 0, 30, tzinfo=UTC)).second == 0  # strictly after
    assert timing.latest(moment, 60) == datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC)
    assert timing.latest(moment, 10) is None  # 17.5 s late: outside a 10 s grace


def test_cron_times_are_computed_in_the_schedules_time_zone() -> None:
    timing = Timing(
        validate_schedule({"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}), UTC_ZONE
    )
    # Tuesday 2026-11-24 02:00 UTC is 10:00 in Shanghai: next is Wednesday 09:00 +08:00
    fire = timing.after(datetime(2026, 11, 24, 2, 0, tzinfo=UTC))
    assert fire.isoformat() == "2026-11-25T09:00:00+08:00"
    friday = timing.after(datetime(2026, 11, 27, 2, 0, tzinfo=UTC))
    assert friday.isoformat() == "2026-11-30T09:00:00+08:00"  # the weekend is skipped


def test_after_downtime_only_the_latest_missed_occurrence_is_run() -> None:
    timing = Timing(validate_schedule({"cron": "*/5 * * * *"}), UTC_ZONE)
    now = datetime(2026, 11, 24, 10, 17, 0, tzinfo=UTC)
    assert timing.latest(now, 3600) == datetime(2026, 11, 24, 10, 15, tzinfo=UTC)
    assert timing.latest(now, 60) is None


def test_schedules_compare_by_value_for_reload() -> None:
    a = validate_schedule({"every": "1m", "send_to": [{"platform": "discord", "chat": "9"}]})
    b = validate_schedule({"every": 60, "send_to": [{"platform": "discord", "chat": 9}]})
    assert a == b and isinstance(a, Schedule)


@pytest.mark.parametrize(
    ("weekdays", "expected"),
    [("1-5", "mon,tue,wed,thu,fri"), ("0", "sun"), ("7", "sun"), ("0,6", "sun,sat"),
     ("*/2", "sun,tue,thu,sat"), ("mon-fri", "mon-fri"), ("*", "*")],
)  # fmt: skip
def test_cron_weekday_numbers_mean_what_they_mean_in_crontab(weekdays: str, expected: str) -> None:
    from tmy.cron.schedule import _standard_weekdays

    assert _standard_weekdays(weekdays) == expected


def test_misfire_grace_and_send_retry_are_bounded_at_load() -> None:
    with pytest.raises(RuleError, match="at most 86400"):
        load(rule_with("every: 5s\nmisfire_grace: 86401"))
    with pytest.raises(RuleError, match="'send_retry:' must be seconds"):
        load(rule_with("every: 5s\nsend_retry: -1"))
    schedule = validate_schedule({"every": 5, "send_retry": 600})
    assert schedule.retry_window == 600 and validate_schedule({"every": 5}).retry_window == 60


def test_a_onebot_target_must_be_a_group_or_a_private_chat() -> None:
    """A bare number would post nowhere (OneBot chats are group:<id> / private:<id>)."""
    with pytest.raises(RuleError) as caught:
        load(rule_with("cron: '0 8 * * *'\nsend_to: [{platform: onebot, chat: '123456'}]"))
    assert "did you mean 'group:123456'?" in str(caught.value)
    assert load(rule_with("cron: '0 8 * * *'\nsend_to: [{platform: onebot, chat: 'group:5'}]"))


def test_send_to_takes_the_newer_platforms_and_a_platform_behind_satori() -> None:
    for platform, chat in (
        ("qq", "group:c1"), ("feishu", "oc_1"), ("slack", "C1"), ("matrix", "!r:m.org"),
        ("satori:qq", "c1"),
    ):  # fmt: skip
        rule = rule_with(
            f"cron: '0 8 * * *'\nsend_to: [{{platform: '{platform}', chat: '{chat}'}}]"
        )
        assert load(rule)
    with pytest.raises(RuleError, match="unknown platform 'sattori:qq'"):
        load(rule_with("cron: '0 8 * * *'\nsend_to: [{platform: 'sattori:qq', chat: c1}]"))


def test_a_target_the_adapter_would_refuse_on_every_send_is_refused_at_load() -> None:
    """A satori target must name the platform behind the server; a qq chat its kind."""
    for platform, chat, message in (
        ("satori", "1", "names the platform behind the server"),
        ("satori:", "1", "names the platform behind the server"),
        ("qq", "12345", "a qq chat is group:<group_openid>"),
    ):
        rule = rule_with(
            f"cron: '0 8 * * *'\nsend_to: [{{platform: '{platform}', chat: '{chat}'}}]"
        )
        with pytest.raises(RuleError, match=message):
            load(rule)
    for chat in ("group:ABC", "private:u1", "channel:9", "dm:7", "guild:5"):
        assert load(rule_with(f"cron: '0 8 * * *'\nsend_to: [{{platform: qq, chat: '{chat}'}}]"))
