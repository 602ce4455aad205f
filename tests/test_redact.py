"""Secrets registered for redaction (tmy/redact.py)."""

from __future__ import annotations

from tmy import logs, redact

# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


def test_redaction_registry() -> None:
    redact.add_url("redis://default:St0re-Pa55@127.0.0.1:6379/0")
    assert redact.redact("AUTH failed for St0re-Pa55!") == "AUTH failed for ***!"
    assert redact.safe_url("redis://default:St0re-Pa55@h:1/0") == "redis://default:***@h:1/0"
    assert redact.safe_url("http://h/x?a=b@c") == "http://h/x?a=b@c"
    redact.add("ab")  # too short to be a secret: not registered
    assert redact.redact("abc") == "abc"
    line = logs._render(None, "info", {"event": "x", "detail": 'key "St0re-Pa55"'})
    assert b"St0re-Pa55" not in line


def test_a_renewed_token_is_hidden_with_the_one_before_and_older_ones_are_forgotten() -> None:
    """An access token renewed every two hours must not pile up in the set every log line
    is checked against; the one just replaced may still be in a request in flight."""
    renewed = redact.RenewedSecret()
    try:
        for n in range(1, 5):
            renewed.renew(f"access-token-{n:04d}")
        shown = redact.redact(
            "access-token-0001 access-token-0002 access-token-0003 access-token-0004"
        )
        assert shown == "access-token-0001 access-token-0002 *** ***"
    finally:
        redact.forget("access-token-0003")
        redact.forget("access-token-0004")
    assert not any(s.startswith("access-token-") for s in redact._text)
