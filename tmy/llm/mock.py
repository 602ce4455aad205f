"""The TESTONLY mock model (seed 000): deterministic answers, no network.

It answers the exact request body a real provider would get — built by the
same prompt pipeline, checked by the same contracts, driving the same tool
loop — so rules can be developed and tested offline. It reads commands from
the last user message:

* ``MOCK:RESPONSE:<content>`` — answer ``<content>`` (everything after the prefix);
* ``MOCK:TRUE`` / ``MOCK:FALSE`` — answer ``1`` / ``0`` (judgements);
* ``MOCK:FAIL`` — an empty, unusable answer on every attempt: the retries run
  out and the step fails (with a contract: "did not meet the output contract";
  without one: "the model's answer was unusable");
* ``MOCK:REPAIR`` — unusable on the first attempt; once the system prompt
  carries a retry hint, a success: ``1`` for a judgement (``when_llm``,
  ``while_llm``, as ``MOCK:TRUE`` would), else the answer ``MOCK:RESPONSE:``
  names or the derived one below (a valid value for a contract);
* ``MOCK:TOOL:<name>:<json args>`` — call tool ``<name>`` (several may be given);
  once the tool results are back, answer with a summary of them;
* ``MOCK:IMAGES`` — answer how many pictures the question carried: ``0 images``,
  ``1 image``, ``2 images`` … (its ``image_url`` parts, from ``images:``/``vision:``).

A question that carries pictures and no command gets the free-text answer
``[TESTONLY mock · <N> earlier turns · <K> image(s)] You said: <question>``
(without pictures the `` · <K> images`` part is left out, as before).

Otherwise the answer is derived from the input and the requested format: an
echo of the question for free text, a value of the right type for a contract
(an instance of the JSON Schema, the first choice named in the question, …),
and for judgements 1 when the content shares a word with the condition.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tmy.llm.contracts import FORMAT_MARK
from tmy.llm.prompt import HINT_MARK, estimate_tokens, strip_tail
from tmy.llm.wire import Completion, Usage

_TOOL_RE = re.compile(r"MOCK:TOOL:([A-Za-z0-9_.\-]+):")
_FORMAT_RE = re.compile(re.escape(FORMAT_MARK) + r" ([\w-]+)")
_SCHEMA_RE = re.compile(r"```json\n(.*?)\n```", re.DOTALL)
_CHOICES_RE = re.compile(r"^Choices: (\[.*\])$", re.MULTILINE)
_WORD_RE = re.compile(r"\w{3,}")


def _is_result(message: dict[str, Any]) -> bool:
    content = _text(message.get("content"))
    return message.get("role") == "tool" or (
        message.get("role") == "user" and content.startswith("<tool_result")
    )


def _text(content: Any) -> str:
    """A message's text: the string, or its ``text`` parts joined (pictures left out)."""
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "")
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return str(content or "")


def _images(content: Any) -> int:
    """How many ``image_url`` parts a message's content holds."""
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")


def images_named(count: int) -> str:
    """``1 image``, ``2 images``: how the mock names the pictures it got."""
    return f"{count} image" if count == 1 else f"{count} images"


def respond(body: dict[str, Any], model_name: str = "TESTONLY") -> Completion:
    """The mock's completion for a chat-completions request body."""
    messages = body.get("messages") or []
    system = next((m["content"] for m in messages if m.get("role") == "system"), "") or ""
    ask = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and not _is_result(m)),
        default=-1,
    )
    text = _text(messages[ask]["content"]) if ask >= 0 else ""
    pictures = _images(messages[ask]["content"]) if ask >= 0 else 0
    results = [m for m in messages[ask + 1 :] if _is_result(m)]
    earlier = sum(1 for m in messages[:ask] if m.get("role") == "assistant")
    calls: list[dict[str, Any]] = []
    content = ""
    if "MOCK:TOOL:" in text and not results:
        calls = _tool_calls(text)
        if "tools" not in body:  # the text protocol: calls written into the answer
            content = (
                "<tool_call>\n"
                + json.dumps(
                    {
                        "calls": [
                            {"name": c["name"], "arguments": _loads(c["arguments"])} for c in calls
                        ]
                    },
                    ensure_ascii=False,
                )
                + "\n</tool_call>"
            )
            calls = []
    elif "MOCK:FAIL" in text or ("MOCK:REPAIR" in text and HINT_MARK not in system):
        content = ""
    elif "MOCK:REPAIR" in text and _judging(system):
        content = "1"  # repaired: a judgement succeeds, as MOCK:TRUE would
    elif "MOCK:RESPONSE:" in text:
        content = text.split("MOCK:RESPONSE:", 1)[1].strip()
    elif "MOCK:IMAGES" in text:
        content = images_named(pictures)
    elif "MOCK:TRUE" in text:
        content = "1"
    elif "MOCK:FALSE" in text:
        content = "0"
    else:
        content = _derived(system, text, results, earlier, pictures)
    # a picture costs what OpenAI charges one at low detail
    prompt_tokens = sum(
        estimate_tokens(_text(m.get("content"))) + 85 * _images(m.get("content")) for m in messages
    )
    if body.get("tools"):
        prompt_tokens += estimate_tokens(json.dumps(body["tools"]))
    usage = Usage(prompt_tokens, max(1, estimate_tokens(content)) if content or calls else 0)
    return Completion(content, calls, usage, "tool_calls" if calls else "stop", model_name)


