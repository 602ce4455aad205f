"""``seed:`` in rule tests: random draws pinned per case (or per file), the same every run.

Real loader, real engine, real SQLite store, through ``tmy.cli.main`` as
``run.py test`` runs it. Expected draws are computed with ``random.Random(seed)``
here, independently of tmy: a seeded case draws from exactly that generator.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from textwrap import dedent

import pytest

import tmy.ruletests  # noqa: F401  (registers the `test` command)
from tmy import cli

REPO = Path(__file__).resolve().parents[2]

RULES = """\
variables:
  prizes: {scope: global, default: ["a", "b", "c", "d", "e"]}
rules:
  - id: dice
    triggers: ["roll"]
    steps:
      - {plugin: ADJUST, input: "?= [randint(1, 100), randint(1, 100), randint(1, 100)]"}
  - id: mix
    triggers: ["mix"]
    steps:
      - plugin: ADJUST
        input: "?= [choice(prizes), sample(prizes, 2), shuffled(prizes), random()]"
  - id: pick
    triggers: ["pick"]
    steps:
      - {plugin: ADJUST, input: PICK, INPUT: prizes}
"""


pytestmark = pytest.mark.usefixtures("in_checkout")


def write(tmp_path: Path, tests: str, head: str = "", name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(head + RULES + "tests:\n" + dedent(tests), encoding="utf-8")
    return path


def run_json(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, list[dict]]:
    code = cli.main(["test", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)["cases"]


def rolls(seed: int | str) -> str:
    rng = random.Random(seed)
    return json.dumps([rng.randint(1, 100) for _ in range(3)])


def mix(seed: int) -> str:
    rng = random.Random(seed)
    prizes = ["a", "b", "c", "d", "e"]
    first = rng.choice(prizes)
    two = rng.sample(prizes, 2)
    order = list(prizes)
    rng.shuffle(order)
    return json.dumps([first, two, order, rng.random()])


def test_a_seeded_case_draws_what_random_random_seed_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        f"""\
        - {{send: roll, seed: 42, expect: '{rolls(42)}'}}
        - {{send: mix, seed: 42, expect: '{mix(42)}'}}
        - {{send: roll, seed: 7, expect: '{rolls(7)}'}}
        - name: a text seed of digits is the same seed as the number
          send: roll
          seed: "42"
          expect: '{rolls(42)}'
        - name: any other text seeds too
          send: roll
          seed: lottery-2026
          expect: '{rolls("lottery-2026")}'
        """,
    )
    code, cases = run_json(capsys, path)
    assert code == 0, cases
    assert [c["seed"] for c in cases] == [42, 42, 7, "42", "lottery-2026"]
    assert rolls(42) != rolls(7)  # the seeds do pin different draws


def test_the_same_seed_gives_the_same_draws_every_run_and_in_any_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each case gets its own generator: what an earlier case drew changes nothing."""
    forward = write(
        tmp_path,
        """\
        - {send: roll, seed: 1, expect_re: "."}
        - {send: roll, seed: 2, expect_re: "."}
        - {send: mix, seed: 3, expect_re: "."}
        """,
        name="forward.yaml",
    )
    backward = write(
        tmp_path,
        """\
        - {send: mix, seed: 3, expect_re: "."}
        - {send: roll, seed: 2, expect_re: "."}
        - {send: roll, seed: 1, expect_re: "."}
        - {send: roll, seed: 1, expect_re: "."}
        """,
        name="backward.yaml",
    )
    first = [c["actual"] for c in run_json(capsys, forward)[1]]
    again = [c["actual"] for c in run_json(capsys, forward)[1]]
    assert first == again
    drawn = [c["actual"] for c in run_json(capsys, backward)[1]]
    assert drawn == [first[2], first[1], first[0], first[0]]
    assert first == [rolls(1), rolls(2), mix(3)]


def test_pick_takes_the_seeded_member_and_removes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """input: PICK draws one number r (random()) and takes member int(r * len)."""
    left = ["a", "b", "c", "d", "e"]
    expected = []
    for _ in range(5):
        r = random.Random(42).random()
        expected.append(left.pop(int(r * len(left))))
    path = write(tmp_path, "".join(f"- {{send: pick, seed: 42, expect: {m}}}\n" for m in expected))
    code, cases = run_json(capsys, path)
    assert code == 0, cases
    assert [c["actual"] for c in cases] == expected
    assert sorted(expected) == ["a", "b", "c", "d", "e"]  # without replacement


def test_a_file_seed_is_every_case_s_default_and_a_case_seed_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        f"""\
        - {{send: roll, expect: '{rolls(42)}'}}
        - {{send: roll, seed: 5, expect: '{rolls(5)}'}}
        - {{send: roll, expect: '{rolls(42)}'}}
        """,
        head="seed: 42   # every case's default\n",
    )
    code, cases = run_json(capsys, path)
    assert code == 0, cases
    assert [c["seed"] for c in cases] == [42, 5, 42]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("{send: roll, seed: true, expect: x}", "'seed' must be a whole number or a text"),
        ("{send: roll, seed: 1.5, expect: x}", "like seed: 42, got 1.5"),
        ("{send: roll, seed: [1], expect: x}", "got [1]"),
        ("{send: roll, seed: '', expect: x}", "got ''"),
        ("{send: roll, seeds: 42, expect: x}", "unknown key 'seeds' (did you mean 'seed'?)"),
    ],
)
def test_a_bad_seed_or_a_misspelt_key_is_refused_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, message: str
) -> None:
    path = write(tmp_path, f"- {{send: roll, expect_re: '.'}}\n- {case}\n")
    code = cli.main(["test", str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    line = len((RULES + "tests:\n").splitlines()) + 2
    assert f"{path}:{line}" in err + out
    assert message in err + out


def test_a_bad_file_seed_is_named_as_the_files_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "- {send: roll, expect_re: '.'}\n", head="seed: [1]\n")
    code = cli.main(["test", str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"{path}:1: the file's 'seed' must be a whole number or a text" in err + out


def test_the_cookbook_lottery_pins_its_winners(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/cookbook/lottery.yaml: choice(), input: PICK and randint() under seed: 42,
    the exact winners asserted, twice (the same seed draws the same every run)."""
    path = REPO / "docs" / "cookbook" / "lottery.yaml"
    runs = []
    for _ in range(2):
        code, cases = run_json(capsys, path)
        assert code == 0, [c for c in cases if not c["ok"]]
        runs.append([(c["send"], c["actual"]) for c in cases])
    assert runs[0] == runs[1]
    seeded = [c["actual"] for c in cases if c["seed"] is not None]
    entrants = ["ann", "bob", "carol"]
    assert seeded[:3] == [
        f"中奖的是 {random.Random(42).choice(entrants)}，恭喜！",
        f"中奖的是 {random.Random(42).choice(entrants)}，恭喜！",
        f"中奖的是 {random.Random(7).choice(entrants)}，恭喜！",
    ]
    assert "恭喜 ann 抽中 二等奖：保温杯！" in seeded
    assert f"你掷出了 {random.Random(42).randint(1, 6)} 点" in seeded
