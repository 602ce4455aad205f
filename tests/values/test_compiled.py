"""task_cfg values: constants, ``{path}`` templates, ``?=`` expressions, ``~raw`` strings.

Hostile expressions must end in a clear :class:`EvalError`, never a hang, a
crash or a result that cost seconds of CPU / hundreds of megabytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tmy.errors import EvalError, ExpressionError, RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.testing import Bot
from tmy.values.compiled import Constant, Expression, Template, compile_value, to_text, truthy

REPO = Path(__file__).resolve().parents[2]

SCOPE = {
    "QUESTION": "hi",
    "USER": "u1",
    "user_info": {"name": "Ann", "age": 7},
    "scores": [10, 20],
    "by_user": {"u1": 5},
    "price": 3.14159,
    "jokes": ["a", "b"],
    "n": 2,
    "words": {"list": ["w0", "w1"], "list_size": 2},
    "STEP_RESULT": ["first", "second"],
}


def ev(source: object) -> object:
    return compile_value(source).evaluate(SCOPE)


# -- constants ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", [1, 2.5, True, None, "plain text", ["a", 1], {"k": [1, {"x": "y"}]}]
)
def test_constants_are_returned_as_written(raw: object) -> None:
    value = compile_value(raw)
    assert isinstance(value, Constant)
    assert value.evaluate({}) == raw
    assert value.names == frozenset()


def test_strings_inside_lists_and_maps_are_templates_too() -> None:
    value = compile_value(["{n}", {"k": "{QUESTION}!"}, 3])
    assert value.names == {"n", "QUESTION"}
    assert value.evaluate(SCOPE) == [2, {"k": "hi!"}, 3]


def test_raw_string_resolves_nothing() -> None:
    value = compile_value("~{n} and {undefined} ?= 1")
    assert isinstance(value, Constant)
    assert value.evaluate({}) == "{n} and {undefined} ?= 1"


# -- templates ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{QUESTION}!", "hi!"),
        ("{user_info[name]} is {user_info[age]}", "Ann is 7"),
        ("{scores[0]!r}", "10"),
        ("{QUESTION!r}", "'hi'"),
        ("{QUESTION!s}", "hi"),
        ("{price:.2f}", "3.14"),
        ("[{QUESTION:>4}]", "[  hi]"),
        ("#{scores[-1]}", "#20"),
        ("{{QUESTION}}", "{QUESTION}"),
        ("{{ {QUESTION} }}", "{ hi }"),
        ("total: {by_user[{USER}]}", "total: 5"),
        ("list: {jokes}", 'list: ["a", "b"]'),
    ],
)
def test_template_rendering(source: str, expected: str) -> None:
    assert ev(source) == expected


def test_json_braces_in_a_prompt_stay_as_written() -> None:
    source = 'Reply as {"answer": "...", "n": 1} to {QUESTION}; {0} {} { QUESTION }'
    assert ev(source) == 'Reply as {"answer": "...", "n": 1} to hi; {0} {} { QUESTION }'


def test_a_lone_reference_yields_the_value_itself() -> None:
    assert ev("{jokes}") == ["a", "b"]
    assert ev("{user_info}") == {"name": "Ann", "age": 7}
    assert ev("{n}") == 2


def test_nested_reference_as_a_key() -> None:
    value = compile_value("{by_user[{USER}]}")
    assert value.names == {"by_user", "USER"}
    assert value.evaluate(SCOPE) == 5


def test_undefined_variable_is_an_error_naming_it() -> None:
    with pytest.raises(EvalError, match="'nope'"):
        ev("hello {nope}")


def test_missing_key_is_an_error_naming_the_path() -> None:
    with pytest.raises(EvalError, match=r"user_info\[email\]"):
        ev("{user_info[email]}")


def test_bad_format_spec_is_a_clear_error() -> None:
    with pytest.raises(EvalError, match=r"cannot format \{price:d\}"):
        ev("{price:d}")


def test_names_of_a_template() -> None:
    value = compile_value("{a} {b[x][0]} {{c}}")
    assert isinstance(value, Template)
    assert value.names == {"a", "b"}


# -- expressions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("?= 1 + 2 * 3", 7),
        ("?= STEP_RESULT[0] if words else 'EMPTY'", "first"),
        ("?= n * 10 if n > 1 else 0", 20),
        ("?= len(jokes)", 2),
        ("?= [j.upper() for j in jokes]", ["A", "B"]),
        ("?= {'k': n}", {"k": 2}),
        ("?= user_info['name'].lower()", "ann"),
        ("?= json_loads('[1, 2]')", [1, 2]),
        ("?= true and not false and null is None", True),
        ("?=  {scores[1]} + 1", 21),
        ("?= 'words[list][0]' if {words[list_size]!r} else 'EMPTY_STR'", "words[list][0]"),
        ("?= {n!s} + 'x'", "2x"),
    ],
)
def test_expression_results(source: str, expected: object) -> None:
    assert ev(source) == expected


def test_expression_names_exclude_functions_and_comprehension_targets() -> None:
    value = compile_value("?= [len(x) for x in jokes if n] + [STEP_RESULT[0]]")
    assert isinstance(value, Expression)
    assert value.names == {"jokes", "n", "STEP_RESULT"}


@pytest.mark.parametrize(
    "text",
    [
        "x' + str(n) + '",
        '"; __import__("os").system("echo pwned"); "',
        "{n} {QUESTION}",
        "}}{{",
    ],
)
def test_references_are_bound_never_pasted_in_as_code(text: str) -> None:
    scope = {**SCOPE, "Q": text}
    assert compile_value("?= {Q!r} + '|'").evaluate(scope) == text + "|"
    assert compile_value("?= {Q} + '|'").evaluate(scope) == text + "|"
    assert compile_value("?= len({Q!s})").evaluate(scope) == len(text)


def test_braces_inside_string_literals_of_an_expression_are_text() -> None:
    assert ev("?= '{n}' + \"{QUESTION}\"") == "{n}{QUESTION}"


def test_undefined_name_in_an_expression_names_it() -> None:
    with pytest.raises(EvalError, match="'nope'"):
        ev("?= nope + 1")


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("?= 1 +", "syntax error"),
        ("?=", "empty expression"),
        ("?= f'{n}'", "f-strings"),
        ("?= lambda: 1", "not allowed"),
        ("?= (x := 1)", "not allowed"),
        ("?= ().__class__", "'__class__'"),
        ("?= n.__class__.__mro__", "not allowed"),
        ("?= {}.get.__self__", "'__self__'"),
        ("?= ''.__class__.__subclasses__()", "not allowed"),
        ("?= " + "(" * 400 + "1" + ")" * 400, ""),
        ("?= " + "-" * 5000 + "1", "nested too deeply"),
        ("?= " + "1+" * 6000 + "1", "characters long"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_refused_at_compile_time(source: str, hint: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_value(source)
    assert hint in str(info.value)


@pytest.mark.parametrize(
    ("source", "hint"),
    [
        ("?= 'a' * 10**9", ""),
        ("?= 9**9**9", "too large"),
        ("?= 10**100000", "too large"),
        ("?= 2**-100000", "too large"),
        ("?= (2**9999) ** 9999", "too large"),
        ("?= [1] * 10**9", ""),
        ("?= (1,) * 10**9", ""),
        ("?= 'x' * n * 10**8", ""),
        ("?= [[1] * 10000] * 10000", "too large"),
        ("?= ['x' * 99999] * 99999", "too large"),
        ("?= [a for a in 'x' * 99999 for b in 'x' * 99999]", ""),
        ("?= max(max(i for i in [1] * 99999) for j in [1] * 99999)", ""),
        ("?= ','.join(['a' * 100000] * 100)", "join"),
        ("?= 'ab'.replace('', 'b' * 100000)", "replace"),
        ("?= '%s' % n", "'%'"),
        ("?= '{}'.format(n)", "format"),
        ("?= 'x'.ljust(10**9)", "ljust"),
        ("?= 'x'.zfill(10**9)", "zfill"),
        ("?= __import__('os')", "unknown function"),
        ("?= open('/etc/passwd')", "unknown function"),
        ("?= eval('1')", "unknown function"),
        ("?= getattr(n, 'real')", "unknown function"),
        ("?= type(n)", "unknown function"),
        ("?= json_loads('[' * 100000)", "nested too deeply"),
        ("?= str(10**9000)", "failed"),
        ("?= 1 / 0", "ZeroDivisionError"),
        ("?= jokes.append(1)", "append"),
        ("?= user_info.clear()", "clear"),
        ("?= " + "*".join(["10**9999"] * 1100), ""),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_hostile_expressions_are_clear_errors(source: str, hint: str) -> None:
    with pytest.raises(ExpressionError) as info:  # refused when compiled or when run
        compile_value(source).evaluate(SCOPE)
    assert hint in str(info.value)
    assert SCOPE["jokes"] == ["a", "b"]  # nothing mutated behind the engine's back


@pytest.mark.parametrize(
    "source",
    [
        # each walks or builds ~30 million members from a tiny shared structure
        "?= len(str([[1] * 9999] * 999))",
        "?= len(json_dumps([[[1] * 999] * 999] * 9))",
        "?= len(sorted([[1] * 99999] * 9999))",
    ],
)
def test_functions_over_huge_shared_structures_are_refused(source: str) -> None:
    with pytest.raises(ExpressionError, match=r"too large|too costly|too long"):
        compile_value(source).evaluate(SCOPE)


@pytest.mark.slow  # a fresh interpreter
def test_quadratic_sum_of_lists_does_not_hang() -> None:
    """``sum(lists, [])`` is quadratic; it must be refused, not run for minutes."""
    code = textwrap.dedent(
        """
        import json, resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from tmy.values.compiled import compile_value
        from tmy.errors import EvalError
        try:
            compile_value("?= len(sum([[1, 2, 3]] * 99999, []))").evaluate({})
            print(json.dumps({"error": None}))
        except EvalError as exc:
            print(json.dumps({"error": type(exc).__name__}))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        pytest.fail("sum([[1, 2, 3]] * 99999, []) still ran after 10 s: a hang, not an error")
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"error": "ExpressionError"}


