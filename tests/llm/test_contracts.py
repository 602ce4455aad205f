"""Output contracts (tmy/llm/contracts.py): a JSON Schema ``output:`` is checked once and
its validator kept per schema — what it accepts and refuses is the schema's, always the
schema as it is now."""

from __future__ import annotations

import pytest

from tmy.errors import ExecutorError
from tmy.llm import contracts
from tmy.llm.contracts import ContractError, contract_from


def summary_schema(limit: int) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {"summary": {"type": "string", "maxLength": limit}},
        "required": ["summary"],
    }


def test_an_output_schema_accepts_and_refuses_as_the_schema_says() -> None:
    contract = contract_from({"output": summary_schema(5)})
    assert contract.parse('{"summary": "short"}') == {"summary": "short"}
    with pytest.raises(ContractError, match="summary"):
        contract.parse('{"summary": "far too long"}')
    with pytest.raises(ContractError, match="top level"):
        contract.parse('{"other": 1}')


def test_a_schema_that_is_not_one_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ExecutorError, match="not a valid JSON Schema"):
            contract_from({"output": {"type": "no-such-type"}})


def test_one_validator_per_schema_and_a_changed_schema_is_a_new_one() -> None:
    schema = summary_schema(5)
    first = contracts._validator(schema)
    assert contracts._validator(summary_schema(5)) is first  # the same schema: kept
    schema["properties"]["summary"]["maxLength"] = 50  # type: ignore[index]
    contract = contract_from({"output": schema})
    assert contract.parse('{"summary": "now this fits"}') == {"summary": "now this fits"}
    assert contracts._validator(summary_schema(5)) is first  # the kept copy did not change
    with pytest.raises(ContractError):
        contract_from({"output": summary_schema(5)}).parse('{"summary": "now this fits"}')


def test_a_schema_with_a_null_is_checked_and_used_but_not_kept() -> None:
    schema = {"type": "object", "properties": {"x": {"default": None, "type": "integer"}}}
    contract = contract_from({"output": schema})
    assert contract.parse('{"x": 3}') == {"x": 3}
    with pytest.raises(ContractError):
        contract.parse('{"x": "three"}')
    assert contracts._validator(schema) is not contracts._validator(schema)
