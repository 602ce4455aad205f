"""Tools from a plugged source (what the MCP extension plugs in): offered by a step's
``mcp:`` patterns, named SERVER__TOOL, sorted, schemas as-is, denied ones never offered
nor run, the text protocol, load-time checks of the server names.

The source here is a small real ToolSource (test data, as the MCP servers of
tests/mcp are): a shelf of OfferedTool entries that answers calls from a dict.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.llm_fake_provider import FakeProvider, Reply
from tmy.errors import ExecutorError, RuleError
from tmy.extension import Extension
from tmy.llm import sources
from tmy.llm.runtime import runtime_of
from tmy.llm.tools import OfferedTool
from tmy.testing import Bot
from tmy.testing.bot import default_extensions
from tmy.types import StepContext

ISSUE_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "labels": {"type": "array"}},
    "required": ["title"],
    "additionalProperties": False,
    "$defs": {"unused": {"type": "string"}},
}


class Shelf:
    """A ToolSource: the tools it offers now, and what its calls answered (and got)."""

    def __init__(self, tools: list[OfferedTool]) -> None:
        self.tools = tools
        self.calls: list[tuple[str, dict[str, Any], str]] = []

    def offered(self) -> Sequence[OfferedTool]:
        return list(self.tools)

    async def call(self, ctx: StepContext, name: str, arguments: dict[str, Any]) -> str:
        self.calls.append((name, arguments, ctx.uri))
        if name.endswith("/broken"):
            raise ExecutorError(f"MCP server {name.split('/')[0]!r} is down")
        return f"{name} did {json.dumps(arguments, sort_keys=True)}"


def shelf() -> Shelf:
    return Shelf(
        [
            OfferedTool("github/create_issue", "Open an issue.", ISSUE_SCHEMA),
            OfferedTool("github/delete_repo", "Delete a repository.", {"type": "object"}),
            OfferedTool("github/broken", "Always fails.", {"type": "object"}),
            OfferedTool("files/read.file", "Read a file.", {"type": "object"}),
            OfferedTool("other/x", "Not asked for.", {"type": "object"}),
        ]
    )


RULES = """
rules:
  - id: assistant
    triggers: ["ask *"]
    on_error: "sorry: {STEP_ERROR}"
    steps:
      - plugin: LLM
        tools: [weather, "mcp:github/*", "!mcp:github/delete_*", "mcp:files/*"]
        EXTRA
  - id: weather
    triggers: ["weather *"]
    tool: {description: "The weather today."}
    steps:
      - {plugin: ADJUST, input: "sunny"}
