"""The LLM executor (the general scene); the judged scenes are :mod:`tmy.llm.judged`.

The executor obeys seed 004 like any other: its input is the user message
(``STEP_RESULT`` unless ``input``/``INPUT`` say otherwise), its result — the
answer, parsed by the output contract — goes to ``STEP_RESULT`` and ``save:``,
its failures to ``STEP_ERROR``. Besides the question it may send pictures
(``images:``, ``vision:``; :mod:`tmy.llm.images`), the message replied to
(``quote:``), and stream its answer to the message's sink (``stream:``) — not
with an output contract that can refuse the answer (a refused first attempt
would already stand in the chat), and never its ``<think>`` reasoning or more
than ``limits.max_reply_chars`` (:mod:`tmy.llm.streaming`). Its ``tools:`` may name
MCP servers' tools (:mod:`tmy.llm.sources`); ``knowledge:`` puts a knowledge base's
passages into the request's tail and sets ``SOURCES`` (:mod:`tmy.llm.knowledge`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from tmy.config.llm import LLMConfig, known_models
from tmy.config.memory import RecallSpec, recall_spec
from tmy.errors import ConfigError, ExecutorError, TmyError
from tmy.executors.registry import Option
from tmy.llm import fold, history, images, jinja, knowledge, prompt, sources
from tmy.llm import tools as toolkit
from tmy.llm.contracts import Contract, contract_from
from tmy.llm.exchange import Job, Plan, capturing, converse
from tmy.llm.runtime import Recall, runtime_of
from tmy.llm.streaming import Budget
from tmy.types import StepContext
from tmy.values.compiled import to_text

log = structlog.get_logger("tmy.llm")

GENERAL_TEMPERATURE = 0.7
STREAM_MODES = (True, False, "chunks")
UNFAILING = ("text", "str")  # contracts any non-empty answer meets: such steps may stream

OPTIONS = {
    "system": Option(
        None, doc="system prompt: text, {background, content, notes, output}, or a list"
    ),
    "messages": Option(
        list, doc="few-shot messages: [{role, content}] or [{user: …}, {assistant: …}]"
    ),
    "template": Option(str, doc="a Jinja2 file rendering the question (sandboxed)"),
    "model": Option(str, doc="a model name from llm.models (default: llm.default)"),
    "temperature": Option((int, float)),
    "max_tokens": Option(int),
    "history": Option(int, default=0, doc="chat turns sent along (0: stateless)"),
    "context": Option(bool, default=True, doc="put time and sender before the question"),
    "returns": Option(str, doc="int | float | bool | list | dict | str"),
    "choices": Option(list, doc="the answer must be one of these"),
    "output": Option(dict, doc="JSON Schema the answer must validate against"),
    "format": Option(str, default="json", doc="json | yaml (with output:)"),
    "retries": Option(int, default=2, doc="re-asks when the answer breaks the contract"),
    "tools": Option(
        list,
        doc="rule ids (with tool:), executor names, MCP tools: mcp:SERVER/TOOL globs "
        '("mcp:github/*", "!mcp:github/delete_*") the model may call',
    ),
    "tool_protocol": Option(str, default="native", doc="native | text"),
    "max_tool_turns": Option(int, doc="tool rounds before giving up (default llm.max_tool_turns)"),
    "permissions": Option((list, str), doc='glob allow/deny of tool calls: ["w*", "!delete_*"]'),
    "stream": Option(
        (bool, str),
        doc="true | chunks: stream the answer (SSE) and show it as it grows where the "
        "platform can (chunks: also sentence by sentence); default: the model's setting; "
        "not shown with returns: (but str), choices: or output:",
    ),
    "images": Option(
        (str, list, dict),
        doc="pictures to send: URLs, data: URLs or attachment maps (IMAGES), one or a list",
    ),
    "vision": Option(bool, doc="send the message's pictures (its IMAGES) along"),
    "quote": Option(bool, doc="put the message this one replies to (REPLY_TO) in the prompt"),
    "deadline": Option((int, float), doc="seconds for the whole step (default llm.deadline)"),
    # long-term memory (docs/memory.md): recalled into the dynamic tail by the Recall provider
    # the memory extension plugs into the runtime (tmy.llm.runtime)
    "memory": Option(
        (int, dict),
        doc="recall memory: N entries, or {max, scopes, min_score, dialogue, summarize}",
    ),
    # the knowledge base (docs/knowledge.md): passages put into the dynamic tail by the
    # Knowledge provider the knowledge extension plugs into the runtime
    "knowledge": Option(
        (str, list, dict),
        doc="passages from knowledge bases: NAME, [NAME, …] or {use: [NAME, …], top, min_score}",
    ),
}


def make_check(
    config: LLMConfig, rules: Path | None = None, sections: Mapping[str, Any] | None = None
) -> Any:
    """A load-time check of a step's constant options (file:line errors, not runtime surprises).

    ``rules``: the rules directory (or file), where a constant ``template:`` is looked
    for so a Jinja2 syntax error is reported at load (:func:`tmy.llm.jinja.check_at_load`).
    ``sections``: the settings' extension sections — the MCP servers a ``tools:`` pattern
    may name (``mcp``, its ``.servers``) and the knowledge bases (``knowledge``, by name).
    """
    sections = sections or {}

    def check(cfg: dict[str, Any], computed: frozenset[str] = frozenset()) -> None:
        """``cfg``: the step's constant options; ``computed``: the names of its templated
        ones, when the loader says (an ``images: "{IMAGES}"`` step still needs a model
        with vision; a computed ``model:`` is checked when the step runs)."""
        try:
            _check(cfg, computed)
        except ExecutorError as exc:
            raise ValueError(str(exc)) from None

    def _check(cfg: dict[str, Any], computed: frozenset[str]) -> None:
        contract_from(cfg)
        model = cfg.get("model")
        if isinstance(model, str) and "{" not in model and model not in config.models:
            raise ValueError(f"model {model!r} is not configured; {known_models(config.models)}")
        protocol = cfg.get("tool_protocol")
        if protocol is not None and protocol not in toolkit.PROTOCOLS:
            raise ValueError(f"tool_protocol {protocol!r} must be native or text")
        toolkit.check_permissions(cfg.get("permissions"))
        for key in ("history", "retries", "max_tool_turns", "max_tokens"):
            if isinstance(cfg.get(key), int) and cfg[key] < 0:
                raise ValueError(f"{key} must not be negative")
        prompt.few_shot(cfg.get("messages"))
        if cfg.get("memory") is not None:  # long-term memory (its schema: tmy.config.memory)
            recall_spec(cfg["memory"])
        sources.check_at_load(cfg.get("tools"), sections)
        # its shape only: a base may be configured or made with kb add (check warns of
        # names that are neither: tmy.knowledge.checks)
        knowledge.knowledge_spec(cfg.get("knowledge"))
        stream = cfg.get("stream")
        if stream is not None and stream not in STREAM_MODES:
            raise ValueError(f"stream {stream!r} must be true, false or chunks")
        if (images.wanted(cfg) or "images" in computed) and "model" not in computed:
            _check_vision(config, cfg.get("model"))
        images.check_constant(cfg.get("images"))
        template = cfg.get("template")
        if rules is not None and isinstance(template, str) and template:
            jinja.check_at_load(template, rules)

    return check


def _check_vision(config: LLMConfig, name: Any) -> None:
    """A step sending pictures to a model whose config says it takes none: a load error."""
    model = config.models.get(name) if name else config.default_model
    if model is not None and not model.vision:
        raise ValueError(
            f"the step sends pictures (images:/vision:) to model {model.name!r}, whose "
            f"config says it takes none (llm.models.{model.name}.vision: false)"
        )


def deadline(ctx: StepContext, cfg: dict[str, Any], config: LLMConfig) -> float:
    """Seconds for this step: its ``deadline``, else llm.deadline, within the step timeout."""
    step_timeout = _step_timeout(ctx)
    wanted = cfg.get("deadline") or config.deadline or step_timeout
    return max(0.01, min(float(wanted), float(step_timeout) * 0.98))


def _step_timeout(ctx: StepContext) -> float:
    return float(ctx.step_timeout or ctx.services.settings.step_timeout)


def model_of(config: LLMConfig, name: Any) -> Any:
    try:
        return config.model(name or None)
    except ConfigError as exc:
        raise ExecutorError(str(exc)) from None


async def llm_step(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    """Ask the model ``value`` (the question) and return the answer (parsed by the contract)."""
    rt = runtime_of(ctx.services)
    config = rt.config
    seconds = deadline(ctx, cfg, config)
    job = Job(rt, ctx, model_of(config, cfg.get("model")), time.monotonic() + seconds, "general")
    ctx.record.extra["llm"] = job.stats
    if not capturing() and not toolkit.nested():
        await _remember(ctx)
    # on a timer shared with the steps ending near it (a tool's nested step: its own)
    bound = rt.deadlines.bound(seconds, _step_timeout(ctx), alone=toolkit.nested())
    try:
        async with bound:
            return await _answer(job, value, cfg)
    except TimeoutError:
        raise ExecutorError(f"the LLM step ran past its deadline of {seconds:g} s") from None


async def _answer(job: Job, value: Any, cfg: dict[str, Any]) -> Any:
    ctx, config = job.ctx, job.rt.config
    store = ctx.services.store
    contract = contract_from(cfg)
    question = to_text(value)
    if cfg.get("template"):
        question = await _render(ctx, cfg["template"], value)
    turns = min(int(cfg.get("history") or 0), config.history_turns)
    pairs, summary = await history.load(store, ctx.message, job.rt.reads) if turns else ([], None)
    if turns and summary is None and history.is_full(pairs, turns, config.history_max_tokens):
        if capturing():  # the ctx inspector changes nothing: it says a fold comes first
            job.stats["fold_pending"] = True
        else:  # never slide: fold the whole history into one summary pair (tmy.llm.fold)
            pairs = await fold.fold(job, pairs, turns, config.history_max_tokens)
    permissions = _permissions(cfg.get("permissions"))
    tools = _tools(job, cfg["tools"], permissions) if cfg.get("tools") else []
    protocol = cfg.get("tool_protocol") or "native"
    system = prompt.merge_system(cfg.get("system"))
    offered = [t for t in tools if t.offered]  # a source's denied tools are never shown
    tool_text = toolkit.text_protocol(offered) if offered and protocol == "text" else ""

    def system_for(hint: str | None) -> str:
        return prompt.build_system(
            config.scene_prompts["general"],
            system,
            ctx.rule.intent,
            tool_text,
            hint,
            contract.instruction(),
        )

    shots = prompt.few_shot(cfg.get("messages"))
    memory = _memory(job, cfg.get("memory"))
    recalled = ""  # -- long-term memory: a block in the tail, never the prefix
    if memory is not None:
        recalled = await memory[0].before_request(job, memory[1], to_text(value))
    passages = ""  # -- knowledge passages (none asked: no coroutine to await)
    if cfg.get("knowledge") is not None:
        passages = await knowledge.consult(job.rt.knowledge, ctx, cfg["knowledge"], to_text(value))
    tail = await _tail(ctx, cfg, question, recalled, passages)
    messages = prompt.layout(system_for(None), shots, pairs, tail)
    parts = await _pictures(job, cfg) if images.wanted(cfg) else None
    if parts:  # the question with its pictures: OpenAI's content parts
        messages[-1]["content"] = [{"type": "text", "text": tail}, *parts]
    job.prefix_len = len(messages) - 1 - 2 * len(pairs)
    job.history_len = 2 * len(pairs)
    plan = Plan(
        messages=messages,
        system_for=system_for,
        contract=contract,
        tools=tools,
        protocol=protocol,
        permissions=permissions,
        retries=int(cfg.get("retries") if cfg.get("retries") is not None else 2),
        max_turns=int(cfg.get("max_tool_turns") or config.max_tool_turns),
        temperature=cfg.get("temperature"),
        default_temperature=GENERAL_TEMPERATURE,
        max_tokens=cfg.get("max_tokens"),
        stream=bool(cfg["stream"]) if cfg.get("stream") is not None else None,
        on_delta=_on_delta(ctx, cfg.get("stream"), contract),
    )
    result, text = await converse(job, plan)
    if turns:  # the tail as it was sent: the next request extends this one exactly
        await history.append(store, ctx.message, tail, text, summary)
    if memory is not None:  # long-term memory: this turn counts towards the dialogue summary
        await memory[0].after_answer(job, memory[1], question, text)
    return result


async def _tail(
    ctx: StepContext, cfg: dict[str, Any], question: str, recalled: str, passages: str
) -> str:
    """The dynamic tail: the quoted message (``quote:``), knowledge passages, memory,
    time and sender, question."""
    if cfg.get("quote"):
        reply_to = (await ctx.scope(("REPLY_TO",))).get("REPLY_TO")
        question = prompt.with_quote(reply_to, question)
    if not cfg.get("context", True):
        return prompt.before(question, passages, recalled)
    m = ctx.message
    who = f"{m.user_name} (id {m.user})" if m.user_name != m.user else m.user
    return prompt.tail(
        question,
        now=str(ctx.local("NOW", "")),
        who=who,
        where=f"chat {m.chat} on {m.platform}",
        memory=recalled,
        knowledge=passages,
    )


async def _pictures(job: Job, cfg: dict[str, Any]) -> list[Any]:
    """The step's ``image_url`` parts; a computed model without vision is refused here."""
    if not images.wanted(cfg):
        return []
    if not job.model.vision:
        raise ExecutorError(
            f"model {job.model.name!r} takes no pictures "
            f"(llm.models.{job.model.name}.vision: false), and the step sends some"
        )
    parts = await images.image_parts(job.ctx, cfg, job.rt.config)
    job.stats["images"] = len(parts)
    return parts


