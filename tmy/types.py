"""The extension contracts, stated as types in one place.

Everything tmy can be extended with — an executor, a step hook, a chat
platform adapter, an operator command, an extension bundling them — is a
Protocol or an alias here, so a plugin author reads one file to learn what to
write, and a type checker holds both sides to it. The concrete classes live
where they are implemented (:class:`tmy.extension.Extension`,
:class:`tmy.command.Command`, the engine's step context); their Protocols here
are :class:`ExtensionLike` and :class:`CommandLike` (what the app and the front
ends read of one), and :class:`AppLike` is the open app as a command sees it.
This module imports none of them at run time, so any layer may import it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # names for annotations only: this module must stay importable from any layer
    import httpx
    import structlog

    from tmy.command import Arg, Command, Invocation, Result
    from tmy.config import Settings
    from tmy.engine.core import Engine
    from tmy.engine.run import Run
    from tmy.engine.switch import ChatSwitch
    from tmy.executors.registry import ExecutorSpec, Registry
    from tmy.extension import ConfigSection, RuleKey, StepKey
    from tmy.message import Message, Outgoing, Reply, StepRecord, Target
    from tmy.reload import ReloadResult
    from tmy.rulebook.model import Rule, Rulebook, Step
    from tmy.store.base import Store


class Services(Protocol):
    """What every run and executor can reach: settings, the store, executors, the HTTP client.

    ``state`` holds what each extension's lifespan yielded, by extension name
    (read-only); an extension reads its own through a typed accessor
    (``tmy.llm.runtime_of(services)``).
    """

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def state(self) -> Mapping[str, Any]: ...

    @property
    def http(self) -> httpx.AsyncClient: ...

    @property
    def engine(self) -> Engine | None:
        """The engine built on these services (None until it is): its ``rulebook``, and
        ``run_rule`` for a step that runs another rule (an LLM tool call)."""
        ...


class StepContext(Protocol):
    """The run as an executor sees it, besides its input and options (seed 004).

    Everything a built-in executor reads from its run is here, so a plugin can do
    what they do without reaching into the engine.
    """

    @property
    def message(self) -> Message: ...

    @property
    def rule(self) -> Rule:
        """The rule being run (read-only: ``id``, ``intent``, ``file``, ``session`` …)."""
        ...

    @property
    def trace_id(self) -> str: ...

    @property
    def step_timeout(self) -> float | None:
        """The step's own ``timeout:`` in seconds, None when it sets none.

        The engine then uses ``services.settings.step_timeout``; an executor may
        pick its own default (HTTP: 10 s).
        """
        ...

    @property
    def services(self) -> Services: ...

    @property
    def record(self) -> StepRecord: ...

    @property
    def uri(self) -> str: ...

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger: ...

    async def get(self, path: str) -> Any:
        """Read a variable position (declared variables come from the store)."""
        ...

    async def set(self, path: str, value: Any) -> None:
        """Write a variable position (declared variables are written through)."""
        ...

    async def scope(self, names: Iterable[str]) -> Mapping[str, Any]:
        """The run's variables, read-only, with the declared ones among ``names`` loaded.

        What a compiled template or expression evaluates against
        (``value.evaluate(await ctx.scope(value.names))``).
        """
        ...

    def local(self, name: str, default: Any = None) -> Any:
        """A run local's value now — QUESTION, NOW, USER … (seed 004's and who/where:
        no declared variable takes their names, so nothing is read from the store);
        ``default`` when the run has none of that name."""
        ...

    def add_record(self, record: StepRecord) -> None:
        """List a sub-step (a tool call) in the run's records, so ``run.done`` shows it."""
        ...

    def within(self, uri: str, record: StepRecord) -> StepContext:
        """A context for a sub-step of this one (its own ``uri`` and record), same run."""
        ...


