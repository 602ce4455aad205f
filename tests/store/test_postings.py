"""The store's lexical index (tmy.store.textindex) on every backend: real SQLite files, a
real Redis, a real Redis Cluster — the same answers everywhere, writes applied once, the
index carried by snapshots and restores (across backends too), metered, read through an
overlay that never writes it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_cluster import STORE_BACKENDS_WITH_CLUSTER
from tmy.errors import StoreError
from tmy.store import Store, open_store
from tmy.store.metered import metered
from tmy.store.overlay import OverlayStore
from tmy.store.textindex import ENTRY_PREFIX, IndexDoc, plan

NS = "mem/user/test/a{n}n"  # braces: a hash tag inside the namespace must not split its slot


@pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


def corpus(n: int, seed: int = 7) -> list[IndexDoc]:
    rnd = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)] + ["猫", "喜欢", "c:a,t"]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    docs = []
    for i in range(n):
        tf: dict[str, int] = {}
        for term in rnd.choices(vocab, weights, k=5):
            tf[term] = tf.get(term, 0) + 1
        docs.append(IndexDoc(f"d{i}", tf, order=float(rnd.randint(0, 9))))
    return docs


def brute(docs: list[IndexDoc], terms: list[str]) -> dict[str, tuple[int, dict[str, int]]]:
    """Every document holding a term: what a search within its budget must return."""
    out = {}
    for d in docs:
        hit = {t: d.tf[t] for t in terms if t in d.tf}
        if hit:
            out[d.doc] = (d.size, hit)
    return out


async def test_put_search_remove_order_and_stats(store: Store) -> None:
    docs = corpus(300)
    await store.index_put(NS, docs)
    stats = await store.index_stats(NS, ["w0", "猫", "absent"])
    assert stats.n == 300 and stats.total == 1500
    assert stats.df["w0"] == sum("w0" in d.tf for d in docs) and stats.df["absent"] == 0
    for terms in (["w30", "w40"], ["猫", "c:a,t", "w50"], ["absent"], []):
        hits = await store.index_search(NS, terms, budget=100_000)
        assert hits.complete and hits.docs == brute(docs, terms)
    # a replaced document takes its old postings with it; removal is counted once
    await store.index_put(NS, [IndexDoc("d1", {"w59": 2, "new": 1}, length=7, order=-5)])
    hits = await store.index_search(NS, ["new", "w59"], budget=100_000)
    assert hits.docs["d1"] == (7, {"new": 1, "w59": 2})
    assert (await store.index_stats(NS)).total == 1500 - docs[1].size + 7
    assert await store.index_remove(NS, ["d2", "d2", "nope"]) == 1
    assert await store.index_remove(NS, ["d2"]) == 0
    assert (await store.index_stats(NS)).n == 299
    await store.index_order(NS, {"d3": -9.5, "ghost": -99})
    assert (await store.index_lowest(NS, 2))[:2] == [("d3", -9.5), ("d1", -5.0)]
    lowest_new = await store.index_lowest(NS, 5, term="new")
    assert lowest_new == [("d1", -5.0)]
    assert await store.index_drop(NS) == 299
    assert (await store.index_stats(NS, ["w0"])).df == {"w0": 0}
    assert (await store.index_search(NS, ["w0"])).docs == {}


async def test_a_batch_replacing_its_own_and_older_documents_counts_each_term_once(
    store: Store,
) -> None:
    """One put of many documents — some replacing older ones, one given twice (the last
    wins) — leaves the same counts as putting them one by one."""
    first, second = corpus(80, seed=1), corpus(80, seed=2)
    await store.index_put(NS, first)
    batch = [*second[:40], IndexDoc("d5", {"w1": 9}), IndexDoc("d5", {"w2": 1, "w3": 1})]
    await store.index_put(NS, batch)
    final = {d.doc: d for d in first} | {d.doc: d for d in batch}
    stats = await store.index_stats(NS, ["w0", "w1", "w2", "w3"])
    assert stats.n == 80 and stats.total == sum(d.size for d in final.values())
    for term in ("w0", "w1", "w2", "w3"):
        assert stats.df[term] == sum(term in d.tf for d in final.values()), term
    hits = await store.index_search(NS, ["w1", "w2"], budget=100_000)
    assert hits.docs == brute(list(final.values()), ["w1", "w2"])
    assert hits.docs["d5"] == (2, {"w2": 1})


async def test_several_namespaces_are_searched_at_once(store: Store) -> None:
    await store.index_put(NS, [IndexDoc("a", {"x": 1, "y": 2})])
    await store.index_put("mem/global", [IndexDoc("g", {"y": 1})])
    many = await store.index_search_many([NS, "mem/chat/none", "mem/global"], ["y", "x"])
    one = [await store.index_search(ns, ["y", "x"]) for ns in (NS, "mem/chat/none", "mem/global")]
    assert many == one
    assert [h.docs for h in many] == [{"a": (3, {"x": 1, "y": 2})}, {}, {"g": (1, {"y": 1})}]


async def test_a_common_term_is_probed_not_read_whole(store: Store) -> None:
    """With 400 documents holding "common" and a budget of 50, the rare term's postings are
    read and the common one's counts only looked up for them; two terms over the budget
    give their intersection, newest first."""
    docs = [
        IndexDoc(f"c{i}", {"common": 1, **({"both": 1} if i % 10 == 0 else {})}) for i in range(400)
    ]
    docs += [IndexDoc("r1", {"rare": 1, "common": 2}), IndexDoc("r2", {"rare": 1})]
    await store.index_put(NS, docs)
    hits = await store.index_search(NS, ["common", "rare"], budget=50)
    assert hits.complete and hits.docs == {
        "r1": (3, {"rare": 1, "common": 2}),
        "r2": (1, {"rare": 1}),
    }
    assert hits.stats.df == {"common": 401, "rare": 2}
    hits = await store.index_search(NS, ["common"], budget=50)
    assert not hits.complete and len(hits.docs) == 50 and "r1" in hits.docs  # the newest 50
    more = [IndexDoc(f"b{i}", {"both": 1}) for i in range(60)]
    await store.index_put(NS, more)
    hits = await store.index_search(NS, ["both", "common"], budget=30)
    assert not hits.complete and len(hits.docs) == 30
    assert all(tf.keys() == {"both", "common"} for _, tf in hits.docs.values())
    assert set(hits.docs) == {f"c{i}" for i in range(100, 400, 10)}  # the newest 30 holding both
    assert plan({"a": 5, "b": 500, "c": 900, "z": 0}, 100).probe == ["b", "c"]


async def test_a_search_probing_and_reading_9000_candidates(store: Store) -> None:
    """Lists longer than Lua's unpack() limit (~8,000) go to ZMSCORE / HMGET in chunks."""
    docs = [IndexDoc(f"d{i}", {"a": 1, "b": 1 + i % 2}) for i in range(9000)]
    for start in range(0, 9000, 3000):
        await store.index_put(NS, docs[start : start + 3000])
    hits = await store.index_search(NS, ["a", "b"], budget=10_000)  # b probed among 9000
    assert hits.complete and len(hits.docs) == 9000
    assert hits.docs["d3"] == (3, {"a": 1, "b": 2}) and hits.docs["d4"] == (2, {"a": 1, "b": 1})


