"""Atomic spans are all-or-nothing and fenced, with real daemons (engine/scheduler, variables).

The README's check-in rule, with a slow step between the increment and the
date stamp, run by real daemons: ``kill -9`` while a run sits in that step
must leave neither the point nor the stamp (today: the point without the
stamp, so the user checks in again), and a daemon paused (SIGSTOP) past its
lease while another takes over must not write when it resumes (today: two
check-ins in one day).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from checkin_common import (
    ALREADY,
    SUCCESS,
    Daemon,
    FreezingProxy,
    Gate,
    checkin_state,
    today,
    write_rules,
)

from tmy import metrics
from tmy.errors import RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.store import open_store
from tmy.store.sqlite import SQLiteStore
from tmy.testing import Bot


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def backend_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


def short_leases(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}lease_ttl=1"


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_kill_9_between_two_steps_of_the_checkin_leaves_all_or_nothing(
    tmp_path: Path, backend_url: str
) -> None:
    gate = Gate(hold_first=True)
    await gate.start()
    store = short_leases(backend_url)
    daemon = Daemon("a", tmp_path, write_rules(tmp_path / "rules", gate), store)
    try:
        await daemon.start()
        asking = asyncio.ensure_future(daemon.ask("签到", "ann"))
        await gate.wait_arrival()  # the run has incremented and sits in the slow step
        daemon.kill()  # SIGKILL
        await asyncio.wait_for(asking, 30)
        assert await checkin_state(store, "ann") == (None, None)  # old code: (1, None)
        gate.release()
        await daemon.start()  # restarted on the same store: the check-in works, once
        first = await daemon.ask("签到", "ann")
        assert first["error"] is None and first["answer"] == f"{SUCCESS}，累计 1 次"
        assert (await daemon.ask("签到", "ann"))["answer"] == ALREADY
        assert await checkin_state(store, "ann") == (1, today())
    finally:
        daemon.stop()
        await gate.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_daemon_stalled_past_its_lease_does_not_check_in_twice(
    tmp_path: Path, backend_url: str
) -> None:
    """Two daemons, one store, 1 s leases: A is stopped for ~2 s mid-span while B
    serves the same user's check-in; A, resumed, must end with a lease error and
    write nothing. Exactly one check-in succeeds."""
    gate = Gate(hold_first=True)
    await gate.start()
    store = short_leases(backend_url)
    rules = write_rules(tmp_path / "rules", gate)
    a, b = Daemon("a", tmp_path, rules, store), Daemon("b", tmp_path, rules, store)
    try:
        await asyncio.gather(a.start(), b.start())
        asking_a = asyncio.ensure_future(a.ask("签到", "bob"))
        await gate.wait_arrival()  # A is inside the span, holding the leases
        a.signal(signal.SIGSTOP)
        await asyncio.sleep(2.0)  # twice the lease length
        answer_b = await asyncio.wait_for(b.ask("签到", "bob"), 30)
        a.signal(signal.SIGCONT)
        gate.release()
        answer_a = await asyncio.wait_for(asking_a, 30)
        answers = [answer_a["answer"], answer_b["answer"]]
        assert sum(text.startswith(SUCCESS) for text in answers) == 1, (answer_a, answer_b)
        assert answer_b["error"] is None and answer_b["answer"] == f"{SUCCESS}，累计 1 次"
        assert answer_a["error"] and "lease" in answer_a["error"], answer_a
        assert await checkin_state(store, "bob") == (1, today())
        assert '"lease.lost"' in a.log.read_text()
    finally:
        a.stop()
        b.stop()
        await gate.stop()


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(120)
async def test_a_daemon_cut_off_from_redis_past_its_lease_does_not_check_in_twice(
    tmp_path: Path, redis_store_url: str
) -> None:
    """The partition case: A's link to Redis goes through a proxy that freezes for
    ~2 s (1 s leases) while B serves the same user's check-in."""
    gate = Gate(hold_first=True)
    await gate.start()
    parts = urlsplit(redis_store_url)
    proxy = FreezingProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    await proxy.start()
    store = short_leases(redis_store_url)
    via_proxy = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
    rules = write_rules(tmp_path / "rules", gate)
    a = Daemon("a", tmp_path, rules, short_leases(via_proxy))
    b = Daemon("b", tmp_path, rules, store)
    try:
        await asyncio.gather(a.start(), b.start())
        asking_a = asyncio.ensure_future(a.ask("签到", "cy"))
        await gate.wait_arrival()
        proxy.freeze()
        answer_b = await asyncio.wait_for(b.ask("签到", "cy"), 30)  # once A's lease expired
        await asyncio.sleep(0.5)
        proxy.thaw()
        gate.release()
        answer_a = await asyncio.wait_for(asking_a, 30)
        assert answer_b["answer"] == f"{SUCCESS}，累计 1 次", answer_b
        assert answer_a["error"] and "lease" in answer_a["error"], answer_a
        assert await checkin_state(store, "cy") == (1, today())
    finally:
        a.stop()
        b.stop()
        await proxy.stop()
        await gate.stop()


