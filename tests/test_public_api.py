"""The public surface is deliberate: what `tmy` exports is listed and importable."""

import tmy
from tmy.errors import ConfigError, EvalError, RuleError, StoreError, TmyError


def test_exported_members() -> None:
    assert sorted(tmy.__all__) == sorted(
        [
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
    )
    for name in tmy.__all__:
        assert hasattr(tmy, name), name


def test_error_tree_has_one_root() -> None:
    for cls in (ConfigError, RuleError, EvalError, StoreError):
        assert issubclass(cls, TmyError)
    err = RuleError("unknown plugin 'X'", file="rules/a.yaml", line=7)
    assert str(err) == "rules/a.yaml:7: unknown plugin 'X'"