def _on_delta(
    ctx: StepContext, mode: Any, contract: Contract
) -> Callable[[str], Awaitable[None]] | None:
    """Where the answer's pieces go as they come: the message's stream sink, when the
    step streams (``stream: true`` or ``chunks``) and the adapter gave one.

    A step with an output contract that can reject the answer (``returns:`` other
    than ``str``, ``choices:``, ``output:``) shows nothing while it streams: its
    first attempt may be refused and re-asked, and what a sink shows cannot be
    taken back. The reply goes out whole once the answer passed. The text shown
    stays within ``limits.max_reply_chars`` (:class:`tmy.llm.streaming.Budget`).
    """
    sink = ctx.message.stream
    if not mode or sink is None or toolkit.nested():  # a tool's answer is not the reply
        return None
    if contract.kind not in UNFAILING:
        return None
    return Budget(sink, mode == "chunks", ctx.services.settings.max_reply_chars)


async def _remember(ctx: StepContext) -> None:
    """Keep the message this step answers: ``ctx`` without a query inspects it again."""
    try:
        question = ctx.local("QUESTION")
        tally = runtime_of(ctx.services).tally
        await history.remember_last(ctx.services.store, ctx.message, ctx.rule.id, question, tally)
    except TmyError as exc:  # an inspector's convenience must not fail the answer
        log.warning("llm.last_not_kept", uri=ctx.uri, error=str(exc))


