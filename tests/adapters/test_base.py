"""tmy.adapters.base.AdapterHealth: the state every adapter reports, counted and scrubbed
the same way in each (``connected`` once per connection, ``failed`` without credentials)."""

from __future__ import annotations

from tmy import metrics, redact
from tmy.adapters.base import AdapterHealth


def counted(name: str, adapter: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, {"adapter": adapter}) or 0.0


def test_connected_counts_a_connection_once_and_a_later_one_as_a_reconnect() -> None:
    health = AdapterHealth()
    assert health.connected("unit-base") is True
    assert health.connected("unit-base") is False  # a long poll answered again: no new count
    health.set("reconnecting", "lost")
    assert health.connected("unit-base") is True
    assert health.state == "connected" and health.error is None
    assert counted("tmy_adapter_connects_total", "unit-base") == 2
    assert counted("tmy_adapter_reconnects_total", "unit-base") == 1


def test_failed_keeps_credentials_out_of_the_state_and_the_returned_text() -> None:
    redact.add("s3cret-token-for-health")
    health = AdapterHealth()
    said = health.failed("refused s3cret-token-for-health")
    assert health.state == "failed"
    assert "s3cret-token-for-health" not in said and health.error == said
