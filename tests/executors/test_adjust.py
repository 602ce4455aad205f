"""ADJUST (tmy/executors/adjust.py): the input, unchanged, through the real engine."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.steps import run_steps


@pytest.mark.parametrize("value", ["text", 3, [1, {"a": None}], {"k": [True]}])
async def test_adjust_returns_its_input_unchanged(value: Any) -> None:
    import json

    reply = await run_steps(f"- {{plugin: ADJUST, input: {json.dumps(value)}}}")
    assert reply.steps[0].input == value
    assert reply.steps[0].result == value
