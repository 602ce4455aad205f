"""tmy/values/randomness.py: one generator per context, seedable; draws noted for explain."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tmy.values import randomness


def test_seeded_is_random_random_of_the_seed_and_restores_the_system_generator() -> None:
    assert randomness.current() is randomness._SYSTEM
    with randomness.seeded(42) as rng:
        assert randomness.current() is rng
        assert rng.random() == random.Random(42).random()
        with randomness.seeded(7):
            assert randomness.current().random() == random.Random(7).random()
        assert randomness.current() is rng
    assert randomness.current() is randomness._SYSTEM
    with randomness.seeded(None):
        assert randomness.current() is randomness._SYSTEM


def test_a_text_of_digits_is_the_number_it_spells() -> None:
    """``explain --seed 42`` (a text) draws what a rule test's ``seed: 42`` draws."""
    assert randomness.normal_seed("42") == 42 and randomness.normal_seed(" -3 ") == -3
    assert randomness.normal_seed("lottery") == "lottery"
    with randomness.seeded("42") as a, randomness.seeded(42) as b:
        assert a.random() == b.random()


async def test_a_seeded_task_does_not_change_what_another_task_draws() -> None:
    started, seen = asyncio.Event(), []

    async def seeded_case() -> float:
        with randomness.seeded(1):
            started.set()
            await asyncio.sleep(0)
            return randomness.current().random()

    async def daemon_run() -> None:
        await started.wait()
        seen.append(randomness.current())

    drawn, _ = await asyncio.gather(seeded_case(), daemon_run())
    assert drawn == random.Random(1).random()
    assert seen == [randomness._SYSTEM]


async def test_tasks_started_inside_a_seeded_block_inherit_its_generator() -> None:
    with randomness.seeded(5) as rng:
        inner = await asyncio.create_task(asyncio.sleep(0, randomness.current()))
    assert inner is rng


def test_recording_hears_every_note_in_its_block_only() -> None:
    outer: list[tuple[str, Any]] = []
    inner: list[tuple[str, Any]] = []
    randomness.note("before", 0)  # nobody listens: nothing happens
    with randomness.recording(lambda c, v: outer.append((c, v))):
        randomness.note("PICK prizes", "a")
        with randomness.recording(lambda c, v: inner.append((c, v))):
            randomness.note("randint(1, 6)", 3)
        randomness.note("random()", 0.5)
    randomness.note("after", 1)
    assert outer == [("PICK prizes", "a"), ("random()", 0.5)]
    assert inner == [("randint(1, 6)", 3)]


def test_a_number_text_past_pythons_conversion_limit_seeds_as_a_text() -> None:
    huge = "9" * 5000  # int(huge) raises: explain --seed and a test's seed: must not crash
    assert randomness.normal_seed(huge) == huge
    with randomness.seeded(huge) as rng:
        first = rng.random()
    assert first == random.Random(huge).random()


def test_a_note_nobody_hears_does_not_describe_its_draw() -> None:
    def describe() -> str:
        raise AssertionError("described although nobody listens")

    randomness.note(describe, 1)  # no recording: the description is never made
    heard: list[tuple[str, Any]] = []
    with randomness.recording(lambda call, value: heard.append((call, value))):
        randomness.note(lambda: "randint(1, 6)", 4)
    assert heard == [("randint(1, 6)", 4)]