"""

SERVERS = SimpleNamespace(servers={"github": {}, "files": {}, "other": {}})


def without_plugged() -> tuple[Extension, ...]:
    """The built-ins without the extensions that plug real sources in (this test plugs its own)."""
    return tuple(e for e in default_extensions() if e.name not in ("mcp", "knowledge"))


def bot(provider: FakeProvider, extra: str = "", rules: str = RULES, **kw: Any) -> Bot:
    llm = {"models": {"fake": {"base_url": provider.base_url, "model": "fake"}}}
    return Bot(
        {"r.yaml": rules.replace("EXTRA", extra)},
        llm=llm,
        extensions=without_plugged(),
        sections={"mcp": SERVERS, **kw},
    )


def names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


async def test_source_tools_are_offered_by_pattern_named_sorted_with_their_schema(
    provider: FakeProvider,
) -> None:
    provider.script(
        "fake",
        [
            Reply(
                None,
                tool_calls=[{"name": "github__create_issue", "arguments": {"title": "bug"}}],
            ),
            Reply("opened"),
        ],
    )
    source = shelf()
    async with bot(provider) as b:
        with runtime_of(b.engine.services).tools_from("mcp", source):
            reply = await b.ask("ask open an issue")
    assert reply.error is None and reply.text == "opened"
    first, second = provider.seen()
    # rules and executors first (as listed), then the source's, sorted by the model's name
    assert names(first) == ["weather", "files__read_file", "github__broken", "github__create_issue"]
    issue = first["tools"][3]["function"]
    assert issue["parameters"] == ISSUE_SCHEMA and issue["description"] == "Open an issue."
    assert source.calls == [("github/create_issue", {"title": "bug"}, "assistant/0/tool/call_1_1")]
    assert second["messages"][-1]["content"] == 'github/create_issue did {"title": "bug"}'
    record = reply.steps[1]
    assert record.plugin == "tool:github__create_issue"
    assert record.uri == "assistant/0/tool/call_1_1"
    assert record.extra["tool"] == "mcp:github/create_issue" and record.input == {"title": "bug"}


async def test_a_denied_tool_is_never_offered_nor_run_even_when_named(
    provider: FakeProvider,
) -> None:
    provider.script(
        "fake",
        [
            Reply(None, tool_calls=[{"name": "github__delete_repo", "arguments": {}}]),
            Reply(None, tool_calls=[{"name": "other__x", "arguments": {}}]),
            Reply("I cannot"),
        ],
    )
    source = shelf()
    async with bot(provider) as b:
        with runtime_of(b.engine.services).tools_from("mcp", source):
            reply = await b.ask("ask delete it")
    assert reply.text == "I cannot" and source.calls == []
    seen = provider.seen()
    assert "github__delete_repo" not in names(seen[0]) and "other__x" not in names(seen[0])
    answers = [m["content"] for m in seen[2]["messages"] if m["role"] == "tool"]
    assert answers == [
        "permission denied: tool 'github__delete_repo' is not allowed here",
        "permission denied: tool 'other__x' is not allowed here",
    ]
    assert reply.steps[1].error.startswith("permission denied")


async def test_permissions_apply_on_top_by_either_name(provider: FakeProvider) -> None:
    source = shelf()
    for perms, offered in (
        ('["!mcp:github/broken"]', ["weather", "files__read_file", "github__create_issue"]),
        ('["!github__*"]', ["weather", "files__read_file"]),
        ('["mcp:files/*"]', ["weather", "files__read_file"]),  # weather: refused when called
    ):
        async with bot(provider, f"permissions: {perms}") as b:
            with runtime_of(b.engine.services).tools_from("mcp", source):
                await b.ask("ask x")
        assert names(provider.seen()[-1]) == offered


async def test_bad_arguments_and_a_failing_source_are_the_models_to_handle(
    provider: FakeProvider,
) -> None:
    provider.script(
        "fake",
        [
            Reply(
                None,
                tool_calls=[
                    {"name": "github__create_issue", "arguments": {"labels": []}},
                    {"name": "github__broken", "arguments": {}},
                ],
            ),
            Reply("both failed"),
        ],
    )
    source = shelf()
    async with bot(provider) as b:
        with runtime_of(b.engine.services).tools_from("mcp", source):
            reply = await b.ask("ask x")
    assert reply.text == "both failed"
    invalid, down = (m["content"] for m in provider.seen()[1]["messages"] if m["role"] == "tool")
    assert invalid == "invalid arguments for github__create_issue: 'title' is a required property"
    assert down == "error: MCP server 'github' is down"
    assert [c[0] for c in source.calls] == ["github/broken"]  # the invalid call never ran
    assert reply.steps[2].error == "MCP server 'github' is down"


async def test_a_changed_list_is_seen_by_the_next_request(provider: FakeProvider) -> None:
    source = shelf()
    async with bot(provider) as b:
        with runtime_of(b.engine.services).tools_from("mcp", source):
            await b.ask("ask one")
            source.tools = [*source.tools, OfferedTool("github/a_new_one", "New.", {})]
            await b.ask("ask two")
            source.tools = []  # a source with nothing to offer (a server down, say)
            await b.ask("ask three")
    one, two, three = provider.seen()
    assert names(two) == [*names(one)[:2], "github__a_new_one", *names(one)[2:]]
    assert names(three) == ["weather"]


async def test_the_tools_in_the_prefix_stay_byte_for_byte_the_same(provider: FakeProvider) -> None:
    source = shelf()
    async with bot(provider) as b:
        with runtime_of(b.engine.services).tools_from("mcp", source):
            await b.ask("ask one")
            source.tools = list(reversed(source.tools))  # offered in another order
            await b.ask("ask two", user="someone-else")
    one, two = provider.seen()
    assert json.dumps(one["tools"]) == json.dumps(two["tools"])
    assert one["messages"][0] == two["messages"][0]


async def test_the_text_protocol_lists_them_in_the_system_prompt(provider: FakeProvider) -> None:
    call = '<tool_call>{"name": "files__read_file", "arguments": {"path": "a"}}</tool_call>'
    provider.script("fake", [Reply(call), Reply("read it")])
    source = shelf()
    async with bot(provider, "tool_protocol: text") as b:
        with runtime_of(b.engine.services).tools_from("mcp", source):
            assert await b.say("ask read a") == "read it"
    first, second = provider.seen()
    assert "tools" not in first
    system = first["messages"][0]["content"]
    listed = [line.split(":")[0][2:] for line in system.split("\n") if line.startswith("- ")]
    assert listed == ["weather", "files__read_file", "github__broken", "github__create_issue"]
    assert "github__delete_repo" not in system
    assert json.dumps(ISSUE_SCHEMA, sort_keys=True) in system
    assert source.calls == [("files/read.file", {"path": "a"}, "assistant/0/tool/call_1_1")]
    assert "files/read.file did" in second["messages"][-1]["content"]


async def test_no_source_plugged_in_is_a_step_error(provider: FakeProvider) -> None:
    async with bot(provider) as b:
        reply = await b.ask("ask x")
    assert reply.text.startswith("sorry: tools: 'mcp:github/*' needs the 'mcp' tool source")


def test_names_the_model_sees() -> None:
    assert sources.model_name("github/create_issue") == "github__create_issue"
    assert sources.model_name("my.server/do it:now") == "my_server__do_it_now"
    long = sources.model_name("s/" + "x" * 100)
    assert len(long) == 64 and long == sources.model_name("s/" + "x" * 100)
    assert long != sources.model_name("s/" + "x" * 99 + "y")  # the cut keeps a hash of all


def test_collisions_get_numbered_in_the_order_of_the_source_names() -> None:
    source = Shelf(
        [
            OfferedTool("a/b.c", "", {}),
            OfferedTool("a/b_c", "", {}),
            OfferedTool("a/b:c", "", {}),
            OfferedTool("a/weather", "", {}),
        ]
    )
    for order in (source.tools, list(reversed(source.tools))):
        source.tools = order
        found = sources.resolve(["mcp:a/*"], {"mcp": source}, {"a__weather"}, [])
        assert [(t.name, t.target) for t in found] == [
            ("a__b_c", "a/b.c"),
            ("a__b_c_2", "a/b:c"),
            ("a__b_c_3", "a/b_c"),
            ("a__weather_2", "a/weather"),
        ]


def test_only_negative_patterns_offer_everything_else_of_that_source() -> None:
    found = sources.resolve(["!mcp:github/delete_*"], {"mcp": shelf()}, set(), [])
    assert [t.target for t in found if t.offered] == [
        "files/read.file",
        "github/broken",
        "github/create_issue",
        "other/x",
    ]
    assert [t.name for t in found if not t.offered] == ["github__delete_repo"]


def test_a_denied_tool_keeps_its_name_so_the_others_keep_theirs() -> None:
    source = Shelf([OfferedTool("a/b.c", "", {}), OfferedTool("a/b_c", "", {})])
    for patterns in (["mcp:a/*"], ["mcp:a/*", "!mcp:a/b.c"]):
        found = sources.resolve(patterns, {"mcp": source}, set(), [])
        assert [(t.name, t.target) for t in found] == [("a__b_c", "a/b.c"), ("a__b_c_2", "a/b_c")]


CHECKED = """
rules:
  - id: t
    triggers: ["t"]
    steps:
      - plugin: LLM
        tools: [weather, PATTERN]
