"""Secrets registered for redaction (tmy/redact.py)."""

from __future__ import annotations

from tmy import logs

# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


def test_redaction_registry() -> None:
    from tmy import redact

    redact.add_url("redis://default:St0re-Pa55@127.0.0.1:6379/0")
    assert redact.redact("AUTH failed for St0re-Pa55!") == "AUTH failed for ***!"
    assert redact.safe_url("redis://default:St0re-Pa55@h:1/0") == "redis://default:***@h:1/0"
    assert redact.safe_url("http://h/x?a=b@c") == "http://h/x?a=b@c"
    redact.add("ab")  # too short to be a secret: not registered
    assert redact.redact("abc") == "abc"
    line = logs._render(None, "info", {"event": "x", "detail": 'key "St0re-Pa55"'})
    assert b"St0re-Pa55" not in line
