"""The console's Schedules page: its data (the ``cron`` report with the newest runs first,
the targets "fire now" offers) and the page on a served daemon (fire now, dry run,
viewer refused, JSON)."""

from __future__ import annotations

from tmy.console.schedules import jobs_view, target_choice


def test_targets_are_offered_as_cron_fire_takes_them() -> None:
    assert target_choice("onebot:group:5:") == "onebot:group:5"
    assert target_choice("telegram:-100123:") == "telegram:-100123"
    assert target_choice("onebot:private:bob:bob") == "onebot:private:bob"
    assert target_choice("console::") == "console"


def test_jobs_show_the_newest_runs_first_with_how_each_went() -> None:
    base = {"daemon": "d", "target": "t:c:", "outcome": "ok", "sent": "ok"}
    runs = [
        {**base, "fire_time": f"2026-01-0{i}T09:00:00+00:00", "trace_id": f"t{i}"}
        for i in range(1, 8)
    ]
    by = "console console:console"
    failed = {"outcome": "error", "error": "boom", "sent": "not sent (error)"}
    runs.append({**runs[0], **failed, "fire_time": "late", "manual": True, "by": by})
    runs.append({**runs[0], "fire_time": "retry", "attempt": 2, "sent": "gave up"})
    job = {"rule": "digest", "send_to": ["onebot:group:5:", "test:c:"], "last_runs": runs}
    (view,) = jobs_view([job], last=3)
    assert view["targets"] == ["onebot:group:5", "test:c"]
    assert view["runs_total"] == 9
    shown = view["last_runs"]
    assert [r["fire_time"] for r in shown] == ["retry", "late", "2026-01-07T09:00:00+00:00"]
    assert shown[0]["kind"] == "retry 2" and shown[0]["failed"]  # gave up sending
    assert shown[1]["kind"] == "fired now by console console:console" and shown[1]["failed"]
    assert shown[1]["error"] == "boom"
    assert shown[2]["kind"] == "scheduled" and not shown[2]["failed"]
    assert shown[2]["trace_id"] == "t7"
