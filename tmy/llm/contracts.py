"""Output contracts: what the answer must look like, how to say so, how to check it.

A step declares at most one of ``returns: int|float|bool|list|dict|str``,
``choices: [..]`` or ``output: <JSON Schema>`` (``format: yaml`` to ask for
YAML instead of JSON). The contract adds a type constraint to the system
prompt (the last section of seed 000's pipeline), parses and validates the
answer, and when that fails produces the retry hint the next attempt carries —
so a model that wraps its JSON in prose gets told exactly what was wrong.
The parsed value, not the raw text, becomes ``STEP_RESULT``.

Judgements (the branch and loop scenes) are a contract too: ``1`` or ``0``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from tmy.errors import ExecutorError, TmyError

RETURNS = ("str", "int", "float", "bool", "list", "dict")
FORMATS = ("json", "yaml")
FORMAT_MARK = "Output format:"
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)\n?```", re.DOTALL)
_INT_RE = re.compile(r"[+-]?\d+")
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


_SIMPLE_INSTRUCTIONS = {
    "judge": "1-or-0. Reply with exactly one character: 1 (yes) or 0 (no).",
    "str": "text. Reply with the answer text only.",
    "int": "int. Reply with one integer only (digits, no words, no units).",
    "float": "float. Reply with one number only (no words, no units).",
    "bool": "bool. Reply with true or false only.",
    "list": "list. Reply with one JSON array only, no prose.",
    "dict": "dict. Reply with one JSON object only, no prose.",
}


class ContractError(TmyError):
    """The answer does not meet the contract; the message goes into the retry hint."""


def _preview(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def clean(text: str) -> str:
    """The answer without reasoning blocks and surrounding whitespace."""
    return _THINK_RE.sub("", text or "").strip()


def _unfence(text: str) -> str:
    match = _FENCE_RE.search(text)
    return match.group(1).strip() if match else text


def _bare(text: str) -> str:
    """One-word answers: quotes, backticks and a final full stop removed."""
    return _unfence(text).strip().strip("`\"'“”‘’").rstrip(".。!！").strip()


def _load_json(text: str) -> Any:
    candidates = [text, _unfence(text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "[{":
            try:
                return decoder.raw_decode(text, i)[0]
            except ValueError:
                continue
    raise ContractError(f"the answer is not valid JSON: {_preview(text)!r}")


def _load_yaml(text: str) -> Any:
    try:
        return yaml.safe_load(_unfence(text))
    except yaml.YAMLError as exc:
        raise ContractError(f"the answer is not valid YAML ({exc}): {_preview(text)!r}") from None


@dataclass(frozen=True, slots=True)
class Contract:
    """What the answer must be: ``kind`` is text, judge, one of RETURNS, choice or schema."""

    kind: str = "text"
    choices: tuple[str | int | float, ...] = ()  # as the rule wrote them: 2 stays an int
    schema: Any = None
    fmt: str = "json"

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The schema to force JSON output with, when the answer is a JSON object."""
        is_object = isinstance(self.schema, dict) and self.schema.get("type", "object") == "object"
        if self.kind == "schema" and self.fmt == "json" and is_object:
            return self.schema
        if self.kind == "dict":
            return {"type": "object"}
        return None

    def instruction(self) -> str:
        """The type constraint appended to the system prompt."""
        k = self.kind
        if k == "text":
            return ""
        if k in _SIMPLE_INSTRUCTIONS:
            return f"{FORMAT_MARK} {_SIMPLE_INSTRUCTIONS[k]}"
        if k == "choice":
            return (
                f"{FORMAT_MARK} choice. Reply with exactly one of these options, as written, "
                f"and nothing else.\nChoices: {json.dumps(list(self.choices), ensure_ascii=False)}"
            )
        schema = json.dumps(self.schema, ensure_ascii=False, indent=2)
        if self.fmt == "yaml":
            return (
                f"{FORMAT_MARK} YAML. Reply with one YAML document only (no prose) that, read "
                f"as data, validates against this JSON Schema:\n```json\n{schema}\n```"
            )
        return (
            f"{FORMAT_MARK} JSON. Reply with one JSON value only (no prose, no code fence) "
            f"that validates against this JSON Schema:\n```json\n{schema}\n```"
        )

    def parse(self, raw: str) -> Any:
        """The answer as a value of the contract; ContractError saying what is wrong."""
        text = clean(raw)
        if not text:
            raise ContractError("the answer was empty")
        k = self.kind
        if k in ("text", "str"):
            return text
        if k == "judge":
            word = _bare(text)
            if word in ("1", "0"):
                return word == "1"
            raise ContractError(f"the answer {_preview(text)!r} is neither 1 nor 0")
        if k == "int":
            word = _bare(text).replace(",", "").replace("_", "")
            if _INT_RE.fullmatch(word):
                return int(word)
            raise ContractError(f"the answer {_preview(text)!r} is not an integer")
        if k == "float":
            try:
                return float(_bare(text).replace(",", ""))
            except ValueError:
                raise ContractError(f"the answer {_preview(text)!r} is not a number") from None
        if k == "bool":
            word = _bare(text).lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ContractError(f"the answer {_preview(text)!r} is not true or false")
        if k in ("list", "dict"):
            value = _load_json(text)
            want = list if k == "list" else dict
            if not isinstance(value, want):
                raise ContractError(f"the answer is a JSON {type(value).__name__}, not a {k}")
            return value
        if k == "choice":
            word = _bare(text)
            for choice in self.choices:
                if word.casefold() == str(choice).casefold():
                    return choice
            raise ContractError(
                f"the answer {_preview(text)!r} is not one of "
                f"{json.dumps(list(self.choices), ensure_ascii=False)}"
            )
        import jsonschema  # deferred: ~30 ms of every CLI start

        value = _load_yaml(text) if self.fmt == "yaml" else _load_json(text)
        error = jsonschema.exceptions.best_match(_validator(self.schema).iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the top level"
            raise ContractError(f"the answer does not match the schema at {where}: {error.message}")
        return value

    def hint(self, error: ContractError, raw: str) -> str:
        """The retry hint for the next attempt."""
        return (
            f"Your previous answer was rejected: {error}. "
            f"Answer again, following the output format exactly."
        )


def contract_from(cfg: dict[str, Any]) -> Contract:
    """The contract a step's options declare (ExecutorError for a malformed one)."""
    get = cfg.get
    if not (get("returns") or get("choices") or get("output")) and get("format") in _PLAIN:
        return TEXT  # the usual step: no contract declared (frozen, so one serves all)
    try:
        return _contract(cfg)
    except ValueError as exc:
        raise ExecutorError(str(exc)) from None


def _contract(cfg: dict[str, Any]) -> Contract:
    returns, choices, output = cfg.get("returns"), cfg.get("choices"), cfg.get("output")
    given = [k for k, v in (("returns", returns), ("choices", choices), ("output", output)) if v]
    if len(given) > 1:
        raise ValueError(f"give only one of returns, choices and output (got {', '.join(given)})")
    fmt = cfg.get("format") or "json"
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} must be one of {', '.join(FORMATS)}")
    if returns:
        if returns not in RETURNS:
            raise ValueError(f"returns {returns!r} must be one of {', '.join(RETURNS)}")
        return Contract(returns)
    if choices:
        if not isinstance(choices, list) or not all(
            isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in choices
        ):
            raise ValueError("choices must be a list of words or numbers")
        return Contract("choice", choices=tuple(choices))
    if output:
        if not isinstance(output, dict):
            raise ValueError("output must be a JSON Schema (a mapping)")
        _validator(output)  # checked (ValueError for a schema that is not one)
        return Contract("schema", schema=output, fmt=fmt)
    return Contract("text")