def _loads(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _tool_calls(text: str) -> list[dict[str, Any]]:
    calls = []
    decoder = json.JSONDecoder()
    for i, match in enumerate(_TOOL_RE.finditer(text)):
        rest = text[match.end() :]
        try:
            args, _ = decoder.raw_decode(rest)
            arguments = json.dumps(args, ensure_ascii=False)
        except ValueError:
            arguments = rest.split()[0] if rest.split() else ""
        calls.append({"id": f"mock_{i}", "name": match.group(1), "arguments": arguments})
    return calls


def _judging(system: str) -> bool:
    """Whether the request is a judgement (branch or loop scene: the answer is 1 or 0)."""
    found = _FORMAT_RE.search(system)
    return found is not None and found.group(1) == "1-or-0"


def _derived(
    system: str, text: str, results: list[dict[str, Any]], earlier: int, pictures: int = 0
) -> str:
    """An answer derived from the input, shaped by the format the system prompt asks for."""
    question = strip_tail(text).strip()
    found = _FORMAT_RE.search(system)
    kind = found.group(1) if found else "free"
    if kind == "1-or-0":
        condition, _, content = question.partition("\n\nContent:\n")
        shared = set(_WORD_RE.findall(condition.casefold())) & set(
            _WORD_RE.findall(content.casefold())
        )
        return "1" if shared - {"condition"} else "0"
    if results:
        summary = "; ".join(str(m.get("content") or "").strip() for m in results)
        question = f"tool results: {summary}"
    if kind == "int":
        return str(len(question))
    if kind == "float":
        return str(len(question) / 2)
    if kind == "bool":
        return "true"
    if kind == "list":
        return json.dumps(question.split(), ensure_ascii=False)
    if kind == "dict":
        return json.dumps({"answer": question}, ensure_ascii=False)
    if kind == "choice":
        match = _CHOICES_RE.search(system)
        choices = json.loads(match.group(1)) if match else [""]
        named = [c for c in choices if str(c).casefold() in question.casefold()]
        return str((named or choices)[0])
    if kind in ("JSON", "YAML"):
        match = _SCHEMA_RE.search(system[found.end() :] if found else system)
        schema = json.loads(match.group(1)) if match else {}
        value = instance(schema, question)
        if kind == "YAML":
            return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)
        return json.dumps(value, ensure_ascii=False)
    if results:
        return f"[TESTONLY mock] {question}"
    seen = f" · {images_named(pictures)}" if pictures else ""
    return f"[TESTONLY mock · {earlier} earlier turns{seen}] You said: {question}"


def instance(schema: Any, text: str) -> Any:
    """A value that validates against ``schema``, built from ``text`` where strings go."""
    if not isinstance(schema, dict):
        return text
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return instance(schema[key][0], text)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        return {k: instance(v, text) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [instance(schema.get("items") or {}, text)] * max(1, schema.get("minItems", 1))
    if kind in ("integer", "number"):
        value = len(text)
        if "minimum" in schema:
            value = max(value, schema["minimum"])
        if "maximum" in schema:
            value = min(value, schema["maximum"])
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    value = text or "text"
    if "maxLength" in schema:
        value = value[: schema["maxLength"]]
    return value.ljust(schema.get("minLength", 0), ".")
