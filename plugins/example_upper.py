"""An example user executor: UPPER upper-cases its input and adds a suffix.

A plugin file defines ``register(registry)`` and adds its executors by name;
everything it needs comes from ``tmy`` (the executor contract is
:data:`tmy.Executor`: ``async def run(value, cfg, ctx: tmy.StepContext)``).
``options`` declares the step keys the executor accepts: a rule that uses an
unknown key (or misses a required one) is refused when the rules load, with
the file and line. ``takes=str`` asks the engine to hand over text (bytes are
decoded as UTF-8, other values rendered as they would be in a reply).
"""

from typing import Any

from tmy import Option, Registry, StepContext


async def upper(value: str, cfg: dict[str, Any], ctx: StepContext) -> str:
    return value.upper() + cfg["suffix"]


def register(registry: Registry) -> None:
    registry.add(
        "UPPER",
        upper,
        takes=str,
        options={"suffix": Option(str, default="", doc="text appended to the result")},
        doc="upper-cases its input",
        pure=True,  # no I/O: "save: x" of a step reading x is one atomic store update
    )