Executor = Callable[[Any, dict[str, Any], StepContext], Awaitable[Any]]
"""``async def run(value, cfg, ctx) -> result``: the whole executor contract (seed 004).

``value`` is the step input, ``cfg`` the executor's options with templates and
expressions evaluated, ``ctx`` the run. The result becomes ``STEP_RESULT``; an
exception becomes ``STEP_ERROR``.
"""

Handler = Callable[["Message"], Awaitable["Reply"]]
"""The engine's entry point an adapter is started with: a Message in, its Reply out."""

Answer = Callable[["Message"], "Reply | Callable[[], Awaitable[Reply]]"]
"""A handler's way to answer at once (:func:`answer_of`): the Reply itself when none of
the work awaits (a FAQ answer), else what makes the awaitable that answers (called and
awaited once, on the caller's task: nothing to await exists before)."""


def answer_of(handle: Handler) -> Answer:
    """How an adapter asks ``handle`` for a reply when it can take one at once:
    ``Engine.handle``'s engine offers :meth:`tmy.engine.core.Engine.answer` (no task, no
    coroutine for a FAQ answer); any other handler is asked later (a partial of it)."""
    owner = getattr(handle, "__self__", None)
    for base in type(owner).__mro__ if owner is not None else ():
        if "answer" in base.__dict__:  # the class that has answer: handle is its own
            if base.__dict__.get("handle") is getattr(handle, "__func__", None):
                return owner.answer  # type: ignore[no-any-return]
            break  # a handle overridden below it: asked as it is
    return lambda message: partial(handle, message)


if TYPE_CHECKING:
    from aiohttp.web import RouteDef as Route
else:
    Route = Any  # aiohttp is not imported for an annotation: the CLI starts without it
"""An ``aiohttp.web`` route definition (``web.get(path, handler)``), mounted on the listener."""


class PlatformApi(Protocol):
    """What a platform can do for one message's run (``Message.api``, set by its adapter).

    Both are asked only when a run needs them, so a message that never uses its
    pictures or its quote costs the platform nothing. An optional attribute
    ``trusted_media_hosts: tuple[str, ...]`` names hosts this platform's
    ``media_source`` URLs are built on by the adapter itself (Telegram: its
    ``api_base``): tmy downloads from them even when they are private addresses,
    which :mod:`tmy.media` otherwise refuses (``limits.media_private_hosts``).
    """

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        """Where to download ``attachment`` (a :class:`tmy.message.Attachment`): its URL
        and the headers that request needs (a Telegram file path with the bot token
        in it, say). Raises :class:`tmy.errors.TmyError` when it cannot be had."""
        ...

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        """The message ``message`` replies to, as ``{text, user, id}`` (REPLY_TO), from
        what the adapter saw or the platform's API (OneBot ``get_msg``); None unknown."""
        ...


class StreamSink(Protocol):
    """Where a ``stream:`` LLM step sends its answer as it grows (``Message.stream``).

    The adapter made it for this message: the OpenAI facade writes SSE chunks,
    Telegram and Discord edit one message at most once a second, OneBot sends
    whole sentences (only when ``chunks`` is true: it cannot edit). When the run
    ends the adapter still gets the whole :class:`Reply` and finishes with it.
    """

    async def delta(self, text: str, *, chunks: bool = False) -> None:
        """``text`` is the next piece of the answer (not the whole answer so far)."""
        ...


@runtime_checkable
class StepHook(Protocol):
    """What a step key added by an extension does when a step carries it (``when_llm:``).

    The engine calls both methods of every hook of a step; subclass this class and
    override the one you need (the defaults run the step once, as if the key were
    absent)::

        class WhenSunny(tmy.StepHook):
            async def before(self, run, step, record):
                return await is_sunny()

    ``run.context(step, step.uri, record)`` is the step's :class:`StepContext`,
    for a hook that reads the run's variables or calls an executor.
    """

    async def before(self, run: Run, step: Step, record: StepRecord) -> bool:
        """Whether the step runs at all (False skips it, as a false ``when:`` does)."""
        return True

    async def again(self, run: Run, step: Step, record: StepRecord, count: int) -> bool:
        """After the step's ``count``-th run: whether to run it once more."""
        return False