# -- helpers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("s", "s"),
        (None, ""),
        (True, "true"),
        (False, "false"),
        (3.5, "3.5"),
        ([1, "é"], '[1, "é"]'),
        ({"a": 1}, '{"a": 1}'),
        ("你好".encode(), "你好"),
    ],
)
def test_to_text(value: object, text: str) -> None:
    assert to_text(value) == text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", False),
        ("0", False),
        ("false", False),
        ("No", False),
        (" none ", False),
        ("null", False),
        ("x", True),
        (0, False),
        (1, True),
        ([], False),
        ([0], True),
        (None, False),
    ],
)
def test_truthy(value: object, expected: bool) -> None:
    assert truthy(value) is expected


# -- through the engine ---------------------------------------------------------------

ENGINE_RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - plugin: ADJUST
        input: "?= {QUESTION!r} + '!'"
  - id: boom
    triggers: ["boom"]
    steps:
      - plugin: ADJUST
        input: "?= 'a' * 10**9"
  - id: tpl
    triggers: ["tpl *"]
    steps:
      - plugin: ADJUST
        input: "[{QUESTION}] {{literal}} {\\"json\\": 1}"
"""


async def test_user_text_in_an_expression_stays_data() -> None:
    async with Bot({"v.yaml": ENGINE_RULES}) as bot:
        reply = await bot.ask("echo ' + str(__import__('os').getpid()) + '")
        assert reply.error is None
        assert reply.text == "' + str(__import__('os').getpid()) + '!"


async def test_user_text_with_braces_is_not_re_templated() -> None:
    async with Bot({"v.yaml": ENGINE_RULES}) as bot:
        expected = '[{USER} {STEP_ERROR}] {literal} {"json": 1}'
        assert await bot.say("tpl {USER} {STEP_ERROR}") == expected


async def test_hostile_expression_in_a_rule_fails_the_run_and_the_bot_keeps_serving() -> None:
    async with Bot({"v.yaml": ENGINE_RULES}) as bot:
        reply = await bot.ask("boom")
        assert reply.rule == "boom"
        assert reply.error and "refused" in reply.error
        assert await bot.say("echo still here") == "still here!"


async def test_a_templated_save_key_from_user_text_stays_one_key() -> None:
    rules = """