JUDGE = Contract("judge")

_VALIDATORS: dict[bytes, Any] = {}  # a schema's JSON -> its checked validator
_VALIDATORS_KEPT = 256


def _validator(schema: dict[str, Any]) -> Any:
    """The jsonschema validator of ``schema``, checked (ValueError: not a valid schema).

    Kept per schema: checking one builds a validator of its metaschema (~0.4 ms), and a
    step with ``output:`` and every memory dialogue summary make their contract anew per
    run. The kept validator holds its own copy of the schema (a caller's dict may change
    after), used only for a schema equal to it: one holding what JSON does not (a date
    from YAML, a tuple, NaN) or keys that are not strings is checked each time."""
    import jsonschema  # deferred: ~30 ms of every CLI start

    try:  # in the schema's own order: which error best_match names follows it
        key: bytes | None = orjson.dumps(schema)
    except TypeError:
        key = None
    if key is not None:
        kept = _VALIDATORS.get(key)
        if kept is not None and kept.schema == schema:
            return kept
    kind = jsonschema.validators.validator_for(schema)
    try:
        kind.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"output is not a valid JSON Schema: {exc.message}") from None
    copy = None if key is None else orjson.loads(key)
    if copy is None or copy != schema:  # not JSON's own values: the caller's, not kept
        return kind(schema)
    if len(_VALIDATORS) >= _VALIDATORS_KEPT:
        _VALIDATORS.clear()
    made = _VALIDATORS[key] = kind(copy)  # type: ignore[index]
    return made


TEXT = Contract("text")
_PLAIN = (None, "", "json")  # format values that leave a step without a contract as text
