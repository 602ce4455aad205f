"""Hardening of expressions, templates and YAML (issue 7, defects 4, 7 and 10).

* Defect 4: an allowed expression could hold the event loop for seconds (built-ins
  were free: ``round(5, -20000000)``, ``sorted()`` in a comprehension). Every attack
  below is posted to the HTTP adapter of a running bot while ``ping`` messages go to
  it in parallel: each ping is answered within a second and the attack gets a clear
  error naming its expression.
* Defect 7: format widths/precisions and YAML aliases amplified a small rules file
  into gigabytes; templates had no bound on what they produce. ``check`` and ``ask``
  run as processes whose peak memory is read back.
* Defect 10: YAML nested 50,000 deep is an error with file:line, not a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy.adapters.http import HttpAdapter
from tmy.errors import EvalError, ExpressionError
from tmy.testing import Bot
from tmy.values import expressions
from tmy.values.compiled import compile_value

REPO = Path(__file__).resolve().parent.parent
MAX_RSS_MB = 600

# -- defect 4: no expression freezes the daemon -------------------------------------------

# (expression, message argument): each blocked the event loop for seconds before the fix
ATTACKS: list[tuple[str, str]] = [
    ("round(5, -int(QUESTION))", "20000000"),
    ("[len(sorted(QUESTION * 5)) for c in QUESTION]", "ab" * 5000),
    ("[len(sorted(QUESTION, key=QUESTION.count)) for c in QUESTION]", "x" * 3000),
    ("[len(sorted(QUESTION, key=str)) for c in QUESTION]", "x" * 3000),
    ("[len('.'.join(QUESTION * 5)) for c in QUESTION]", "x" * 10000),
    ("[len(str(10 ** 4000)) for c in QUESTION]", "x" * 10000),
    ("[str(int(QUESTION)) + str(int(QUESTION)) for c in QUESTION][0][:5]", "7" * 4000),
    ("[max(QUESTION * 10) for c in QUESTION]", "x" * 10000),
    ("[len((QUESTION * 10).replace('x', 'yz')) for c in QUESTION]", "x" * 5000),
    (
        "[n in h for n in ['a' * 49999 + 'b'] for h in [QUESTION * 10] for c in QUESTION]",
        "a" * 9990,
    ),
    ("[len(json_loads('[' + '1,' * 49998 + '1]')) for c in QUESTION]", "x" * 5000),
    ("[(2 ** 9999) ** 10 // ((2 ** 9999) ** 5 - 1) > 0 for c in QUESTION]", "x" * 5000),
    ("[sum([(2 ** 9999) ** 10] * 9999) > 0 for c in QUESTION]", "x" * 300),
    ("[len(str(list(QUESTION * 10))) for c in QUESTION]", "x" * 3000),
    ("[len(json_dumps(list(QUESTION * 10))) for c in QUESTION]", "x" * 3000),
    ("[len(set(QUESTION.split(' ') * 10)) for c in QUESTION]", "a " * 2000),
    (
        "[x == y for x in [[[1] * 1000 for i in QUESTION]] "
        "for y in [[[1] * 1000 for i in QUESTION]] for c in QUESTION * 7]",
        "x" * 1000,
    ),
    ("[len((QUESTION * 10).splitlines()) for c in QUESTION]", "a\n" * 4999),
    ("[(QUESTION * 10).split('x').count('') for c in QUESTION]", "x" * 5000),
    ("[len((QUESTION * 10).title()) for c in QUESTION]", "x" * 9999),
]


def _attack_rules() -> str:
    lines = [
        "rules:",
        "  - id: ping",
        "    triggers: [ping]",
        "    steps: [{plugin: ADJUST, input: pong}]",
    ]
    for i, (expr, _) in enumerate(ATTACKS):
        lines += [
            f"  - id: a{i}",
            f'    triggers: ["a{i} *"]',
            f"    steps: [{{plugin: ADJUST, input: {json.dumps('?= ' + expr)}}}]",
        ]
    return "\n".join(lines) + "\n"


def _race(base: str, text: str) -> tuple[dict[str, Any], list[float]]:
    """Post ``text`` and, from other threads while it runs, three pings.

    Each ping's wait is measured from when it was due, so a blocked server shows
    up however the threads get scheduled.
    """
    started = time.monotonic()

    def post(body: str) -> dict[str, Any]:
        with httpx.Client(base_url=base, timeout=60) as client:
            return client.post("/v1/messages", json={"text": body}).json()

    def ping(delay: float) -> float:
        due = started + delay
        time.sleep(max(0.0, due - time.monotonic()))
        assert post("ping")["answer"] == "pong"
        return time.monotonic() - due

    with ThreadPoolExecutor(max_workers=4) as pool:
        attack = pool.submit(post, text)
        pings = [pool.submit(ping, delay) for delay in (0.05, 0.2, 0.5)]
        return attack.result(), [p.result() for p in pings]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("index", "attack"), list(enumerate(ATTACKS)), ids=lambda v: str(v)[:50])
async def test_an_expensive_expression_never_freezes_the_daemon(
    index: int, attack: tuple[str, str]
) -> None:
    expr, arg = attack
    async with Bot({"attacks.yaml": _attack_rules()}) as bot:
        adapter = HttpAdapter("127.0.0.1:0")
        await adapter.start(bot.engine.handle)
        try:
            base = f"http://127.0.0.1:{adapter.port}"
            reply, waits = await asyncio.to_thread(_race, base, f"a{index} {arg}")
        finally:
            await adapter.stop()
    assert max(waits) < 1.0, f"a ping waited {max(waits):.1f} s while {expr!r} ran"
    assert reply["rule"] == f"a{index}"
    error = reply["error"] or ""
    assert expr in error and ("too costly" in error or "too large" in error), error


@pytest.mark.parametrize(
    "source",
    [
        "?= round(5, -10**9)",
        "?= round(5, 10**9)",
        "?= round(5.5, -10**9)",
        "?= round(10**4000, -5000)",
    ],
)
def test_round_has_a_digit_bound(source: str) -> None:
    with pytest.raises(ExpressionError, match="round"):
        compile_value(source).evaluate({})


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("?= round(123456, -3)", 123000),
        ("?= round(2.675, 2)", 2.67),
        ("?= len(sorted(big))", 20000),
        ("?= sorted(nums, key=str)[:3]", [0, 1, 10]),
        ("?= len(','.join(str(n) for n in nums))", 48884),
        ("?= sum(nums)", sum(range(9999))),
        ("?= len([w.upper() for w in words])", 5000),
        ("?= max(nums) - min(nums)", 9998),
        ("?= len(json_loads(json_dumps(nums)))", 9999),
        ("?= big.count('a') + len(big.replace('a', 'bb'))", 10000 + 30000),
        ("?= len(set(words))", 5000),
        ("?= 2 ** 9999 % 1000", 2**9999 % 1000),
    ],
)
def test_ordinary_heavy_expressions_still_work(source: str, expected: Any) -> None:
    scope = {
        "big": "ab" * 10000,
        "nums": list(range(9999)),
        "words": [f"w{i}" for i in range(5000)],
    }
    assert compile_value(source).evaluate(scope) == expected


def test_over_budget_names_the_expression_and_the_bound() -> None:
    source = "len([sorted('ab' * 50000) for c in 'x' * 9999])"
    with pytest.raises(ExpressionError) as info:
        compile_value("?= " + source).evaluate({})
    assert source in str(info.value) and "too costly" in str(info.value)


# The worst cases found for each kind of work, over big values a rule could hold. With
# the wall-clock backstop off, the cost model alone must end each within 0.5 s (it aims
# at 0.1 s on a 2-core server; the rest is room for a busy test machine).
WORST_SCOPE: dict[str, Any] = {
    "L": list(range(100_000)),
    "LS": [str(i) for i in range(100_000)],
    "D": {str(i): i for i in range(100_000)},
    "T": "ab" * 50_000,
    "N": [[1]] * 99_999,
    "NN": [[[i] for i in range(100)] for _ in range(1000)],
    "F": [1.2345678901234] * 100_000,
    "B": [2**99_999] * 10,
    "P": ["x" * 999 + str(i % 10) for i in range(1000)],
}
WORST = [
    "1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1",
    "len(c) + len(c) + len(c) + len(c) + len(c)",
    "len(str(N))", "len(str(L))", "len(str(F))", "len(str(D))", "len(json_dumps(NN))",
    "len(json_loads(json_dumps(L)))", "json_loads(json_dumps(D))", "len(list(D.items()))",
    "NN == [x for x in NN]", "[99] in NN[0]", "D == D", "LS == LS[:]", "F == F[:]",
    "sorted(LS)", "sorted(T)", "sorted(D.items())", "sorted(P)", "max(L)", "min(LS)", "sum(L)",
    "sum(B)", "len(set(LS))", "len(dict(D))", "any([[]] * 99999)", "max(LS, key=len)",
    "LS.count('x')", "L.index(99999)", "P.count(P[0])", "T.title()", "T.replace('a', '')",
    "T.find('ab' * 100 + 'c')", "'-'.join(LS[:10000])", "'-'.join(D)", "len(T.split())",
    "str(10 ** 4000)", "int('7' * 4299)", "(10 ** 10000) * (10 ** 10000)", "(3 ** 9999) ** 3",
    "(2 ** 9999) ** 10 // ((2 ** 9999) ** 5 - 1)", "round(10 ** 4000 + 1, -999)",
    "len({**D})", "len([*L])", "len(L[::-1])", "T.startswith(tuple(LS))",
]  # fmt: skip


@pytest.mark.parametrize("work", WORST)
def test_the_cost_model_alone_ends_the_worst_cases_quickly(
    monkeypatch: pytest.MonkeyPatch, work: str
) -> None:
    monkeypatch.setattr(expressions, "MAX_EVAL_SECONDS", 3600.0)
    value = compile_value(f"?= [{work} for c in 'x' * 9999]")
    started = time.perf_counter()
    with pytest.raises(ExpressionError, match=r"too costly|too large"):
        value.evaluate(WORST_SCOPE)
    assert time.perf_counter() - started < 0.5


def test_sorting_with_a_key_function_is_charged_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expressions, "MAX_EVAL_SECONDS", 3600.0)
    for source in ("sorted(T, key=str)", "sorted(LS, key=D.get)", "sorted(T, key=T.count)"):
        started = time.perf_counter()
        try:
            compile_value("?= " + source).evaluate(WORST_SCOPE)
        except ExpressionError as exc:
            assert "too costly" in str(exc)
        assert time.perf_counter() - started < 0.5, source


def test_the_wall_clock_backstop_ends_what_the_cost_model_underrates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(expressions, "MAX_EVAL_SECONDS", 0.0)
    with pytest.raises(ExpressionError, match="ran longer than"):
        compile_value("?= [c for c in 'x' * 1000]").evaluate({})


def test_a_function_passed_as_a_key_loads_and_is_charged_per_call() -> None:
    value = compile_value("?= sorted(words, key=len)")
    assert value.names == {"words"}  # 'len' is the function, not a variable to load
    assert value.evaluate({"words": ["ccc", "a", "bb"]}) == ["a", "bb", "ccc"]
    with pytest.raises(ExpressionError, match="too costly"):
        compile_value("?= [sorted(w, key=str) for w in [big] * 9999]").evaluate({"big": "x" * 9999})


@pytest.mark.parametrize(
    "source",
    [
        "?= 'x'.center(10**8)",
        "?= 'x\\t'.expandtabs(10**8)",
        "?= 'x'.rjust(10**8)",
        "?= '{:>99999999}'.format(1)",
        "?= '{x:>99999999}'.format_map({'x': 1})",
        "?= format(1, '>99999999')",
        "?= f'{1:>99999999}'",
        "?= '%99999999d' % 1",
        "?= 'x'.translate({120: 'y' * 99999})",
    ],
)
def test_no_padding_or_formatting_is_reachable_in_expressions(source: str) -> None:
    with pytest.raises(ExpressionError):
        compile_value(source).evaluate({})


# -- defect 7: templates bound what they produce ------------------------------------------


async def test_a_template_with_many_references_to_a_big_value_is_refused() -> None:
    many = "{big}" * 20  # 2,000,000 characters
    text = f"""
    rules:
      - id: r
        triggers: [go]
        steps:
          - {{plugin: ADJUST, input: "?= 'x' * 100000", save: big}}
          - {{plugin: ADJUST, input: "{many}", save: wide}}
          - {{plugin: ADJUST, input: ok}}
      - id: ping
        triggers: [ping]
        steps: [{{plugin: ADJUST, input: pong}}]
    """
    async with Bot({"t.yaml": textwrap.dedent(text)}) as bot:
        reply = await bot.ask("go")
        assert reply.error is not None and "too large" in reply.error
        assert many[:20] in reply.error  # names the template
        assert await bot.say("ping") == "pong"


def test_a_value_with_too_many_references_is_refused_at_load() -> None:
    with pytest.raises(EvalError, match="references"):
        compile_value("{x}" * 1001)
    with pytest.raises(EvalError, match="references"):
        compile_value({"a": ["{x}"] * 600, "b": ["{y[{x}]}"] * 300})
    compile_value(["{x}"] * 1000)


def test_a_list_of_references_to_a_big_value_is_refused() -> None:
    value = compile_value(["{big}"] * 200)
    with pytest.raises(EvalError, match="too large"):
        value.evaluate({"big": "x" * 100_000})


def test_a_template_key_rendering_a_huge_value_is_refused() -> None:
    value = compile_value("{table[{big}]}")
    with pytest.raises(EvalError, match="too large"):
        value.evaluate({"table": {}, "big": [["x" * 1000] * 1000] * 10})


@pytest.mark.parametrize(
    "spec",
    [">999999999", ">99999999999", "<1001", "^2000", ".999999999f", ".5000", "x>1001d",
     "0999999999", ".1001e", "٩٩٩٩٩٩٩٩٩"],
)  # fmt: skip
def test_format_widths_and_precisions_are_bounded_at_load(spec: str) -> None:
    with pytest.raises(EvalError, match=r"1,000|width|precision|spec"):
        compile_value("{QUESTION:" + spec + "}")


@pytest.mark.parametrize("spec", [">1000", ".1000f", "08.2f", ",", "x^20", ".3", "+.2e", "%"])
def test_sane_format_specs_still_load(spec: str) -> None:
    compile_value("{x:" + spec + "}").evaluate({"x": 1.5})


# -- defect 7 and 10: check / ask as processes, peak memory read back ---------------------

_MEASURE = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    def cap():
        limit = 2 << 30  # a safety net: without the fix these would take the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True, preexec_fn=cap)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    print(json.dumps({"rc": done.returncode, "out": done.stdout[-4000:],
                      "err": done.stderr[-4000:], "rss_mb": rss}))
    """
)


