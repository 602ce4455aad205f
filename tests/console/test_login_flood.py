"""A flood of login attempts from many addresses: the listener keeps answering (no attempt
queues for a password check behind more than a few others) and, past a number of wrong
passwords from everywhere together, every attempt is refused for a while (the right
password too, so the throttle says nothing about it)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.console import ADMIN_PASSWORD, console_daemon
from tmy.console import auth
from tmy.console.auth import THROTTLE_SECONDS, THROTTLE_WINDOW, Throttle
from tmy.console.guard import COOKIE

RULES = {
    "r.yaml": "rules:\n- id: hi\n  triggers: [hi]\n  steps: [{plugin: ADJUST, input: hello}]\n"
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_starts_past_the_failures_of_a_window_and_ends() -> None:
    clock = Clock()
    throttle = Throttle(clock)
    for _ in range(auth.THROTTLE_FAILURES):
        assert throttle.failed() == 0.0 and throttle.wait() == 0.0
        clock.now += 0.5
    assert throttle.failed() == THROTTLE_SECONDS
    assert throttle.wait() == THROTTLE_SECONDS
    clock.now += THROTTLE_SECONDS
    assert throttle.wait() == 0.0
    assert throttle.failed() == 0.0, "after the pause the count starts again"


def test_failures_spread_over_more_than_the_window_never_throttle() -> None:
    clock = Clock()
    throttle = Throttle(clock)
    for _ in range(5 * auth.THROTTLE_FAILURES):
        assert throttle.failed() == 0.0
        clock.now += THROTTLE_WINDOW / auth.THROTTLE_FAILURES + 0.01
    assert throttle.wait() == 0.0


def client_at(daemon, n: int) -> httpx.AsyncClient:
    """A client whose requests come from its own loopback address (127.0.<n>.2)."""
    transport = httpx.AsyncHTTPTransport(local_address=f"127.0.{n % 250}.{2 + n // 250}")
    return httpx.AsyncClient(base_url=daemon.url, transport=transport, timeout=60)


async def guess(daemon, n: int, password: str = "wrong") -> httpx.Response:
    async with client_at(daemon, n) as http:
        return await http.post("/console/login", params={"format": "json"},
                               data={"password": password})  # fmt: skip


async def test_wrong_passwords_from_many_addresses_throttle_every_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(auth, "THROTTLE_FAILURES", 8)
    async with console_daemon(RULES) as daemon:
        answers = [(await guess(daemon, n)).status_code for n in range(8)]
        assert answers == [401] * 8, "each address is far from its own lock-out"
        ninth = await guess(daemon, 8)
        assert ninth.status_code == 429 and "lately" in ninth.json()["error"]
        right = await guess(daemon, 9, ADMIN_PASSWORD)
        wrong = await guess(daemon, 10)
        for refused in (right, wrong):  # the same answer: the throttle cannot be a probe
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
            assert COOKIE not in refused.headers.get("set-cookie", "")
        assert right.json() == wrong.json()


async def test_the_listener_answers_while_a_flood_of_logins_is_in_flight() -> None:
    async with console_daemon(RULES, http_max_requests_in_flight=12) as daemon:
        flood = [asyncio.create_task(guess(daemon, n)) for n in range(60)]
        answers = []
        async with httpx.AsyncClient(base_url=daemon.url, timeout=60) as http:
            while not all(task.done() for task in flood):
                answer = await http.post("/v1/messages", json={"text": "hi", "user": "u"})
                answers.append((answer.status_code, answer.json().get("answer")))
                await asyncio.sleep(0.01)
        codes = [task.result().status_code for task in flood]
        assert answers and set(answers) == {(200, "hello")}, "never 503 (in flight)"
        assert set(codes) <= {401, 429}
        busy = [t.result() for t in flood if "right now" in t.result().text]
        assert busy and all(r.status_code == 429 for r in busy), "a flood is told at once"
        assert codes.count(401) <= auth.THROTTLE_FAILURES