SPAN = """
variables:
  n: {scope: global, default: 0}
  stamp: {scope: global, default: ""}
rules:
  - id: span
    triggers: ["go *"]
    steps:
      - {plugin: ADJUST, input: "stamped", stop: "?= stamp == QUESTION"}
      - {plugin: ADJUST, input: "?= n + 1", save: n}
      - {plugin: ADJUST, input: "?= 'seen ' + str(n)", save: PRE_ANSWER}
      - {plugin: HTTP, url: "http://127.0.0.1:9/", timeout: 1, when: "?= QUESTION == 'fail'"}
      - {plugin: ADJUST, input: "?= QUESTION", save: stamp}
      - {plugin: ADJUST, input: "?= ' / ' + str(n)"}
"""


async def test_a_span_reads_its_own_buffered_writes_and_a_failed_span_writes_none(
    store_url: str,
) -> None:
    async with Bot({"s.yaml": SPAN}, store=store_url) as bot:
        assert bot.engine.rulebook.by_id["span"].atomic_vars == ("n", "stamp")
        assert await bot.say("go a") == "seen 1 / 1"  # step 2 read step 1's buffered write
        failed = await bot.ask("go fail")  # step 3 fails after the increment
        assert failed.error
        assert (await bot.var("n"), await bot.var("stamp")) == (1, "a")  # none of its writes
        assert await bot.say("go b") == "seen 2 / 2"


def test_a_span_over_several_variables_is_refused_at_load_on_a_redis_cluster() -> None:
    url = "redis+cluster://127.0.0.1:7000/"
    with pytest.raises(RuleErrors) as caught:
        load_sources([(Path("s.yaml"), SPAN)], default_registry(), store_url=url)
    (error,) = caught.value.errors
    assert error.file == "s.yaml" and error.line == 6
    assert "hash slots" in str(error) and str(error).startswith("s.yaml:6: rule 'span'")
    # one variable, or another store: accepted
    one = SPAN.replace("save: stamp", "save: PRE_ANSWER").replace("stamp ==", "n ==")
    assert load_sources([(Path("s.yaml"), one)], default_registry(), store_url=url)
    assert load_sources([(Path("s.yaml"), SPAN)], default_registry(), store_url="redis://h/0")


VISIT = """
variables:
  visits: {{scope: global, default: 0}}
rules:
  - id: visit
    triggers: [visit]
    steps:
      - {{plugin: HTTP, url: "{gate}?n={{visits}}", result: status, save: visits}}
"""


def _lost(kind: str) -> float:
    return metrics.LEASES_LOST.labels(kind)._value.get()


async def test_a_locked_step_whose_lease_was_taken_meanwhile_writes_nothing(
    tmp_path: Path, backend_url: str
) -> None:
    """A step that reads and saves one variable holds its lease across its I/O; when
    the lease is gone from the store before it writes (expired and taken by another
    daemon), the store refuses the fenced write: an error, a metric, nothing written."""
    gate = Gate(hold_first=True)
    await gate.start()
    other = open_store(backend_url)
    await other.open()
    try:
        async with Bot({"v.yaml": VISIT.format(gate=gate.url)}, store=backend_url) as bot:
            assert bot.engine.rulebook.by_id["visit"].steps[0].lock_roots == ("visits",)
            before = _lost("step")
            asking = asyncio.ensure_future(bot.ask("visit"))
            await gate.wait_arrival()  # the step holds the lease of visits
            if isinstance(other, SQLiteStore):
                other._db.execute("DELETE FROM locks")
            else:
                await other._r().delete(other._k("var/global/visits") + ":lock")
            await other.set("var/global/visits", 41)  # what the new holder wrote
            gate.release()
            reply = await asyncio.wait_for(asking, 30)
            assert reply.error and "lease" in reply.error
            assert await bot.var("visits") == 41
            assert _lost("step") == before + 1
            assert (await bot.ask("visit")).error is None  # the next run locks and writes
            assert await bot.var("visits") == 200
    finally:
        await other.close()
        await gate.stop()
