"""One rule run's state, and the run as an executor sees it (:class:`StepContext`).

A :class:`Run` is made per message (plain classes with slots: building one is
on the hot path); the scheduler (:mod:`tmy.engine.scheduler`) walks its chain
and :mod:`tmy.engine.execute` runs each step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tmy.engine.variables import Variables
from tmy.logs import get_logger
from tmy.message import Message, StepRecord
from tmy.rulebook.model import Rule, Step
from tmy.values.paths import parse_path

if TYPE_CHECKING:
    import structlog

    from tmy.engine.services import Services

log = get_logger("tmy.run")


class Run:
    """The state of one rule run (a plain class: one is made per message)."""

    __slots__ = ("failed", "message", "records", "rule", "services", "stopped", "trace_id", "vars")

    def __init__(
        self, rule: Rule, message: Message, trace_id: str, vars: Variables, services: Services
    ) -> None:
        self.rule = rule
        self.message = message
        self.trace_id = trace_id
        self.vars = vars
        self.services = services
        self.records: list[StepRecord] = []
        self.failed = False
        self.stopped = False  # a step's ``stop:`` held: the chain ended normally

    @property
    def locals(self) -> dict[str, Any]:
        return self.vars.locals

    def context(self, step: Step, uri: str, record: StepRecord) -> StepContext:
        """The run as ``step``'s executor sees it (for a step hook that acts for the step)."""
        return StepContext(self, step, uri, record)


class StepContext:
    """What an executor can reach besides its input and options (:class:`tmy.types.StepContext`)."""

    # the run's parts an executor reads most, kept here (not properties: an LLM step read
    # ``message`` and ``services`` a dozen times a call)
    __slots__ = ("message", "record", "rule", "run", "services", "step", "uri")

    def __init__(self, run: Run, step: Step, uri: str, record: StepRecord) -> None:
        self.run = run
        self.step = step
        self.uri = uri
        self.record = record
        self.message = run.message
        self.rule = run.rule
        self.services = run.services

    @property
    def vars(self) -> Variables:
        return self.run.vars

    @property
    def trace_id(self) -> str:
        return self.run.trace_id

    @property
    def step_timeout(self) -> float | None:
        return self.step.timeout

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger:
        return log.bind(uri=self.uri)

    async def get(self, path: str) -> Any:
        """Read a variable position (declared variables come from the store)."""
        return await self.run.vars.read(parse_path(path))

    async def set(self, path: str, value: Any) -> None:
        """Write a variable position (declared variables are written through)."""
        await self.run.vars.write(parse_path(path), value)

    async def scope(self, names: Iterable[str]) -> Mapping[str, Any]:
        """The run's variables (read-only), the declared ones among ``names`` loaded."""
        await self.run.vars.fetch(names)
        return self.run.vars

    def local(self, name: str, default: Any = None) -> Any:
        """A run local's value now (:class:`tmy.types.StepContext`)."""
        return self.run.vars.locals.get(name, default)

    def add_record(self, record: StepRecord) -> None:
        """List a sub-step (a tool call) in the run's records, so ``run.done`` shows it."""
        self.run.records.append(record)

    def within(self, uri: str, record: StepRecord) -> StepContext:
        """A context for a sub-step of this one (its own ``uri`` and record), same run."""
        return StepContext(self.run, self.step, uri, record)


class StepFailed(Exception):
    """Internal: a step ended with STEP_ERROR."""
