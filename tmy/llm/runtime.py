"""The LLM answerer's state for one app, and the slot long-term memory plugs into.

The extension's lifespan (:mod:`tmy.llm.extension`) creates one :class:`Runtime`
per app and yields it; the app keeps it as ``services.state["llm"]``, read
only through :func:`runtime_of`.

tmy.llm knows nothing of tmy.memory (memory sits above it: its dialogue
summaries use the LLM exchange). The ``memory:`` option of an LLM step is
declared and checked here — its schema is config (:mod:`tmy.config.memory`) —
but what it *does* comes from a :class:`Recall` provider: the memory
extension's lifespan plugs one into the runtime with :meth:`Runtime.recall_by`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Protocol

from tmy.config.llm import LLMConfig
from tmy.config.memory import RecallSpec
from tmy.errors import ConfigError, ExecutorError
from tmy.llm.deadline import Deadlines
from tmy.llm.tally import Tally
from tmy.llm.transport import AiohttpPost, HttpxPost, Post
from tmy.store.joined import ReadBatch
from tmy.types import Services

if TYPE_CHECKING:  # annotations only: exchange imports this module
    from tmy.llm.exchange import Job

STATE_KEY = "llm"  # the extension's name: its lifespan's yield is services.state["llm"]


class Recall(Protocol):
    """Long-term memory as an LLM step with ``memory:`` sees it (tmy.memory implements it).

    Neither method fails the step for a store or endpoint failure: memory is
    best effort ("better none than wrong"); both see the step through ``job``.
    """

    async def before_request(self, job: Job, spec: RecallSpec, query: str) -> str:
        """The block for the request's dynamic tail ('' when nothing is relevant)."""
        ...

    async def after_answer(self, job: Job, spec: RecallSpec, ask: str, answer: str) -> None:
        """Record the finished turn (towards the conversation's summary)."""
        ...

    def ctx_lines(self, details: Mapping[str, Any]) -> list[str]:
        """``#`` lines for ``ctx``: what the step recalled (``record.extra["memory"]``), and why."""
        ...


def owns_http(services: Services) -> bool:
    """Whether ``services`` made their HTTP client themselves (no one handed one in)."""
    # an app given http= (rule tests' canned answers) or a dry run's recording client
    # must answer the LLM too, so those keep going through it
    return services.owns_http


@dataclass
class Runtime:
    """The LLM answerer's share of one app: the validated config, the services, memory's
    slot, the usage counters not written yet (:mod:`tmy.llm.tally`) and how requests go
    out (:mod:`tmy.llm.transport`).

    Made without a tally or a transport (a derived runtime, a test), it writes usage at
    every call and sends through ``services.http``.
    """

    config: LLMConfig
    services: Services
    _recall: Recall | None = field(default=None, repr=False)
    tally: Tally = field(default=None, repr=False)  # type: ignore[assignment]
    post: Post = field(default=None, repr=False)  # type: ignore[assignment]
    reads: ReadBatch = field(default_factory=ReadBatch, repr=False)  # history reads, joined
    deadlines: Deadlines = field(default_factory=Deadlines, repr=False)  # steps' shared timers
    # what other extensions plug in while the app is open (tmy.llm imports none of them):
    # sources of tools beside rules and executors (MCP servers: tmy.llm.tools.ToolSource)
    # and the knowledge base an LLM step's knowledge: reads (tmy.llm.knowledge.Knowledge)
    _tool_sources: dict[str, Any] = field(default_factory=dict, repr=False)
    _knowledge: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.tally is None:
            self.tally = Tally(lambda: self.services.store, write_through=True, eager=True)
        if self.post is None:
            self.post = HttpxPost(lambda: self.services.http)

    @classmethod
    def for_app(cls, config: LLMConfig, services: Services) -> Runtime:
        """An app's runtime: its own aiohttp session unless the app was given a client;
        usage written per interval, or at every call when a budget needs it."""
        budget = bool(config.per_user_daily_tokens or config.daily_tokens)
        eager = config.usage_flush_interval <= 0
        tally = Tally(lambda: services.store, write_through=budget or eager, eager=eager)
        post: Post = AiohttpPost() if owns_http(services) else HttpxPost(lambda: services.http)
        return cls(config, services, None, tally, post)

    @property
    def tz(self) -> tzinfo | None:
        """The daemon's timezone: usage counters roll over at its midnight."""
        return self.services.settings.tz

    @property
    def recall(self) -> Recall | None:
        """The long-term memory provider, when an extension plugged one in."""
        return self._recall

    def derive(self, services: Services, config: LLMConfig | None = None) -> Runtime:
        """The same answerer over other services (explain's dry run): same recall provider.

        The provider reaches the store through each step's own services, so a dry
        run's overlay store keeps memory's writes too.
        """
        derived = Runtime(config or self.config, services, self._recall)
        derived._tool_sources = self._tool_sources
        derived._knowledge = self._knowledge
        return derived

    @contextmanager
    def recall_by(self, provider: Recall) -> Iterator[Recall]:
        """Plug ``provider`` in for as long as the block runs (an extension's lifespan)."""
        if self._recall is not None:
            raise ConfigError("two extensions provide the LLM step's memory: recall")
        self._recall = provider
        try:
            yield provider
        finally:
            self._recall = None

    @property
    def tool_sources(self) -> Mapping[str, Any]:
        """The tool sources plugged in, by prefix (``mcp`` → tools named ``mcp:SERVER/TOOL``)."""
        return self._tool_sources

    @contextmanager
    def tools_from(self, prefix: str, source: Any) -> Iterator[Any]:
        """Offer ``source``'s tools (``PREFIX:…`` in a step's ``tools:``) while the block runs."""
        if prefix in self._tool_sources:
            raise ConfigError(f"two extensions provide the LLM step's {prefix}: tools")
        self._tool_sources[prefix] = source
        try:
            yield source
        finally:
            self._tool_sources.pop(prefix, None)

    @property
    def knowledge(self) -> Any:
        """The knowledge base provider (``knowledge:`` of an LLM step), when one is plugged in."""
        return self._knowledge

    @contextmanager
    def knowledge_by(self, provider: Any) -> Iterator[Any]:
        """Plug ``provider`` in as the knowledge base for as long as the block runs."""
        if self._knowledge is not None:
            raise ConfigError("two extensions provide the LLM step's knowledge:")
        self._knowledge = provider
        try:
            yield provider
        finally:
            self._knowledge = None


def runtime_of(services: Services) -> Runtime:
    """The app's LLM runtime (``services.state["llm"]``, set by the extension's lifespan)."""
    runtime = services.state.get(STATE_KEY)
    if not isinstance(runtime, Runtime):
        raise ExecutorError("the LLM extension is not installed in this app")
    return runtime
