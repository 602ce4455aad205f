"""Variable paths ``name[key][0][key2]``: parsing, reading and writing (DESIGN.md)."""

from __future__ import annotations

import pytest

from tmy.errors import EvalError, PathError
from tmy.values.compiled import compile_path
from tmy.values.paths import Path, get_in, parse_path, set_in

# -- parsing --------------------------------------------------------------------------


def test_root_only() -> None:
    assert parse_path("jokes") == Path("jokes", ())


def test_integer_segments_index_lists_and_may_be_negative() -> None:
    assert parse_path("a[0][-1][12]").segments == (0, -1, 12)


def test_other_segments_are_map_keys_with_optional_quotes() -> None:
    path = parse_path("""user_info[name]['two words']["x]y"][ spaced ]""")
    assert path.root == "user_info"
    assert path.segments == ("name", "two words", "x]y", "spaced")


def test_quoted_digits_stay_a_string_key() -> None:
    assert parse_path("a['0']").segments == ("0",)


def test_unicode_names_are_allowed() -> None:
    assert parse_path("分数[张三]") == Path("分数", ("张三",))


def test_str_round_trips_the_shape() -> None:
    assert str(parse_path("a[b][0][c]")) == "a[b][0][c]"


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("1abc", "must start with a variable name"),
        ("", "must start with a variable name"),
        ("a[b", "not closed"),
        ("a.b", "unexpected '.'"),
        ("a[b]c", "unexpected 'c'"),
        ("a[]", "empty [] segment"),
        ("a['x]", "not closed"),
    ],
)
def test_malformed_paths_are_clear_errors(text: str, hint: str) -> None:
    with pytest.raises(PathError, match=r".*") as info:
        parse_path(text)
    assert hint in str(info.value)
    assert isinstance(info.value, EvalError)


# -- reading --------------------------------------------------------------------------

DATA = {"user_info": {"name": "Ann", "tags": ["a", "b", "c"]}, "n": {"0": "zero"}}


def test_read_nested_map_and_list() -> None:
    assert get_in(DATA, parse_path("x[user_info][name]")) == "Ann"
    assert get_in(DATA, parse_path("x[user_info][tags][1]")) == "b"


def test_negative_index_reads_from_the_end() -> None:
    assert get_in(DATA, parse_path("x[user_info][tags][-1]")) == "c"


def test_integer_segment_on_a_map_reads_the_string_key() -> None:
    # JSON maps only have string keys; x[n][0] finds "0"
    assert get_in(DATA, parse_path("x[n][0]")) == "zero"


def test_missing_key_error_names_the_path_and_the_key() -> None:
    with pytest.raises(PathError) as info:
        get_in(DATA, parse_path("x[user_info][age]"))
    message = str(info.value)
    assert "x[user_info][age]" in message
    assert "'age'" in message


def test_index_out_of_range_names_the_path() -> None:
    with pytest.raises(PathError, match=r"x\[user_info\]\[tags\]\[7\].*out of range"):
        get_in(DATA, parse_path("x[user_info][tags][7]"))


def test_key_on_a_list_needs_an_integer() -> None:
    with pytest.raises(PathError, match="needs an integer"):
        get_in(DATA, parse_path("x[user_info][tags][first]"))


def test_indexing_into_a_scalar_is_an_error() -> None:
    with pytest.raises(PathError, match="has no"):
        get_in(DATA, parse_path("x[user_info][name][0]"))


# -- writing --------------------------------------------------------------------------


def test_write_creates_missing_map_levels() -> None:
    root = set_in(None, parse_path("some_var[attr1][8][attr2]"), "v")
    assert root == {"attr1": {"8": {"attr2": "v"}}}
    # and the same path reads it back
    assert get_in(root, parse_path("some_var[attr1][8][attr2]")) == "v"


def test_write_replaces_whatever_type_stood_there() -> None:
    root = {"a": {"b": [1, 2, 3]}}
    set_in(root, parse_path("x[a][b]"), "now a string")
    assert root == {"a": {"b": "now a string"}}
    set_in(root, parse_path("x[a][b][c]"), 1)  # a scalar in the way becomes a map level
    assert root == {"a": {"b": {"c": 1}}}


