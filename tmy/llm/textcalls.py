"""The text tool-call protocol (``tool_protocol: text``), for models without function calling.

The system prompt explains ``<tool_call>{"calls": […]}</tool_call>`` (seed 002; the
single-call ``{"name", "arguments"}`` form is accepted too) and lists the tools
with their JSON Schemas; results come back as ``<tool_result>`` blocks
(:func:`tmy.llm.exchange.tool_loop`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from tmy.logs import preview

if TYPE_CHECKING:  # annotations only: tools imports this module
    from tmy.llm.tools import Tool

_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def text_protocol(tools: list[Tool]) -> str:
    """The system-prompt section that teaches the text tool-call protocol."""
    lines = [
        "Tools: you can call the tools below. To call, reply with only this block:",
        '<tool_call>\n{"calls":[{"name":"<tool name>","arguments":{...}}]}\n</tool_call>',
        "Several calls may share one block. Do not write call ids. Results come back in "
        "<tool_result> blocks; when you have what you need, answer without a tool_call block.",
        "Available tools:",
    ]
    for tool in tools:
        schema = json.dumps(tool.parameters, ensure_ascii=False, sort_keys=True)
        lines.append(f"- {tool.name}: {tool.description} Parameters (JSON Schema): {schema}")
    return "\n".join(lines)


def parse_text_calls(content: str) -> tuple[list[dict[str, Any]], str, str]:
    """``<tool_call>`` blocks → (calls, the answer without them, a parse error or "")."""
    calls: list[dict[str, Any]] = []
    errors = []
    for block in _CALL_RE.findall(content):
        try:
            data = json.loads(block)
        except ValueError as exc:
            errors.append(f"invalid JSON in <tool_call>: {exc}")
            continue
        items = data.get("calls") if isinstance(data, dict) and "calls" in data else [data]
        for item in items if isinstance(items, list) else [items]:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                errors.append(f"a call needs a 'name': {preview(item, 100)}")
                continue
            args = item.get("arguments", item.get("params", {}))
            calls.append(
                {
                    "name": item["name"],
                    "arguments": json.dumps(args, ensure_ascii=False)
                    if not isinstance(args, str)
                    else args,
                }
            )
    cleaned = _CALL_RE.sub("", content).strip()
    return calls, cleaned, "; ".join(errors)
