"""The instruments behind tmy's metrics: hot-path counters and histograms, capped labels.

prometheus-client's metric children take a lock and build objects per
``inc``/``observe``; :class:`HotMetric` keeps plain ints and floats instead
(the daemon is single-threaded) and builds metric families only at scrape.
:class:`Children` caches the labelled children per label value, at most
:data:`MAX_LABEL_VALUES` of them; later values share ``"other"``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

MAX_LABEL_VALUES = 1000  # distinct values of a free label per metric; the rest count as "other"
OTHER = "other"
_MAX_LABEL_CHARS = 120  # a label value longer than this is cut (it is still one cache entry)


class _Count:
    """One labelled counter value: a plain float (prometheus-client's child takes a lock).

    A float, as Prometheus counts (its exposition is the same for 3 and 3.0): ``+= 1.0``
    reuses a freed float where an int past 256 is a new allocation each time (a few
    hundred instructions of a FAQ answer's three counts)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Observed:
    """One labelled histogram: per-bucket counts and a sum, cumulated only at scrape."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)  # the last one is +Inf (floats: _Count)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1.0
        self.sum += seconds


class HotMetric:
    """A counter or histogram for the per-message hot path, exported by a collector.

    prometheus-client's metric children take a lock and build objects per
    ``inc``/``observe`` (about a microsecond each, several per message); these
    are plain ints and floats in this single-threaded daemon, turned into
    metric families only when ``/metrics`` is scraped. Same names, labels and
    ``labels(...)`` interface as the client's metrics.
    """

    def __init__(
        self,
        name: str,
        doc: str,
        labelnames: list[str],
        *,
        registry: CollectorRegistry,
        buckets: tuple[float, ...] | None = None,
    ) -> None:
        self.name = name
        self.doc = doc
        self.labelnames = labelnames
        self.buckets = buckets
        self.children: dict[tuple[str, ...], Any] = {}
        registry.register(self)

    def labels(self, *values: str) -> Any:
        key = tuple(values)
        child = self.children.get(key)
        if child is None:
            child = _Observed(self.buckets) if self.buckets is not None else _Count()
            self.children[key] = child
        return child

    def describe(self) -> list[Metric]:
        return [self._family()]

    def _family(self) -> Any:
        if self.buckets is None:
            return CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        return HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for key, child in list(self.children.items()):
            if self.buckets is None:
                family.add_metric(list(key), child.value)
                continue
            total, buckets = 0, []
            for bound, count in zip((*self.buckets, float("inf")), child.counts, strict=True):
                total += count
                buckets.append((_bound(bound), total))
            family.add_metric(list(key), buckets, child.sum)
        yield family


class SumOfCounters:
    """A counter that is the sum of other :class:`HotMetric` counters, label by label,
    added up at scrape: ``tmy_messages_received`` is ``matched + unmatched`` (every
    message is counted as exactly one of them), so the per-message path counts one
    value, not two."""

    def __init__(
        self,
        name: str,
        doc: str,
        labelnames: list[str],
        parts: tuple[HotMetric, ...] = (),
        *,
        registry: CollectorRegistry,
    ) -> None:
        """``parts`` may be given later (registered first, listed first)."""
        self.name = name
        self.doc = doc
        self.labelnames = labelnames
        self.parts = parts
        registry.register(self)

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self.name, self.doc, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        totals: dict[tuple[str, ...], float] = {}
        for part in self.parts:
            for key, child in list(part.children.items()):
                totals[key] = totals.get(key, 0.0) + child.value
        family = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for key, total in totals.items():
            family.add_metric(list(key), total)
        yield family


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class Children:
    """Labelled children per free label value, made on first use, at most ``cap`` values.

    ``make(value)`` builds whatever a call site needs for one value (a child, or
    a tuple of children). Values past the cap share the ``"other"`` entry.
    """

    __slots__ = ("cache", "cap", "make", "other")

    def __init__(self, make: Callable[[str], Any], cap: int = MAX_LABEL_VALUES) -> None:
        self.make = make
        self.cap = cap
        self.cache: dict[Any, Any] = {}
        self.other: Any = None

    def __call__(self, value: Any) -> Any:
        try:  # .get, not a subscript: past the cap every new value misses (a raise: ~100 ns)
            got = self.cache.get(value)
        except TypeError:  # unhashable: not a label value anyone meant
            value = repr(value)
            got = self.cache.get(value)
        if got is not None:
            return got
        if len(self.cache) >= self.cap:
            if self.other is None:
                self.other = self.make(OTHER)
            return self.other
        made = self.cache[value] = self.make(label(value))
        return made


def label(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if not text:
        return "none"
    return text if len(text) <= _MAX_LABEL_CHARS else text[:_MAX_LABEL_CHARS] + "…"


def outcomes(metric: Counter, allowed: tuple[str, ...]) -> Callable[[str], Any]:
    """``make`` for a [free label, outcome] counter: {outcome: child}, ``"other"`` included."""

    def make(value: str) -> dict[str, Any]:
        return {o: metric.labels(value, o) for o in (*allowed, OTHER)}

    return make