variables:
  scores: {scope: global, default: {}}
rules:
  - id: s
    triggers: ["score *"]
    steps:
      - {plugin: ADJUST, input: "?= int(QUESTION)", save: "scores[{USER}]"}
      - {plugin: ADJUST, input: "{scores[{USER}]}"}
"""
    async with Bot({"s.yaml": rules}) as bot:
        assert await bot.say("score 7", user="a][b") == "7"
        assert await bot.say("score 8", user="[0]") == "8"
        assert await bot.var("scores") == {"a][b": 7, "[0]": 8}


def test_nested_reference_key_from_user_text_is_not_re_parsed() -> None:
    scope = {**SCOPE, "USER": "u1][x"}
    with pytest.raises(EvalError, match=r"'u1\]\[x'"):
        compile_value("{by_user[{USER}]}").evaluate(scope)


# -- from test_audit_issue2.py (issue 2 audit: each failed before its fix)


def test_a_bad_format_spec_is_a_load_time_error() -> None:
    text = "rules:\n  - id: r\n    triggers: [go]\n    steps:\n"
    text += '      - {plugin: ADJUST, input: "{STEP_RESULT:>>>>}"}\n'
    with pytest.raises(RuleErrors, match=r"fmt\.yaml:5"):
        load_sources([(Path("fmt.yaml"), text)], default_registry())


# -- from test_hardening_values.py (issue 7 hardening, defects 4, 7, 10: expression cost,
#    amplification, deep YAML)


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
