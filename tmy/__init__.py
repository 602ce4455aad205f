"""tmy: a chat-bot daemon driven by YAML trigger-word rules."""

from tmy.errors import (
    AdapterError,
    ConfigError,
    EvalError,
    ExecutorError,
    ExpressionError,
    PathError,
    RuleError,
    StoreError,
    TmyError,
)
from tmy.message import Message, Reply, StepRecord

__version__ = "0.1.0"

__all__ = [
    "AdapterError",
    "ConfigError",
    "EvalError",
    "ExecutorError",
    "ExpressionError",
    "Message",
    "PathError",
    "Reply",
    "RuleError",
    "StepRecord",
    "StoreError",
    "TmyError",
    "__version__",
]
