"""tmy: a chat-bot daemon driven by YAML trigger-word rules.

What a plugin, extension or adapter author needs is importable from here::

    from tmy import Extension, ExecutorSpec, Option, StepContext

* executors: :class:`Registry` (a ``plugins/`` file's ``register(registry)``),
  :class:`Option`, :class:`ExecutorSpec`, the :data:`Executor` signature and the
  :class:`StepContext` it receives;
* extensions (installed packages, entry-point group ``tmy.extensions``):
  :class:`Extension`, :class:`RuleKey`, :class:`StepKey` with its
  :class:`StepHook`, :class:`ConfigSection`, and operator commands
  (:class:`Command`, :class:`Arg`, :class:`Invocation`, :class:`Result`);
* what a run reaches: :class:`Services` (settings, store, registry, HTTP client);
* adapters: the :class:`Adapter` protocol, the :data:`Handler` it is started with and
  the :data:`Route` type of the web routes it mounts;
* the data: :class:`Message`, :class:`Reply`, :class:`StepRecord`, :class:`Target`,
  :class:`Store` and :data:`MISSING`;
* the error tree under :class:`TmyError` (drawn in :mod:`tmy.errors`);
* the test harness: :class:`Bot` and :func:`serving` (:mod:`tmy.testing`).
"""

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.errors import (
    AdapterError,
    ConfigError,
    EvalError,
    ExecutorError,
    ExpressionError,
    LeaseLost,
    PathError,
    RuleError,
    RuleErrors,
    StoreError,
    TmyError,
    ValueRefused,
)
from tmy.executors.registry import ExecutorSpec, Option, Registry
from tmy.extension import ConfigSection, Extension, RuleKey, StepKey
from tmy.message import Message, Reply, StepRecord, Target
from tmy.store.base import MISSING, Store
from tmy.types import Adapter, Executor, Handler, Route, Services, StepContext, StepHook

__version__ = "0.1.0"

__all__ = [
    "MISSING",
    "Adapter",
    "AdapterError",
    "Arg",
    "Bot",
    "Command",
    "CommandError",
    "ConfigError",
    "ConfigSection",
    "EvalError",
    "Executor",
    "ExecutorError",
    "ExecutorSpec",
    "ExpressionError",
    "Extension",
    "Handler",
    "Invocation",
    "LeaseLost",
    "Message",
    "Option",
    "PathError",
    "Registry",
    "Reply",
    "Result",
    "Route",
    "RuleError",
    "RuleErrors",
    "RuleKey",
    "Services",
    "StepContext",
    "StepHook",
    "StepKey",
    "StepRecord",
    "Store",
    "StoreError",
    "Target",
    "TmyError",
    "ValueRefused",
    "__version__",
    "serving",
]

_TESTING = ("Bot", "serving")


def __getattr__(name: str) -> object:
    """``tmy.Bot`` and ``tmy.serving``, imported on first use.

    :mod:`tmy.testing` sits at the top of the layers (it opens whole apps), so
    importing it here, while any ``tmy`` submodule is being imported, would
    import the whole package from inside itself.
    """
    if name in _TESTING:
        import tmy.testing  # top layer: deferred, see above

        value = getattr(tmy.testing, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tmy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_TESTING})
