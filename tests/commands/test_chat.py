"""``.tmy …`` in chat (tmy.commands.chat): who gets an answer, what is logged, the help."""

from __future__ import annotations

from pathlib import Path

from tests.support.log_helpers import read_log
from tmy.builtins import extensions
from tmy.command import Command, Invocation, Result
from tmy.commands.chat import ChatCommands
from tmy.extension import Extension
from tmy.testing import Bot

RULES = {"r.yaml": "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"}


def test_only_the_prefix_followed_by_a_space_or_nothing_is_a_command() -> None:
    chat = ChatCommands({}, app=None, prefix=".tmy")
    assert chat.prefix == ".tmy"
    assert chat.is_command(".tmy") and chat.is_command(".tmy vars") and chat.is_command(".tmy\tx")
    assert not chat.is_command(".tmyx") and not chat.is_command("tmy vars")


async def test_a_stranger_gets_no_reply_and_a_refusal_is_logged(log_file: Path) -> None:
    async with Bot(RULES) as bot:
        reply = await bot.ask(".tmy vars list", user="mallory")
        assert (reply.text, reply.rule) == ("", None)
        assert (await bot.ask(".tmy nosuch", user="mallory")).text == ""  # no hint it exists
        answer = (await bot.ask(".tmy", user="root", is_admin=True)).text
    assert answer.startswith("commands: reload | rules [ID] | vars ")
    events = read_log(log_file)
    refused = [e for e in events if e["event"] == "admin.refused"]
    assert [e["command"] for e in refused] == [".tmy vars list", ".tmy nosuch"]
    assert refused[0]["user"] == "mallory" and refused[0]["level"] == "warning"
    ran = [e for e in events if e["event"] == "admin.command"]
    assert [(e["command"], e["user"]) for e in ran] == [("help", "root")]


async def test_errors_and_unknown_commands_answer_with_error_text() -> None:
    async with Bot(RULES) as bot:
        ask = bot.ask

        unknown = (await ask(".tmy frobnicate", user="root", is_admin=True)).text
        assert unknown.startswith("error: unknown command 'frobnicate'; commands: reload")
        usage = (await ask(".tmy vars", user="root", is_admin=True)).text
        assert usage == "error: usage: vars get|set|del PATH [VALUE] (or vars list)"
        assert (await ask(".tmy trace", user="root", is_admin=True)).text == (
            "error: usage: trace TRACE_ID"
        )
        assert (await ask(".tmy explain", user="root", is_admin=True)).text == (
            "error: usage: explain TEXT (or explain --event KIND)"
        )
        assert (await ask(".tmy RULES", user="root", is_admin=True)).text.startswith("1 rules")


async def test_an_open_command_answers_anyone_and_an_empty_answer_is_a_dash() -> None:
    async def run(inv: Invocation) -> Result:
        return Result("" if inv.args["word"] == "empty" else f"{inv.who.user}: {inv.args['word']}")

    from tmy.command import Arg

    echo = Command("echo", "say it back", run, args=(Arg("word", rest=True),), admin=False)
    mine = (*extensions(), Extension(name="echo-test", commands=(echo,)))
    async with Bot(RULES, extensions=mine) as bot:
        assert (await bot.ask(".tmy echo hello  there", user="ann")).text == "ann: hello  there"
        assert (await bot.ask(".tmy echo empty", user="ann")).text == "-"
        assert "echo WORD" not in (await bot.ask(".tmy help", user="root", is_admin=True)).text
        assert "| echo" in (await bot.ask(".tmy help", user="root", is_admin=True)).text


async def test_a_chat_admin_runs_the_chat_scoped_commands_there_and_nothing_global(
    log_file: Path,
) -> None:
    async with Bot(RULES) as bot:

        async def owner(text: str, chat: str = "group:1") -> str:
            # a QQ group owner: an admin of this chat by the platform's roles, not in admins:
            reply = await bot.ask(text, user="owner", chat=chat, platform="onebot",
                                  private=False, chat_admin=True)  # fmt: skip
            return reply.text

        assert (await owner(".tmy off")).startswith("the bot is off in this chat (group:1)")
        assert (await bot.ask("hi", chat="group:1", platform="onebot", private=False)).text == ""
        assert (await owner(".tmy on")) == "the bot is on in this chat (group:1)"
        assert (await owner(".tmy")).startswith("commands: ")
        # rules and explain show every rule's steps, other chats' rules too: global admins only
        global_ = (".tmy reload", ".tmy vars list", ".tmy trace 0123", ".tmy cron",
                   ".tmy rules", ".tmy explain hi")  # fmt: skip
        for global_only in global_:
            assert await owner(global_only) == "", global_only
        # the same user without the platform's role is a stranger
        plain = await bot.ask(".tmy off", user="owner", chat="group:1", platform="onebot")
        assert plain.text == ""
    refused = [e["command"] for e in read_log(log_file) if e["event"] == "admin.refused"]
    assert refused == [*global_, ".tmy off"]


def test_the_chat_scoped_commands_are_marked() -> None:
    from tmy.command import command_table

    table = command_table(extensions())
    marked = {name for name, c in table.items() if c.chat_admin}
    assert {"on", "off", "help"} <= marked
    assert not marked & {"reload", "vars", "cron", "trace", "backup", "restore", "rules", "explain"}