def run_tmy(tmp: Path, *args: str, timeout: float = 50) -> dict[str, Any]:
    """``run.py <args>`` in a process of its own; its exit code, output and peak RSS (MB)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    env["TMY_STORE"] = f"sqlite:///{tmp / 'm.db'}"
    cmd = [sys.executable, "-c", _MEASURE, sys.executable, "run.py", *args]
    done = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=True
    )
    return json.loads(done.stdout)


def _rules_file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path


def _one_step(input_text: str) -> str:
    return (
        "rules:\n  - id: r\n    triggers: [go]\n    steps:\n"
        f"      - {{plugin: ADJUST, input: {json.dumps(input_text)}}}\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec", [">999999999", ">99999999999", ".999999999f", "0999999999"], ids=str
)
def test_check_refuses_a_huge_format_width_with_file_and_line(tmp_path: Path, spec: str) -> None:
    path = _rules_file(tmp_path, "wide.yaml", _one_step("{QUESTION:" + spec + "}"))
    got = run_tmy(tmp_path, "check", str(path))
    assert got["rc"] == 1, got
    assert f"{path}:5" in got["err"] and "Traceback" not in got["err"], got["err"]
    assert got["rss_mb"] < MAX_RSS_MB, got


@pytest.mark.slow
def test_check_refuses_a_long_string_aliased_many_times(tmp_path: Path) -> None:
    # 220 KB of YAML: one 50 KB string, aliased 40,000 times (2 GB once expanded)
    text = "variables:\n  big:\n    default:\n      text: &s " + "x" * 50_000 + "\n"
    text += "      many: [" + ", ".join(["*s"] * 40_000) + "]\n"
    path = _rules_file(tmp_path, "aliases.yaml", text)
    got = run_tmy(tmp_path, "check", str(path))
    assert got["rc"] == 1, got
    assert f"{path}:5" in got["err"] and "Traceback" not in got["err"], got["err"]
    assert "alias" in got["err"], got["err"]
    assert got["rss_mb"] < MAX_RSS_MB, got


@pytest.mark.slow
def test_ask_with_a_template_that_would_render_a_gigabyte_stays_small(tmp_path: Path) -> None:
    mega, giga = "{big}" * 10, "{mega}" * 1000  # 1,000,000 then 1,000,000,000 characters
    text = (
        "rules:\n  - id: r\n    triggers: [go]\n    steps:\n"
        "      - {plugin: ADJUST, input: \"?= 'x' * 100000\", save: big}\n"
        f'      - {{plugin: ADJUST, input: "{mega}", save: mega}}\n'
        f'      - {{plugin: ADJUST, input: "{giga}", save: giga}}\n'
        "      - {plugin: ADJUST, input: done}\n"
    )
    rules = tmp_path / "rules"
    rules.mkdir()
    _rules_file(rules, "amp.yaml", text)
    got = run_tmy(tmp_path, "ask", "--rules", str(rules), "go")
    assert got["rc"] == 1, got
    assert "too large" in got["err"] and "Traceback" not in got["err"], got["err"]
    assert got["rss_mb"] < MAX_RSS_MB, got


def _chained_anchors() -> str:
    """Eight anchors, each 150 levels deep around an alias of the previous one."""
    lines, inner = [], "1"
    for i in range(8):
        lines.append(f"      k{i}: &a{i} " + "[" * 150 + inner + "]" * 150)
        inner = f"*a{i}"
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nested", "line", "hint"),
    [
        ("[" * 50_000 + "]" * 50_000, 3, "nested"),  # flow sequences
        ("{a: " * 50_000 + "1" + "}" * 50_000, 3, "nested"),  # flow mappings
        ("\n      " + "- " * 50_000 + "x", 4, "nested"),  # block sequences on one line
        ("\n" + _chained_anchors(), 5, "nested"),  # 1,200 deep through aliases
        ("&loop [1, *loop]", 3, "cycle"),  # a list that holds itself
    ],
    ids=["flow-list", "flow-map", "block-list", "aliases", "cycle"],
)
def test_yaml_nested_50000_deep_is_an_error_with_file_and_line(
    tmp_path: Path, nested: str, line: int, hint: str
) -> None:
    path = _rules_file(tmp_path, "deep.yaml", "variables:\n  x:\n    default: " + nested + "\n")
    got = run_tmy(tmp_path, "check", str(path), timeout=50)
    assert got["rc"] == 1, got
    assert f"{path}:{line}:" in got["err"], got["err"]
    assert hint in got["err"] and "Traceback" not in got["err"], got["err"]


@pytest.mark.parametrize(
    "source",
    ["len(set(L))", "len(dict([[x, 1] for x in L[:9000]]))", "len({x: 1 for x in L[:9000]})"],
)
def test_values_crafted_to_share_one_hash_are_refused_before_the_quadratic_build(
    source: str,
) -> None:
    colliding = [k * (2**61 - 1) for k in range(1, 40_001)]  # all hash to 0
    with pytest.raises(ExpressionError, match="share one hash"):
        expressions.evaluate(expressions.parse_expression(source), source, {"L": colliding}, {})


def test_ordinary_sets_and_maps_with_repeats_still_build() -> None:
    scope = {"L": [1, 2**61 - 1] * 20_000, "N": list(range(40_000))}
    for source, expected in [
        ("len(set(L))", 2),
        ("len(set(N))", 40_000),
        ("{x: 1 for x in L[:4]}", {1: 1, 2**61 - 1: 1}),
        ("dict([[1, 'a'], [1, 'b']])", {1: "b"}),
    ]:
        assert (
            expressions.evaluate(expressions.parse_expression(source), source, scope, {})
            == expected
        )
