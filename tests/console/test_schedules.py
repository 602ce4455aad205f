"""The console's Schedules page: its data (the ``cron`` report with the newest runs first,
the targets "fire now" offers) and the page on a served daemon (fire now, dry run,
viewer refused, JSON)."""

from __future__ import annotations

from pathlib import Path

from tests.support.console import console_daemon, logged_in
from tests.support.log_helpers import read_log
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


# -- the page on a served daemon ---------------------------------------------------------------

RULES = """
variables:
  ticks: {scope: global, default: 0}
rules:
  - id: digest
    schedule:
      cron: "0 9 1 1 *"
      misfire_grace: 0
      send_to: [{platform: onebot, chat: "group:5"}, {platform: onebot, chat: "group:6"}]
      input: digest
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "<b>{QUESTION}</b> #{ticks} in {CHAT}"}
  - id: hello
    triggers: [hello]
    steps: [{plugin: ADJUST, input: hi}]
"""


async def test_the_page_lists_schedules_and_fire_now_posts_to_one_target(log_file: Path) -> None:
    async with console_daemon({"r.yaml": RULES}, platform="onebot", timezone="UTC") as daemon:
        async with logged_in(daemon) as admin:
            shown = await admin.get("schedules")
            assert shown.status_code == 200 and "digest" in shown.text
            assert "0 9 1 1 *" in shown.text and "No runs yet" in shown.text
            (job,) = (await admin.json("schedules"))["jobs"]
            assert job["targets"] == ["onebot:group:5", "onebot:group:6"]
            assert len(job["next"]) == 3 and job["next"][0].endswith("T09:00:00+00:00")

            tried = await admin.post(
                "schedules/try", {"rule": "digest", "target": "onebot:group:5"}
            )
            assert tried.status_code == 200 and "Dry run of" in tried.text
            assert "&lt;b&gt;digest&lt;/b&gt; #1 in group:5" in tried.text
            assert daemon.sent == [] and await daemon.var("ticks") == 0

            fired = await admin.post(
                "schedules/fire", {"rule": "digest", "target": "onebot:group:6"},
                params={"format": "json"},
            )  # fmt: skip
            assert fired.status_code == 200
            result = fired.json()["fired"]
            assert result["ok"] and not result["dry_run"]
            (run,) = result["data"]["runs"]
            assert run["target"] == "onebot:group:6" and run["outcome"] == "ok"
            post = await daemon.pop()
            assert (post.target.chat, post.text) == ("group:6", "<b>digest</b> #1 in group:6")

            (job,) = (await admin.json("schedules"))["jobs"]
            (last,) = job["last_runs"]
            assert last["kind"] == "fired now by console console:console"
            assert (last["outcome"], last["failed"]) == ("ok", False) and last["trace_id"]
            page = await admin.get("schedules")
            assert f"live/trace?id={last['trace_id']}" in page.text

            elsewhere = {"rule": "digest", "target": "onebot:group:5", "other": "onebot:group:7"}
            tried = await admin.post("schedules/try", elsewhere, params={"format": "json"})
            assert [r["target"] for r in tried.json()["fired"]["data"]["runs"]] == [
                "onebot:group:7"
            ]
            unknown = await admin.post("schedules/fire", {"rule": "nosuch"})
            assert unknown.status_code == 400 and "no rule &#39;nosuch&#39;" in unknown.text
            nowhere = await admin.post("schedules/fire", {"rule": "digest", "target": "mars:1"})
            assert nowhere.status_code == 400 and "no adapter can post to" in nowhere.text
        async with logged_in(daemon, viewer=True) as viewer:
            page = await viewer.get("schedules")
            assert "Fire now" not in page.text and "Try (dry run)" in page.text
            assert (await viewer.post("schedules/fire", {"rule": "digest"})).status_code == 403
            assert (await viewer.post("schedules/try", {"rule": "digest"})).status_code == 200
            bare = await viewer.post("schedules/try", {"rule": "digest", "csrf": None})
            assert bare.status_code == 403
        assert daemon.sent == [] and await daemon.var("ticks") == 1
    fires = [e for e in read_log(log_file) if e.get("what") == "schedules.fire"]
    assert [(f["rule"], f["target"], f["role"], f["ok"]) for f in fires] == [
        ("digest", "onebot:group:6", "admin", True),
    ]