async def test_any_namespace_a_store_key_can_be(store: Store) -> None:
    """A namespace follows the rules of store keys: memory names them after owner keys."""
    names = ["mem/user/t/a\nb", "mem/user/t/" + "%2F" * 200, "a\rb\x00c", "k\u00e9y/\u6f22"]
    for i, ns in enumerate(names):
        await store.index_put(ns, [IndexDoc(f"d{i}", {"cat": 1})])
    for i, ns in enumerate(names):
        assert list((await store.index_search(ns, ["cat"])).docs) == [f"d{i}"]
    for bad in ("", "a\ud800b"):
        with pytest.raises(StoreError):
            await store.index_put(bad, [IndexDoc("d", {"cat": 1})])


async def test_bad_documents_are_refused_before_anything_is_written(store: Store) -> None:
    for bad in (
        IndexDoc("a b", {"x": 1}),
        IndexDoc("a/b", {"x": 1}),
        IndexDoc("ok", {"x": 0}),
        IndexDoc("ok", {"": 1}),
        IndexDoc("ok", {"x": 1}, length=2**63),
        IndexDoc("ok", {"x": 1}, order=float("nan")),
        IndexDoc("ok", {"x": 1}, order=float("inf")),
    ):
        with pytest.raises(StoreError):
            await store.index_put(NS, [IndexDoc("first", {"x": 1}), bad])
    assert (await store.index_stats(NS)).n == 0


