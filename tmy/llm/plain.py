"""A plain LLM step: one question, one request, its answer — the usual step, on a short way.

A step without tools, an output contract, a template, memory, knowledge, pictures, a
quote or a stream asks the model once with its system prompt, few-shot messages and
history. :func:`ask` sends that request as :func:`tmy.llm.exchange.converse` would send
its first, without the tool loop's plan (made only when the answer comes back empty,
and re-asked from there with converse's retry hint). ``tests/llm/test_executor.py``
holds the two ways to the same requests, details and history.
"""

from __future__ import annotations

from typing import Any

from tmy.llm import images, prompt
from tmy.llm.client import Request
from tmy.llm.contracts import TEXT, ContractError, clean
from tmy.llm.exchange import Job, Plan, converse, send

GENERAL_TEMPERATURE = 0.7  # the general scene's (a step's ``temperature:`` wins), both ways

# the options that make a step more than one question and its answer (with ``knowledge``,
# and an output contract): such steps take the general way through converse()
RICH = ("template", "tools", "permissions", "quote", "memory", "stream")


def is_plain(cfg: dict[str, Any]) -> bool:
    """No option the general way needs (pictures as :func:`tmy.llm.images.wanted` sees
    them: an empty map wants some), and retries and tool turns it would read the same
    (a computed negative one: the general way says what it makes of it)."""
    if any(map(cfg.get, RICH)) or cfg.get("knowledge") is not None or images.wanted(cfg):
        return False
    retries, turns = cfg.get("retries"), cfg.get("max_tool_turns")
    return (retries is None or (type(retries) is int and retries >= 0)) and (
        not turns or (type(turns) is int and turns > 0)
    )


async def ask(job: Job, cfg: dict[str, Any], pairs: list[list[str]], tail: str) -> str:
    """A plain step's answer: the request converse() would send first, sent as it is, its
    answer cleaned as the text contract does — without the tool loop's plan, which is made
    only when the answer is empty (re-asked from there with converse's retry hint)."""
    config = job.rt.config
    system = prompt.merge_system(cfg.get("system"))
    intent = job.ctx.rule.intent
    messages = prompt.layout(
        prompt.build_system(config.scene_prompts["general"], system, intent),
        prompt.few_shot(cfg.get("messages")),
        pairs,
        tail,
    )
    job.prefix_len = len(messages) - 1 - 2 * len(pairs)
    job.history_len = 2 * len(pairs)
    stream = cfg.get("stream")  # None (the model's setting) or false: plain steps show nothing
    request = Request(
        messages=list(messages),
        tools=None,
        temperature=cfg.get("temperature"),
        default_temperature=GENERAL_TEMPERATURE,
        max_tokens=cfg.get("max_tokens"),
        json_schema=None,
        stream=None if stream is None else False,
    )
    done = await send(job, request)  # (tool calls no one offered: its text, as tool_loop)
    text = clean(done.content)
    if text:
        return text
    retries = int(cfg.get("retries") if cfg.get("retries") is not None else 2)
    plan = Plan(
        messages=messages,
        system_for=lambda hint: prompt.build_system(
            config.scene_prompts["general"], system, intent, "", hint
        ),
        contract=TEXT,
        retries=retries,
        max_turns=int(cfg.get("max_tool_turns") or config.max_tool_turns),
        temperature=cfg.get("temperature"),
        default_temperature=GENERAL_TEMPERATURE,
        max_tokens=cfg.get("max_tokens"),
        stream=request.stream,
    )
    _, text = await converse(job, plan, ContractError("the answer was empty"))
    return text
