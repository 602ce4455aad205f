"""The metered store's health (tmy/store/metered.py): a store that answers reads but
refuses every write is not ``ok``.

A real SQLite file is made "full" with ``PRAGMA max_page_count`` (SQLite then
fails writes with SQLITE_FULL, "database or disk is full", exactly as on a full
disk); ``ping`` — what ``/healthz`` asks — must report the last write error until
a write succeeds again.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tmy import metrics
from tmy.errors import LeaseLost, StoreError, ValueRefused
from tmy.store.metered import metered
from tmy.store.sqlite import SQLiteStore
from tmy.testing import serving


async def test_ping_reports_the_last_failed_write_until_a_write_succeeds(tmp_path: Path) -> None:
    store = metered(SQLiteStore(tmp_path / "full.db"))
    await store.open()
    try:
        await store.set("small", 1)
        await store.ping()
        db = store.inner._db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")  # the "disk" is full now
        with pytest.raises(StoreError, match="full"):
            await store.set("big", "x" * 200_000)
        assert await store.get("small") == 1  # reads still work ...
        with pytest.raises(StoreError, match=r"^last write failed: .*database or disk is full"):
            await store.ping()  # ... but the store is not healthy
        with pytest.raises(StoreError, match="full"):
            await store.commit([("big", "y" * 200_000, None)])
        with pytest.raises(StoreError, match="last write failed"):
            await store.ping()
        db.execute("PRAGMA max_page_count = 1073741823")  # space again
        await store.set("big", "x" * 200_000)
        await store.ping()  # a successful write clears it
    finally:
        await store.close()


async def test_refusals_that_say_nothing_about_the_store_leave_it_healthy(tmp_path: Path) -> None:
    store = metered(SQLiteStore(tmp_path / "ok.db", lease_ttl=1))
    await store.open()
    try:
        with pytest.raises(ValueRefused):
            await store.set("k", {1, 2})
        async with store.lock("k") as lease:
            lease._mark_lost()
            with pytest.raises(LeaseLost):
                await store.commit([("k", 1, None)], fence=[lease])
        await store.ping()
    finally:
        await store.close()


RULES = """
variables:
  notes: {scope: global, default: ""}
rules:
  - id: note
    triggers: ["note *"]
    steps:
      - {plugin: ADJUST, input: "{QUESTION}", save: notes}
"""


async def test_healthz_reports_the_store_as_failing_while_every_write_fails(
    tmp_path: Path,
) -> None:
    store_url = f"sqlite:///{tmp_path / 'tmy.db'}"
    async with (
        serving({"r.yaml": RULES}, store=store_url) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=20) as client,
    ):
        assert (await client.get("/healthz")).json()["store"]["state"] == "ok"
        db = daemon.app.store.inner._db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")  # a full disk
        assert (await daemon.push("note " + "x" * 15_000)).error
        down = await client.get("/healthz")
        assert down.status_code == 503 and down.json()["status"] == "error"
        store = down.json()["store"]
        assert store["state"] == "error"
        assert store["error"].startswith("last write failed: ")
        assert "database or disk is full" in store["error"]
        db.execute("PRAGMA max_page_count = 1073741823")
        assert (await daemon.push("note short")).error is None
        assert (await client.get("/healthz")).json()["store"]["state"] == "ok"


async def test_a_claim_is_timed_and_passes_through(tmp_path: Path) -> None:
    store = metered(SQLiteStore(tmp_path / "claims.db"))
    await store.open()
    try:
        seconds = metrics.STORE_OP_SECONDS.labels("claim")
        before = _count(seconds)
        assert await store.claim("dedup/a", 30) is True
        assert await store.claim("dedup/a", 30) is False
        assert _count(seconds) == before + 2
    finally:
        await store.close()


def _count(histogram: object) -> int:
    """How many observations a hot histogram child holds (the sum of its buckets)."""
    return sum(histogram.counts)  # type: ignore[attr-defined]