async def test_a_backup_of_the_index_restores_into_an_empty_store_of_any_kind(
    store: Store, tmp_path: Path
) -> None:
    docs = corpus(120)
    await store.index_put(NS, docs)
    await store.index_put("kb/faq", [IndexDoc("chunk-1", {"refund": 2, "退款": 1}, order=3.0)])
    await store.set("mem/e/user/test/ann/d1", {"text": "x"})
    snap = await store.snapshot()
    assert sum(k.startswith(ENTRY_PREFIX) for k, _, _ in snap.entries) == 121
    for target_url in (f"sqlite:///{tmp_path / 'copy.db'}", store.url):
        target = open_store(target_url)
        await target.open()
        try:
            await target.restore(snap, replace=True)
            terms = ["w3", "猫", "w20"]
            hits = await target.index_search(NS, terms, budget=100_000)
            assert hits.docs == brute(docs, terms)
            assert (await target.index_lowest("kb/faq", 1)) == [("chunk-1", 3.0)]
            assert await target.get("mem/e/user/test/ann/d1") == {"text": "x"}
            assert [k for k, _, _ in (await target.snapshot()).entries] == [
                k for k, _, _ in snap.entries
            ]
        finally:
            await target.close()


async def test_metered_and_overlay_pass_the_index_through(store: Store) -> None:
    wrapped = metered(store)
    await wrapped.index_put(NS, [IndexDoc("a", {"x": 1})])
    assert (await wrapped.index_search(NS, ["x"])).docs == {"a": (1, {"x": 1})}
    overlay = OverlayStore(store)
    await overlay.index_put(NS, [IndexDoc("b", {"x": 1})])
    await overlay.index_remove(NS, ["a"])
    assert set((await overlay.index_search(NS, ["x"])).docs) == {"a"}  # the real index, unchanged
    assert [name for name, _ in overlay.index_writes()] == ["index_put", "index_remove"]
    await overlay.replay_index(store)
    assert set((await store.index_search(NS, ["x"])).docs) == {"b"}


@pytest.mark.redis
async def test_a_resent_redis_write_applies_once(redis_store_url: str) -> None:
    """The put script records its operation id: the same call sent twice (as redis-py
    resends after a lost reply) counts the document once."""
    store: Any = open_store(redis_store_url)
    await store.open()
    try:
        head, keys = store._ix_keys(NS)
        record = store._ix_record(NS)
        args = [store._op_px, head, "d", 1, "0.0", b'{"x":1}']
        for _ in range(2):
            await store._ix_call("put", "test", [*keys, record], args)
        stats = await store.index_stats(NS, ["x"])
        assert (stats.n, stats.total, stats.df) == (1, 1, {"x": 1})
        await store._ix_call("put", "test", [*keys, store._ix_record(NS)], args)
        assert (await store.index_stats(NS)).n == 1  # a new put of the same id replaces it
    finally:
        await store.close()
