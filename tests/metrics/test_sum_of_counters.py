"""SumOfCounters: tmy_messages_received as matched + unmatched, summed at scrape, listed
where it always was."""

from __future__ import annotations

from tmy import metrics


def _exposition() -> str:
    return metrics.render()[0].decode()


def test_received_is_the_sum_of_matched_and_unmatched_in_the_exposition() -> None:
    platform = "review-sum"
    for matched in (True, True, False):
        metrics.message(platform, matched)
    labels = {"platform": platform}
    get = metrics.REGISTRY.get_sample_value
    assert get("tmy_messages_received_total", labels) == 3
    assert get("tmy_messages_matched_total", labels) == 2
    assert get("tmy_messages_unmatched_total", labels) == 1
    assert f'tmy_messages_received_total{{platform="{platform}"}} 3.0' in _exposition()


def test_received_is_listed_first_as_before() -> None:
    metrics.message("review-order", True)
    text = _exposition()
    at = {n: text.index(f"# HELP tmy_messages_{n}_total") for n in ("received", "matched")}
    assert at["received"] < at["matched"]
