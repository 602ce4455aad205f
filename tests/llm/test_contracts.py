"""Output contracts (tmy/llm/contracts.py): a JSON Schema ``output:`` is checked once and
its validator kept per schema — what it accepts and refuses is the schema's, always the
schema as it is now."""

from __future__ import annotations

import datetime

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


def test_a_schema_holding_what_json_cannot_is_never_served_another_schemas_validator() -> None:
    """A date (what YAML makes of 2024-01-01) writes as the same JSON as its text: the date's
    schema is checked and used as it is, never given the text's kept validator."""
    as_text = {"const": "2024-01-01"}
    as_date = {"const": datetime.date(2024, 1, 1)}
    assert contract_from({"output": as_text}).parse('"2024-01-01"') == "2024-01-01"
    with pytest.raises(ContractError):  # a JSON answer is never a date, as jsonschema says
        contract_from({"output": as_date}).parse('"2024-01-01"')
    assert contracts._validator(as_date) is not contracts._validator(as_date)  # not kept
    nan = {"type": "number", "maximum": float("nan")}
    assert contracts._validator(nan) is not contracts._validator(nan)
    with_null = {"type": "object", "properties": {"x": {"default": None, "type": "integer"}}}
    assert contracts._validator(with_null) is contracts._validator(with_null)
    assert contract_from({"output": with_null}).parse('{"x": 3}') == {"x": 3}


def test_the_error_a_refusal_names_is_the_one_the_schema_itself_names() -> None:
    """Which error jsonschema's best_match names follows the schema's own order of keywords:
    the kept validator keeps it (the retry hint tells the model the same thing each time)."""
    import jsonschema

    schema = {"type": "object", "properties": {"s": {"pattern": "^a", "maxLength": 2}}}
    validator = jsonschema.validators.validator_for(schema)(schema)
    want = jsonschema.exceptions.best_match(validator.iter_errors({"s": "bbb"})).message
    for _ in range(2):  # made, then kept
        with pytest.raises(ContractError) as refused:
            contract_from({"output": schema}).parse('{"s": "bbb"}')
        assert str(refused.value).endswith(want)
