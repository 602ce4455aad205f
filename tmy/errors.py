"""The exception tree of tmy.

Every error tmy raises on purpose derives from :class:`TmyError`, so a caller
can catch "anything tmy refused" in one place while the subclasses say whose
fault it was. Classes defined beside the code that raises them are shown with
their module::

    TmyError
    ├── ConfigError        the config file or an environment override is wrong
    ├── RuleError          a rules file is wrong (carries file and line)
    │   └── RuleErrors     several, found in one load; each is reported
    ├── EvalError          a template, expression or variable path failed
    │   ├── PathError      a variable path is malformed or points nowhere
    │   └── ExpressionError  invalid, refused (unsafe / too costly) or failed
    ├── ExecutorError      an executor failed while running a step (STEP_ERROR)
    │   ├── LLMError       a model call failed                       (tmy.llm.wire)
    │   ├── DryRun         the inspector caught a request; run stops (tmy.llm.exchange)
    │   └── MemoryFull     a shared memory scope is at its bound     (tmy.memory.entries)
    ├── StoreError         the store (SQLite / Redis) failed or refused a value
    │   ├── LeaseLost      a lease expired or was taken before its holder wrote
    │   └── ValueRefused   a key, value or ttl no store can hold (nothing was sent)
    ├── AdapterError       a chat-platform adapter failed
    │   └── ActionFailed   a OneBot action failed       (tmy.adapters.onebot.connection)
    ├── CommandError       an operator command used wrongly (exit 2) (tmy.command)
    ├── ContractError      a model's answer broke its output contract   (tmy.llm.contracts)
    │                      (the exchange's retry loop makes it a retry hint)
    ├── OpenAIError        the OpenAI facade refuses a request (tmy.adapters.openai.payload)
    │                      (rendered as its HTTP error response)
    ├── EmbeddingError     the embeddings endpoint failed            (tmy.memory.embeddings)
    ├── McpError           an MCP server is unknown, down, or a call failed (tmy.mcp.servers)
    │   └── McpTimeout     a tool did not answer within its timeout
    ├── UnreadableDocument a knowledge-base file cannot be read      (tmy.knowledge.readers)
    ├── MediaError         a picture or file could not be had: too large,
    │                      refused, not found                     (tmy.media.dataurl)
    ├── BodyTooLarge       a decoded HTTP body passed its cap        (tmy.bodies)
    └── BadEncoding        an HTTP body in an encoding tmy does not decode (tmy.bodies)

Outside the tree on purpose: internal control-flow signals that never leave
the function or module that raises them — ``StepFailed`` (tmy.engine.run:
a step ended with STEP_ERROR, caught by the scheduler), and the private
``_Failed`` (tmy.llm.client), ``_Refused`` (tmy.llm.tools), ``PostFailed``
(tmy.llm.transport: a provider request failed below HTTP, made an LLMError by the
client), ``FnFailed`` (tmy.store.sqlite.connection), ``_GiveUp`` (tmy.yamlfile.fast:
a line outside the fast reader's subset; libyaml reads the file), and the web
console's ``Refused`` (tmy.console.web: a handler's answer with an HTTP status,
rendered as the error page), ``FormError`` (tmy.console.playground: a form that
cannot be sent, shown back on the form) and ``Stopped`` (tmy.adapters.fairness.step:
a queued send's step the queue's close cancelled, handed to its ``on_stop``).

Messages name the culprit (the file and line, the variable path, the key) and,
where there is one, the fix.
"""

from __future__ import annotations


class TmyError(Exception):
    """Root of every error tmy raises on purpose."""


class ConfigError(TmyError):
    """The configuration (file or environment) is invalid."""


class RuleError(TmyError):
    """A rules file is invalid; ``file`` and ``line`` say where."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        return f"{where}{self.message}"


class RuleErrors(RuleError):
    """Several rule errors found in one load; each is reported."""

    def __init__(self, errors: list[RuleError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


class EvalError(TmyError):
    """A template, expression or variable path could not be evaluated."""


class PathError(EvalError):
    """A variable path is malformed, or reading it found nothing there."""


class ExpressionError(EvalError):
    """An expression is invalid, refused (unsafe / too costly) or failed."""


class ExecutorError(TmyError):
    """An executor failed; its message becomes ``STEP_ERROR``."""


class StoreError(TmyError):
    """The store failed (unreachable, locked too long) or refused a value."""


class LeaseLost(StoreError):
    """A lease (``Store.lock``) was lost — expired while its holder was paused or
    cut off, or taken by another holder — so a write fenced by it was refused
    and nothing was written. ``key`` names the lease."""

    def __init__(self, message: str, key: str = "") -> None:
        self.key = key
        super().__init__(message)


class ValueRefused(StoreError):
    """A key, value or ttl was refused before anything reached the store (the
    store itself is healthy: ``/healthz`` does not count these as write failures)."""


class AdapterError(TmyError):
    """A chat-platform adapter failed."""
