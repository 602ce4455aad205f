"""``POST /admin/commands/{name}`` and ``POST /admin/reload`` on a real listener."""

from __future__ import annotations

from typing import Any

import httpx

from tmy.testing import serving

RULES = {"r.yaml": "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"}
KEY = "k-http-commands"
VARS_USAGE = "usage: vars get|set|del PATH [VALUE] (or vars list)"


async def _post(
    url: str, path: str, key: str | None = KEY, headers: dict[str, str] | None = None, **kw: Any
) -> httpx.Response:
    headers = {**(headers or {}), **({"Authorization": f"Bearer {key}"} if key else {})}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await client.post(path, headers=headers, **kw)


async def test_commands_answer_text_and_data_and_refuse_what_they_must() -> None:
    async with serving(RULES, http_api_keys=(KEY,)) as daemon:
        url = daemon.url
        ok = await _post(url, "/admin/commands/rules", json={"args": {"id": "hi"}})
        assert ok.status_code == 200
        body = ok.json()
        assert set(body) == {"command", "ok", "text", "data"}
        assert body["command"] == "rules" and body["ok"] and body["data"]["id"] == "hi"
        bare = await _post(url, "/admin/commands/help")  # a bodiless POST: no arguments
        assert bare.status_code == 200 and bare.json()["text"].startswith("commands: ")

        missing = await _post(url, "/admin/commands/nosuch", json={})
        assert missing.status_code == 404
        assert "rules" in missing.json()["data"]["commands"]
        assert "'nosuch'" in missing.json()["text"]

        nokey = await _post(url, "/admin/commands/rules", key=None, json={})
        assert nokey.status_code == 401 and "API key" in nokey.json()["error"]
        wrong = await _post(url, "/admin/commands/rules", key="nope", json={})
        assert wrong.status_code == 401

        bad = await _post(url, "/admin/commands/rules", json={"args": {"rule": "hi"}})
        assert bad.status_code == 400 and bad.json()["ok"] is False
        assert bad.json()["text"].startswith("error: rules has no argument 'rule'")
        usage = await _post(url, "/admin/commands/vars", json={"argv": ""})
        assert usage.json()["text"] == "error: " + VARS_USAGE
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        typed = await _post(url, "/admin/commands/rules", content=b"id=hi", headers=form)
        assert typed.status_code == 415  # not JSON: refused before anything runs

        reload = await _post(url, "/admin/reload", json={})
        assert reload.status_code == 200
        assert {"ok", "rules", "files", "ms", "warnings", "errors"} <= set(reload.json())
        assert reload.json()["rules"] == 1
        assert (await _post(url, "/admin/reload", key=None, json={})).status_code == 401


EVENT_RULES = {
    "e.yaml": """
rules:
  - id: welcome
    events: [member_join]
    session: {seconds: 60, debounce: 3}
    steps: [{plugin: ADJUST, input: "welcome {USER} ({EVENT_DATA[operator]})"}]
"""
}


async def test_explain_event_and_rules_over_http() -> None:
    async with serving(EVENT_RULES, http_api_keys=(KEY,)) as daemon:
        url = daemon.url
        explained = await _post(
            url,
            "/admin/commands/explain",
            json={
                "args": {"event": "member_join", "data": '{"operator": "op"}'},
                "user": "ann",
                "chat": "group:1",
                "platform": "onebot",
            },
        )
        detail = await _post(url, "/admin/commands/rules", json={"args": {"id": "welcome"}})
    body = explained.json()
    assert explained.status_code == 200, body
    assert body["data"]["matched"] == "welcome" and body["data"]["via"] == "event"
    assert body["data"]["reply"]["text"] == "welcome ann (op)"
    assert body["text"].startswith("matched rule 'welcome' for the event member_join")
    shown = detail.json()
    assert shown["data"]["events"] == ["member_join"] and shown["data"]["debounce"] == 3
    assert "events: member_join" in shown["text"]
    assert "a burst answered after 3 s of silence" in shown["text"]
