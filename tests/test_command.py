"""tmy/command.py: a chat line (``.tmy NAME …``, HTTP ``argv``) read into a command's arguments."""

from __future__ import annotations

import pytest

from tmy.command import Arg, Command, CommandError, Invocation, Result, parse_words


async def _run(inv: Invocation) -> Result:
    return Result("")


FIRE = Command(
    name="fire",
    help="",
    run=_run,
    args=(
        Arg("rule", rest=True),
        Arg("target", flag=True, required=False),
        Arg("dry_run", flag=True, takes_value=False, required=False),
        Arg("here", flag=True, takes_value=False, required=False, fronts=frozenset({"cli"})),
    ),
)
SAY = Command(name="say", help="", run=_run, args=(Arg("text", rest=True),))


@pytest.mark.parametrize(
    "line",
    [
        "digest --dry-run --target onebot:group:5",
        "--dry-run digest --target=onebot:group:5",
        "--target onebot:group:5 --dry-run digest",
    ],
)
def test_the_chat_flags_are_read_wherever_they_stand(line: str) -> None:
    args = parse_words(FIRE, line)
    assert args == {"rule": "digest", "target": "onebot:group:5", "dry_run": True}


def test_a_flag_the_front_does_not_offer_stays_a_word_and_a_value_is_required() -> None:
    assert parse_words(FIRE, "digest --here")["rule"] == "digest --here"  # CLI-only flag
    with pytest.raises(CommandError, match="--target needs a value"):
        parse_words(FIRE, "digest --target")


def test_a_command_without_chat_flags_reads_its_line_verbatim() -> None:
    line = "why  --dry-run   and --target=x"  # spacing and dashes kept
    assert parse_words(SAY, line) == {"text": line}
