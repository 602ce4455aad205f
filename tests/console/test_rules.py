"""The console's Rules pages: the data (rows, pages, filters, warnings with file:line, a
rule's source) on a real rulebook, and the pages served by a real daemon over loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.console import console_daemon, logged_in
from tmy.app import build_registry
from tmy.console import rules as page
from tmy.rulebook.loader import load_sources
from tmy.testing import Bot, Daemon
from tmy.testing.bot import settings_for

A_YAML = """\
variables:
  n: {scope: user, default: 0}
rules:
  # says hi
  - id: hello
    description: says hi to <b>you</b>
    triggers: [hello, "hi *"]
    steps:
      - plugin: ADJUST
        input: "hi {USER_NAME}"

  - id: shadow
    triggers: [hello]
    steps: [{plugin: ADJUST, input: never}]

  - id: count
    triggers: [count]
    platforms: [onebot]
    private: false
    steps:
      - {plugin: ADJUST, input: "?= n + 1"}
      # a comment inside the rule
      - {plugin: ADJUST, save: n}

tests:
  - send: hello
    expect: hi tester
"""

B_YAML = """\
rules:
  - id: tick
    schedule: {every: 60s}
    steps: [{plugin: ADJUST, input: tick}]
  -
    id: welcome
    events: [member_join]
    steps: [{plugin: ADJUST, input: "welcome"}]