def _memory(job: Job, raw: Any) -> tuple[Recall, RecallSpec] | None:
    """The step's ``memory:`` (checked again: it may be computed) and who recalls it, or None."""
    if not raw:
        return None
    try:
        spec = recall_spec(raw)
    except ValueError as exc:  # a computed memory: value that is wrong: a STEP_ERROR
        raise ExecutorError(str(exc)) from None
    if spec is None:
        return None
    provider = job.rt.recall
    if provider is None:
        raise ExecutorError("memory: needs the memory extension, which is not installed")
    return provider, spec


def _tools(job: Job, names: Any, permissions: list[str]) -> list[toolkit.Tool]:
    """The tools the step offers: its rules and executors, then the plugged sources' tools
    (``mcp:…`` patterns, read from each source now: tmy.llm.sources)."""
    plain, patterns = sources.split(names)
    tools = toolkit.resolve(plain, job.ctx.services)
    if patterns:
        taken = {t.name for t in tools}
        tools += sources.resolve(patterns, job.rt.tool_sources, taken, permissions)
    return tools


def _permissions(value: Any) -> list[str]:
    """Permissions computed at run time (an expression) are checked here, as a STEP_ERROR."""
    try:
        return toolkit.check_permissions(value)
    except ValueError as exc:
        raise ExecutorError(str(exc)) from None


async def _render(ctx: StepContext, name: str, value: Any) -> str:
    """The question rendered by the Jinja2 file ``name``; its errors name file:line."""
    path = jinja.template_path(name, ctx.rule.file, ctx.services.settings.rules)
    step = next((s for s in ctx.rule.steps if s.uri == ctx.uri), None)
    used_by = f" (used by {step.file}:{step.line}, step {ctx.uri})" if step else ""
    names = jinja.template_names(path, used_by)
    variables = await ctx.scope(names)
    scope = {n: variables[n] for n in names if n in variables}
    scope["input"] = value
    return jinja.render_template(path, scope, used_by)