def test_write_into_a_list_position_and_append_at_len() -> None:
    root = {"l": [1, 2]}
    set_in(root, parse_path("x[l][0]"), "one")
    set_in(root, parse_path("x[l][-1]"), "two")
    set_in(root, parse_path("x[l][2]"), "three")
    assert root == {"l": ["one", "two", "three"]}


def test_write_beyond_the_end_of_a_list_pads_it_with_nulls() -> None:
    """Seed 004: ``save: lst[5]`` on a 2-item list stores the value at 5."""
    root = {"l": [1, 2]}
    set_in(root, parse_path("x[l][5]"), "six")
    assert root == {"l": [1, 2, None, None, None, "six"]}
    set_in(root, parse_path("x[l][7][k]"), 1)  # a level past the end: padded, then a map
    assert root["l"][6:] == [None, {"k": 1}]
    assert set_in([], parse_path("x[2]"), "c") == [None, None, "c"]


def test_padding_a_list_is_bounded_and_negative_indexes_still_must_exist() -> None:
    from tmy.values.paths import MAX_LIST_INDEX

    with pytest.raises(PathError, match=r"index 10000000000 is too far past the end of a list"):
        set_in({"l": [1]}, parse_path("x[l][10000000000]"), 0)
    with pytest.raises(PathError, match="at most 1,000,000 members"):
        set_in({"l": []}, parse_path(f"x[l][{MAX_LIST_INDEX + 1}]"), 0)
    big = set_in({"l": []}, parse_path(f"x[l][{MAX_LIST_INDEX}]"), 0)["l"]
    assert len(big) == MAX_LIST_INDEX + 1 and big[-1] == 0
    with pytest.raises(PathError, match="index -3 is out of range for a list of 1"):
        set_in({"l": [1]}, parse_path("x[l][-3]"), 0)


def test_write_with_a_key_into_a_list_is_an_error() -> None:
    with pytest.raises(PathError, match="needs an integer"):
        set_in({"l": [1]}, parse_path("x[l][k]"), 0)


def test_write_at_the_root_replaces_the_value() -> None:
    assert set_in({"old": 1}, parse_path("x"), [1, 2]) == [1, 2]


def test_write_over_a_scalar_root_makes_a_map() -> None:
    assert set_in("hello", parse_path("x[a]"), 1) == {"a": 1}


def test_write_of_an_existing_integer_key_in_a_map_keeps_it() -> None:
    root = {"0": "old"}
    set_in(root, parse_path("x[0]"), "new")
    assert root == {"0": "new"}


# -- positions written in rules (save / INPUT) ----------------------------------------


def test_static_position() -> None:
    pv = compile_path("scores[total]")
    assert pv.root == "scores"
    assert pv.resolve({}) == Path("scores", ("total",))


def test_position_built_from_a_template() -> None:
    pv = compile_path("scores[{USER}]")
    assert pv.root == "scores"
    assert "USER" in pv.names
    assert pv.resolve({"USER": "alice"}) == Path("scores", ("alice",))


def test_position_computed_by_an_expression() -> None:
    pv = compile_path("?= 'a[x]' if flag else 'b'")
    assert pv.root is None  # only known at run time
    assert pv.resolve({"flag": True}) == Path("a", ("x",))
    assert pv.resolve({"flag": False}) == Path("b", ())


def test_expression_that_computes_no_string_is_a_clear_error() -> None:
    pv = compile_path("?= 42")
    with pytest.raises(PathError, match="must compute a variable position"):
        pv.resolve({})


@pytest.mark.parametrize("user", ["x][other", "[0]", "'q'"])
def test_template_key_from_user_text_stays_one_key(user: str) -> None:
    # text substituted into a key must not add, drop or re-quote segments
    pv = compile_path("scores[{USER}]")
    assert pv.resolve({"USER": user}) == Path("scores", (user,))


def test_indexing_a_null_says_it_is_not_set_and_how_to_guard() -> None:
    with pytest.raises(PathError) as refused:
        get_in(None, parse_path("REPLY_TO[text]"))
    assert str(refused.value) == (
        "REPLY_TO[text]: REPLY_TO is null (not set for this message), it has no [text]; "
        'guard the step with when: "?= REPLY_TO" (or use REPLY_TO[…] only where it is set)'
    )
