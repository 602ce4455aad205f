"""A rule ``r`` (trigger ``go*``, ``on_error: "E: {STEP_ERROR}"``) running the steps a test
gives, through the real bot: the executors' and the LLM client's tests share it."""

from __future__ import annotations

import textwrap
from typing import Any

from tmy.message import Reply
from tmy.testing import Bot

RULE_HEAD = 'rules:\n  - id: r\n    triggers: ["go*"]\n    on_error: "E: {STEP_ERROR}"\n'


def one_rule(steps: str) -> dict[str, str]:
    """``{file name: YAML}`` for the rule ``r`` with ``steps`` (a YAML list, any indent)."""
    body = textwrap.indent(textwrap.dedent(steps).strip(), " " * 6)
    return {"x.yaml": RULE_HEAD + "    steps:\n" + body + "\n"}


async def run_steps(steps: str, text: str = "go", **settings: Any) -> Reply:
    """The reply to ``text`` from a bot (any Settings fields) running only that rule."""
    async with Bot(one_rule(steps), **settings) as bot:
        return await bot.ask(text)
