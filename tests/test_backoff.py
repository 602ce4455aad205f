"""tmy.backoff: the pause grows to its cap with full jitter, never under half the base,
and starts over after reset — for adapters' reconnects and MCP servers' alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from tmy.adapters.base import Backoff as AdapterBackoff
from tmy.backoff import Backoff, retry_after


def test_pauses_stay_between_half_the_base_and_the_growing_ceiling() -> None:
    backoff = Backoff(base=0.5, cap=4.0)
    for attempt in range(12):
        ceiling = min(4.0, 0.5 * 2**attempt)
        assert 0.25 <= backoff.next() <= max(ceiling, 0.25)


def test_reset_starts_over_at_the_base() -> None:
    backoff = Backoff(base=1.0, cap=60.0)
    for _ in range(10):
        backoff.next()
    backoff.reset()
    assert backoff.attempt == 0 and backoff.next() <= 1.0


def test_adapters_find_the_same_class_where_they_always_did() -> None:
    assert AdapterBackoff is Backoff


def test_a_connection_that_served_stable_after_starts_the_pauses_over() -> None:
    backoff = Backoff(base=1.0, cap=60.0, stable_after=0.0)
    for _ in range(5):
        backoff.next()
    backoff.connected()
    backoff.ended()
    assert backoff.attempt == 0


def test_a_connection_closed_at_once_lets_the_pauses_grow() -> None:
    """Accepted, then closed before ``stable_after``: opening proved nothing."""
    backoff = Backoff(base=1.0, cap=60.0, stable_after=3600.0)
    for attempt in range(1, 6):
        backoff.connected()
        backoff.ended()
        backoff.next()
        assert backoff.attempt == attempt


def test_an_end_without_a_connection_or_without_service_resets_nothing() -> None:
    backoff = Backoff(base=1.0, cap=60.0, stable_after=0.0)
    backoff.next()
    backoff.ended()  # it never came up
    assert backoff.attempt == 1
    backoff.connected()
    backoff.ended(served=False)  # up, but it reported a failure (or never got ready)
    assert backoff.attempt == 1
    backoff.ended()  # the clock went with the previous end
    assert backoff.attempt == 1


def test_retry_after_reads_seconds_or_an_http_date() -> None:
    assert retry_after("120") == 120.0 and retry_after(" 1.5 ") == 1.5
    assert retry_after("-3") == 0.0
    soon = datetime.now(UTC) + timedelta(seconds=90)
    for header in (format_datetime(soon, usegmt=True), format_datetime(soon)):
        wait = retry_after(header)
        assert wait is not None and 80 <= wait <= 90
    naive = soon.strftime("%a, %d %b %Y %H:%M:%S -0000")  # a date that names no zone: UTC
    assert 80 <= (retry_after(naive) or 0.0) <= 90
    assert retry_after(format_datetime(soon - timedelta(hours=1), usegmt=True)) == 0.0
    for unreadable in (None, "", "  ", "soon", "Tuesday"):
        assert retry_after(unreadable) is None