"""


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        (
            '"mcp:githb/*"',
            "r.yaml:6: rule 't' step 0: tools: 'mcp:githb/*': no MCP server 'githb' is "
            "configured (did you mean 'github'?); mcp.servers: files, github, other",
        ),
        (
            '"!mcp:gihub/delete_*"',  # a deny that would deny nothing is an error too
            "r.yaml:6: rule 't' step 0: tools: '!mcp:gihub/delete_*': no MCP server 'gihub' "
            "is configured (did you mean 'github'?); mcp.servers: files, github, other",
        ),
        (
            '"mpc:github/*"',
            "r.yaml:6: rule 't' step 0: tools: 'mpc:github/*': unknown tool source 'mpc' "
            "(did you mean 'mcp'?); known: mcp",
        ),
        (
            '"mcp:/x"',
            "r.yaml:6: rule 't' step 0: tools: 'mcp:/x' names no server; "
            "write mcp:SERVER/TOOL or mcp:SERVER/*",
        ),
    ],
)
async def test_patterns_are_checked_when_the_rules_load(
    provider: FakeProvider, pattern: str, error: str
) -> None:
    with pytest.raises(RuleError) as refused:
        async with bot(provider, rules=CHECKED.replace("PATTERN", pattern)):
            pass
    assert str(refused.value) == error


async def test_without_an_mcp_section_no_server_is_configured(provider: FakeProvider) -> None:
    llm = {"models": {"fake": {"base_url": provider.base_url, "model": "fake"}}}
    rules = CHECKED.replace("PATTERN", '"mcp:*"')
    with pytest.raises(RuleError, match=r"no MCP server '\*' is configured; mcp.servers: none"):
        async with Bot({"r.yaml": rules}, llm=llm, extensions=without_plugged()):
            pass
    # a server glob matching a configured server loads
    async with bot(provider, rules=rules):
        pass
