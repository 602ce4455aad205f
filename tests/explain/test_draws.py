"""``explain`` shows the random draws of a run: under the step that drew them in a dry run
(``drew: 3 from randint(1, 6)``), listed after the steps with ``--run``; ``seed`` pins them.

The real bot (tmy.testing.Bot: real loader, engine, SQLite store); expected draws
are computed with ``random.Random(seed)``, which a seeded explanation draws from.
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

from tmy import cli, logs
from tmy.explain import explain, message_for
from tmy.testing import Bot

RULES = """
variables:
  prizes: {scope: global, default: ["a", "b", "c", "d"]}
rules:
  - id: dice
    triggers: ["roll"]
    steps:
      - {id: roll, plugin: ADJUST, input: "?= randint(1, 6)"}
      - {id: pair, plugin: ADJUST, input: "?= [STEP_RESULT, choice(['x', 'y', 'z'])]"}
      - {id: plain, plugin: ADJUST, input: "done {STEP_RESULT}"}
  - id: lottery
    triggers: ["draw"]
    steps:
      - {id: pick, plugin: ADJUST, input: PICK, INPUT: prizes}
"""


def untimed(ex: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "ms"} for s in ex.as_dict()["steps"]]


def steps_of(ex: Any) -> dict[str, dict[str, Any]]:
    return {s["uri"]: s for s in ex.as_dict()["steps"]}


async def test_a_dry_run_lists_each_draw_under_its_step_and_a_seed_pins_them() -> None:
    rng = random.Random(42)
    die, letter = rng.randint(1, 6), rng.choice(["x", "y", "z"])
    async with Bot({"main.yaml": RULES}) as b:
        ex = await explain(b.engine, message_for("roll"), seed=42)
        again = await explain(b.engine, message_for("roll"), seed="42")
    steps = steps_of(ex)
    assert steps["dice/roll"]["result"] == die
    assert steps["dice/roll"]["drew"] == [{"call": "randint(1, 6)", "value": die}]
    assert steps["dice/pair"]["drew"] == [{"call": "choice(['x', 'y', 'z'])", "value": letter}]
    assert "drew" not in steps["dice/plain"]
    assert ex.as_dict()["draws"] == [
        {"uri": "dice/roll", "call": "randint(1, 6)", "value": die},
        {"uri": "dice/pair", "call": "choice(['x', 'y', 'z'])", "value": letter},
    ]
    out = ex.render()
    lines = out.splitlines()
    roll = lines.index(next(line for line in lines if line.startswith("  dice/roll [ADJUST]")))
    assert lines[roll + 1 : roll + 4] == [
        f"      input:  {die}",
        f"      drew:   {die} from randint(1, 6)",
        f"      result: {die}",
    ]
    assert f"      drew:   '{letter}' from choice(['x', 'y', 'z'])" in lines
    assert "random draws:" not in out  # every draw is under its step
    assert untimed(again) == untimed(ex)  # the same seed: the same draws, step by step
    assert again.reply == ex.reply == {"text": f'done [{die}, "{letter}"]', "error": None}


async def test_pick_in_a_dry_run_shows_the_member_drawn_and_takes_nothing() -> None:
    index = int(random.Random(7).random() * 4)
    member = ["a", "b", "c", "d"][index]
    async with Bot({"main.yaml": RULES}) as b:
        ex = await explain(b.engine, message_for("draw"), seed=7)
        assert await b.var("prizes") == ["a", "b", "c", "d"]  # a dry run changes nothing
    step = steps_of(ex)["lottery/pick"]
    assert step["result"] == member
    assert step["drew"] == [{"call": "PICK prizes", "value": member}]
    assert f"      drew:   '{member}' from PICK prizes" in ex.render()
    left = ["a", "b", "c", "d"]
    left.remove(member)
    assert ex.writes == {"var/global/prizes": left}


async def test_run_lists_the_draws_after_the_steps_and_the_seed_holds_for_the_real_run() -> None:
    die = random.Random(3).randint(1, 6)
    async with Bot({"main.yaml": RULES}) as b:
        ex = await explain(b.engine, message_for("roll"), run=True, seed=3)
        assert ex.dry_run is False
        picked = await explain(b.engine, message_for("draw"), run=True, seed=3)
        left = await b.var("prizes")
    assert steps_of(ex)["dice/roll"]["result"] == die
    calls = [d["call"] for d in ex.as_dict()["draws"]]
    assert calls == ["randint(1, 6)", "choice(['x', 'y', 'z'])"]
    out = ex.render()
    assert "random draws:" in out
    assert f"  drew: {die} from randint(1, 6)" in out.splitlines()
    member = picked.reply["text"]
    assert member == ["a", "b", "c", "d"][int(random.Random(3).random() * 4)]
    assert left == [m for m in ["a", "b", "c", "d"] if m != member]  # --run took it for real


async def test_without_a_seed_the_draws_differ_between_explanations() -> None:
    rules = """
rules:
  - id: big
    triggers: ["big"]
    steps: [{plugin: ADJUST, input: "?= randint(1, 10**15)"}]
"""
    async with Bot({"main.yaml": rules}) as b:
        drawn = {(await explain(b.engine, message_for("big"))).reply["text"] for _ in range(4)}
    assert len(drawn) > 1  # four 50-bit draws alike: never


def test_the_explain_command_takes_seed(tmp_path: Any, capsys: Any, monkeypatch: Any) -> None:
    """``run.py explain TEXT --seed N`` shows what a rule test's ``seed: N`` draws."""
    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)
    rules = tmp_path / "r.yaml"
    rules.write_text(RULES, encoding="utf-8")
    common = ["--rules", str(rules), "--store", f"sqlite:///{tmp_path / 'x.db'}"]
    outs = []
    for _ in range(2):
        assert cli.main(["explain", "roll", "--seed", "42", *common]) == 0
        outs.append(capsys.readouterr().out)
    logs.configure("warning")
    expected = random.Random(42).randint(1, 6)
    assert f"drew:   {expected} from randint(1, 6)" in outs[0]
    untimed_outs = [re.sub(r"\d+\.\d+ ms", "", out) for out in outs]
    assert untimed_outs[0] == untimed_outs[1]