"""


def write_rules(root: Path) -> Path:
    folder = root / "rules"
    folder.mkdir()
    (folder / "a.yaml").write_text(A_YAML)
    (folder / "b.yaml").write_text(B_YAML)
    return folder


@pytest.fixture
async def bot(tmp_path: Path):
    async with Bot(write_rules(tmp_path)) as bot:
        yield bot


def test_filters_and_rows(bot: Bot) -> None:
    rulebook = bot.app.rulebook
    count = page.rule_row(rulebook.by_id["count"], warnings=2)
    assert count["filters"]["platforms"] == ["onebot"]
    assert count["filters"]["private"] is False
    assert count["filters"]["text"] == "platforms onebot; groups only"
    assert count["warnings"] == 2 and count["steps"] == 2
    assert count["file"].endswith("a.yaml") and count["line"] == 16
    tick = page.rule_row(rulebook.by_id["tick"])
    assert tick["schedule"]["text"] == "every 60s" and tick["triggers"] == []
    assert page.rule_row(rulebook.by_id["welcome"])["events"] == ["member_join"]
    assert page.rule_row(rulebook.by_id["hello"])["filters"]["text"] == ""


def test_where_splits_file_and_line() -> None:
    got = page.where("rules/a.yaml:12: trigger 'x' can never fire")
    assert (got["file"], got["line"], got["where"]) == ("rules/a.yaml", 12, "rules/a.yaml:12")
    assert got["text"] == "trigger 'x' can never fire"
    assert page.where("no place here")["where"] == ""


async def test_warnings_have_file_line_and_rule(bot: Bot) -> None:
    found = await page.warnings_for(bot.app)
    texts = [w["text"] for w in found.items]
    dead = next(w for w in found.items if "can never fire" in w["text"])
    assert dead["rule"] == "shadow" and dead["where"].endswith("a.yaml:12"), texts
    adapter = next(w for w in found.items if "onebot" in w["text"])
    assert adapter["rule"] == "count"
    assert [a["where"].rsplit("/", 1)[-1] for a in found.atomic] == ["a.yaml:16"]
    assert "holds n" in found.atomic[0]["text"]
    assert await page.warnings_for(bot.app) is found  # once per rulebook


async def test_warnings_follow_a_reload(bot: Bot, tmp_path: Path) -> None:
    before = await page.warnings_for(bot.app)
    (tmp_path / "rules" / "a.yaml").write_text(
        A_YAML.replace("triggers: [hello]", "triggers: [bye]")
    )
    assert (await bot.app.reload("test")).ok
    after = await page.warnings_for(bot.app)
    assert after is not before
    assert not any("can never fire" in w["text"] for w in after.items)


def test_listing_pages_and_filters(tmp_path: Path) -> None:
    text = "rules:\n" + "".join(
        f"  - id: r{i}\n    triggers: [w{i}]\n    steps: [{{plugin: ADJUST, input: x}}]\n"
        for i in range(250)
    )
    settings, _ = settings_for({"big.yaml": text}, tmp_path)
    rulebook = load_sources([(Path("big.yaml"), text)], build_registry(settings))
    found = page.Warnings([], (), rulebook)
    first = page.listing(rulebook, found)
    assert (first["total"], first["matching"], first["pages"], first["page"]) == (250, 250, 3, 1)
    assert [r["id"] for r in first["rules"]][:2] == ["r0", "r1"] and len(first["rules"]) == 100
    last = page.listing(rulebook, found, page_no=99)
    assert last["page"] == 3 and len(last["rules"]) == 50
    assert page.listing(rulebook, found, page_no=-4)["page"] == 1
    hit = page.listing(rulebook, found, q="W24")
    assert [r["id"] for r in hit["rules"]] == ["r24", *[f"r{i}" for i in range(240, 250)]]
    assert page.listing(rulebook, found, file="other.yaml")["matching"] == 0
    assert first["files"] == [{"file": "big.yaml", "rules": 250}]


def test_source_is_the_rules_lines(bot: Bot) -> None:
    rb = bot.app.rulebook
    hello = page.rule_source(rb.by_id["hello"])
    assert [x["no"] for x in hello["lines"]] == [5, 6, 7, 8, 9, 10]
    assert hello["lines"][0]["text"] == "  - id: hello"
    count = page.rule_source(rb.by_id["count"])
    texts = [x["text"] for x in count["lines"]]
    assert texts[0] == "  - id: count" and texts[-1] == "      - {plugin: ADJUST, save: n}"
    assert "      # a comment inside the rule" in texts  # the tests: below are not
    welcome = page.rule_source(rb.by_id["welcome"])
    assert welcome["lines"][0]["text"].strip() == "id: welcome"
    assert welcome["lines"][-1]["text"].endswith('input: "welcome"}]')


def test_source_of_a_file_gone(bot: Bot, tmp_path: Path) -> None:
    rule = bot.app.rulebook.by_id["tick"]
    (tmp_path / "rules" / "b.yaml").unlink()
    got = page.rule_source(rule)
    assert got["lines"] == [] and "cannot be read" in got["error"]


async def test_detail(bot: Bot) -> None:
    rb = bot.app.rulebook
    found = await page.warnings_for(bot.app)
    shadow = page.rule_detail(rb.by_id["shadow"], rb, found)
    assert shadow["id"] == "shadow" and shadow["triggers"][0]["kind"] == "exact"
    assert any("can never fire" in w["text"] for w in shadow["warnings"])
    assert shadow["try_text"] == "hello"
    count = page.rule_detail(rb.by_id["count"], rb, found)
    assert count["atomic"] and count["steps"][1]["uri"] == "count/1"
    assert page.rule_detail(rb.by_id["tick"], rb, found)["schedule"]["text"] == "every 60s"


# -- the pages, served ---------------------------------------------------------------------------


@pytest.fixture
async def served(tmp_path: Path):
    async with console_daemon(write_rules(tmp_path)) as daemon:
        yield daemon


async def test_the_rules_page_lists_rules_warnings_and_files(served: Daemon) -> None:
    async with logged_in(served) as client:
        response = await client.get("rules")
        assert response.status_code == 200
        html = response.text
        for rule in ("hello", "shadow", "count", "tick", "welcome"):
            assert f"?id={rule}" in html
        assert "says hi to &lt;b&gt;you&lt;/b&gt;" in html and "<b>you</b>" not in html
        assert "can never fire" in html and "a.yaml:12" in html  # a dead trigger, file:line
        assert "holds n" in html  # the atomic span
        assert "every 60s" in html and "event member_join" in html
        assert 'action="/console/rules/reload"' in html and 'name="csrf"' in html
        data = await client.json("rules")
        assert data["total"] == 5 and len(data["files"]) == 2
        assert {r["id"] for r in data["rules"]} == {"hello", "shadow", "count", "tick", "welcome"}
        assert any(w["where"].endswith("a.yaml:12") for w in data["warnings"])
        narrowed = await client.json("rules", q="member_join")
        assert [r["id"] for r in narrowed["rules"]] == ["welcome"]


async def test_one_rule_with_its_source(served: Daemon) -> None:
    async with logged_in(served) as client:
        response = await client.get("rules/rule", params={"id": "hello"})
        assert response.status_code == 200
        html = response.text
        assert "  - id: hello" in html and "says hi to &lt;b&gt;you&lt;/b&gt;" in html
        assert "tests:" not in html
        assert "/console/playground?text=hello" in html
        data = await client.json("rules/rule", id="count")
        assert data["filters"]["text"] == "platforms onebot; groups only"
        assert data["source"]["lines"][0]["no"] == 16 and data["atomic"]
        missing = await client.get("rules/rule", params={"id": "nope", "format": "json"})
        assert missing.status_code == 404 and "nope" in missing.json()["error"]


async def test_a_broken_reload_shows_file_line_while_the_old_rules_answer(
    served: Daemon, tmp_path: Path
) -> None:
    broken = tmp_path / "rules" / "broken.yaml"
    broken.write_text("rules:\n  - id: bad\n    triggers: [bad]\n    steps: [{plugin: NOPE}]\n")
    async with logged_in(served) as client:
        posted = await client.post("rules/reload")
        assert posted.status_code == 303 and posted.headers["location"] == "/console/rules"
        html = (await client.get("rules")).text
        assert "failed" in html and "broken.yaml:4" in html, html
        assert (await served.push("hello", user="ann")).text == "hi ann"  # the old rules
        data = (await client.post("rules/reload", params={"format": "json"})).json()
        assert data["ok"] is False and data["errors_at"][0]["where"].endswith("broken.yaml:4")
        broken.unlink()
        fixed = await client.post("rules/reload", params={"format": "json"})
        assert fixed.status_code == 200 and fixed.json()["rules"] == 5
        html = (await client.get("rules")).text
        assert "broken.yaml" not in html and "reloaded 5 rules from 2 files" in html


async def test_the_viewer_and_a_post_without_a_token_cannot_reload(served: Daemon) -> None:
    async with logged_in(served, viewer=True) as viewer:
        assert (await viewer.get("rules")).status_code == 200
        assert (await viewer.post("rules/reload")).status_code == 403
    async with logged_in(served) as admin:
        assert (await admin.post("rules/reload", data={"csrf": None})).status_code == 403
        assert (await admin.get("rules")).text.count("Last reload") == 0


@pytest.mark.slow
async def test_ten_thousand_rules_are_paged(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    for f in range(10):
        (folder / f"f{f}.yaml").write_text(
            "rules:\n"
            + "".join(
                f"  - id: r{n}\n    triggers: [w{n}]\n    steps: [{{plugin: ADJUST, input: x}}]\n"
                for n in range(f * 1000, (f + 1) * 1000)
            )
        )
    async with console_daemon(folder) as daemon, logged_in(daemon) as client:
        html = (await client.get("rules", params={"page": "7"})).text
        assert html.count('href="/console/rules/rule?id=') == page.PAGE_SIZE
        assert "page 7 of 100" in html and "page=8" in html and "page=6" in html
        data = await client.json("rules", q="r9999")
        assert [r["id"] for r in data["rules"]] == ["r9999"] and data["pages"] == 1
        detail = await client.json("rules/rule", id="r9999")
        assert detail["source"]["lines"][0]["text"] == "  - id: r9999"