@runtime_checkable
class Adapter(Protocol):
    """A chat platform: its events in as Messages, Replies and sends out."""

    name: str

    async def start(self, handle: Handler) -> None:
        """Begin receiving; return once the adapter is started (it may still be connecting)."""
        ...

    async def stop(self) -> None:
        """Stop accepting new events; runs in flight are drained by the daemon."""
        ...

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` to ``target`` (with ``outgoing``'s images, files, mentions and
        buttons where the platform has them); raise AdapterError naming the platform's error.

        The daemon passes ``outgoing`` only when a run produced some, so an adapter
        written before it existed keeps working for text."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"state", "last_event", "error", …}`` for ``GET /healthz``."""
        ...

    def routes(self) -> list[Route]:
        """Routes this adapter needs on the daemon's one web server (``[]``: none)."""
        ...


class CommandLike(Protocol):
    """An operator command, defined once, reached from the CLI, ``.tmy`` chat and HTTP.

    What the three front ends and the app read of one (:class:`tmy.Command` is the
    concrete, frozen form a command is written as).
    """

    @property
    def name(self) -> str: ...

    @property
    def help(self) -> str: ...

    @property
    def needs(self) -> Literal["app", "daemon", "settings"]:
        """What must be open to run it: the app, a running daemon, or only the settings."""
        ...

    @property
    def admin(self) -> bool:
        """Chat refuses it to non-admins."""
        ...

    @property
    def chat_admin(self) -> bool:
        """An admin of the chat by the platform's roles (``admins_from``) may run it there."""
        ...

    @property
    def fronts(self) -> frozenset[str]:
        """Where it is reachable: ``cli``, ``chat``, ``http``."""
        ...

    @property
    def description(self) -> str: ...

    @property
    def json_help(self) -> str: ...

    @property
    def quiet(self) -> bool: ...

    @property
    def misuse(self) -> str:
        """The answer to a missing required argument."""
        ...

    def args_for(self, front: str) -> tuple[Arg, ...]:
        """The arguments that exist on ``front``."""
        ...

    def run(self, invocation: Invocation) -> Awaitable[Result]:
        """Run it once; the result renders as text and as JSON."""
        ...


class ExtensionLike(Protocol):
    """A bundle of executors, rule and step keys, commands, config and a lifespan.

    What the app reads of one (:class:`tmy.Extension` is the concrete, frozen form).
    """

    @property
    def name(self) -> str: ...

    @property
    def commands(self) -> tuple[Command, ...]: ...

    @property
    def rule_keys(self) -> Mapping[str, RuleKey]: ...

    @property
    def step_keys(self) -> Mapping[str, StepKey]: ...

    @property
    def config(self) -> ConfigSection | None:
        """The top-level config section it owns, or None."""
        ...

    def executors(self, settings: Settings) -> Iterable[ExecutorSpec]:
        """The executors it adds, given the validated settings (checks may depend on config)."""
        ...

    def lifespan(self, services: Services) -> AbstractAsyncContextManager[Any]:
        """What it opens when the app starts and closes when it stops; yields its state."""
        ...

    def serving(self, services: Services) -> AbstractAsyncContextManager[Any]:
        """What it runs only while the app serves (the daemon), after the adapters start."""
        ...


class AppLike(Protocol):
    """The open app as a command sees it (``Invocation.app``; :class:`tmy.app.App` once open).

    Commands sit below the app in the layers, so they type it by this Protocol
    instead of importing :mod:`tmy.app`.
    """

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def rulebook(self) -> Rulebook: ...

    @property
    def switch(self) -> ChatSwitch:
        """The chats ``.tmy off`` keeps the bot quiet in."""
        ...

    @property
    def commands(self) -> Mapping[str, Command]:
        """The app's command table, by name."""
        ...

    async def reload(self, reason: str) -> ReloadResult:
        """Reload the plugins and rules now (``reload``; ``reason`` is logged)."""
        ...
