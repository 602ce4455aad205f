"""Prompt synthesis and the request layout.

The system prompt follows seed 000's pipeline::

    scene prompt + the step's system + rule intent + tool protocol + retry hint + type constraint

and the messages follow seed 003's cache economics: a **stable prefix**
(system, few-shot examples, then the chat history, which only ever grows at
its end) followed by a **dynamic tail** (time, who is asking, then the
question). Nothing that changes per message goes into the system prompt, so a
provider's prompt cache hits the whole prefix on every turn of a conversation.

The ``system`` option may be a string, a structured ``{background, content,
notes, output}`` map, or a list of both; several are merged as seed 001
describes (backgrounds and contents joined by newlines, notes and outputs
concatenated into bullet lists).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tmy.errors import ExecutorError

HINT_MARK = "Retry hint:"
ROLES = ("system", "user", "assistant")
_SYSTEM_KEYS = ("background", "content", "notes", "output")


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: ~4 ASCII characters per token, one per other character."""
    ascii_chars = len(text.encode("ascii", "ignore"))  # the characters below U+0080, counted in C
    return (ascii_chars + 3) // 4 + (len(text) - ascii_chars)


def merge_system(value: Any) -> str:
    """Merge string / structured system messages into one text (seed 001)."""
    if isinstance(value, str):  # one text: its content section alone
        return value.strip()
    if value is None or value == []:
        return ""
    parts = value if isinstance(value, list) else [value]
    background: list[str] = []
    content: list[str] = []
    notes: list[str] = []
    output: list[str] = []
    for part in parts:
        if isinstance(part, str):
            content.append(part)
            continue
        if not isinstance(part, Mapping):
            raise ExecutorError(
                f"system: expected text or {{background, content, notes, output}}, "
                f"got {type(part).__name__}"
            )
        unknown = set(part) - set(_SYSTEM_KEYS)
        if unknown:
            raise ExecutorError(
                f"system: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(_SYSTEM_KEYS)}"
            )
        for key, target in (("background", background), ("content", content)):
            if part.get(key):
                target.append(str(part[key]))
        for key, target in (("notes", notes), ("output", output)):
            items = part.get(key)
            if items:
                target.extend(str(i) for i in (items if isinstance(items, list) else [items]))
    sections = ["\n".join(background), "\n".join(content)]
    if notes:
        sections.append("Notes:\n" + "\n".join(f"* {n}" for n in notes))
    if output:
        sections.append("Output:\n" + "\n".join(f"* {o}" for o in output))
    return "\n\n".join(s.strip() for s in sections if s.strip())


def build_system(
    scene: str,
    system: str = "",
    intent: str = "",
    tools: str = "",
    hint: str | None = None,
    constraint: str = "",
) -> str:
    """The final system prompt, in seed 000's order (empty sections left out). Those
    without a retry hint are kept (a step asks for the same one at every call; at most
    a few hundred, each as long as the step's own texts)."""
    if hint:  # a repair: its hint quotes the rejected answer, so it is never kept
        return _build_system(scene, system, intent, tools, hint, constraint)
    key = (scene, system, intent, tools, constraint)
    found = _SYSTEMS.get(key)
    if found is None:
        if len(_SYSTEMS) >= 256:
            _SYSTEMS.clear()
        found = _SYSTEMS[key] = _build_system(scene, system, intent, tools, None, constraint)
    return found


_SYSTEMS: dict[tuple[str, str, str, str, str], str] = {}  # filled as steps run


def _build_system(
    scene: str, system: str, intent: str, tools: str, hint: str | None, constraint: str
) -> str:
    sections = [scene, system, f"Intent: {intent}" if intent else "", tools]
    if hint:
        sections.append(f"{HINT_MARK} {hint}")
    sections.append(constraint)
    return "\n\n".join(s.strip() for s in sections if s and s.strip())


def few_shot(messages: Any) -> list[dict[str, str]]:
    """``messages:`` as chat messages: ``{role, content}`` or the short ``{user: text}`` form."""
    if not messages:
        return []
    if not isinstance(messages, list):
        raise ExecutorError("messages: expected a list of {role, content} (or {user: …}) items")
    out = []
    for item in messages:
        if isinstance(item, Mapping) and "role" in item:
            role, content = item.get("role"), item.get("content", "")
        elif isinstance(item, Mapping) and len(item) == 1:
            role, content = next(iter(item.items()))
        else:
            raise ExecutorError(f"messages: {item!r} is not {{role, content}} nor {{user: text}}")
        if role not in ROLES:
            raise ExecutorError(f"messages: role {role!r} must be one of {', '.join(ROLES)}")
        out.append({"role": str(role), "content": "" if content is None else str(content)})
    return out


def tail(
    question: str,
    *,
    now: str = "",
    who: str = "",
    where: str = "",
    memory: str = "",
    knowledge: str = "",
) -> str:
    """The dynamic tail: time and who is asking (when known), then the question.

    ``knowledge`` (the passages a knowledge base gave, ``<knowledge>…</knowledge>``,
    :func:`tmy.llm.knowledge.block`) and ``memory`` (the recalled ``<memory>…</memory>``
    block, tmy/memory) go between the time/sender lines and the question, in that
    order: in the tail, never in the stable prefix.
    """
    lines = []
    if now:
        lines.append(f"Time: {now}")
    if who:
        lines.append(f"From: {who}" + (f" ({where})" if where else ""))
    question = before(question, knowledge, memory)
    return "\n".join(lines) + "\n\n" + question if lines else question


def before(question: str, *blocks: str) -> str:
    """``question`` after the non-empty ``blocks`` (knowledge, memory), a blank line apart."""
    if not any(blocks):  # the usual tail: the question alone
        return question
    return "\n\n".join([*(b for b in blocks if b), question])


def with_quote(reply_to: Any, question: str) -> str:
    """``question`` after the message it replies to (``quote: true``), as a quoted block::

        In reply to ann:
        > the quoted message,
        > line by line

        the question

    ``reply_to`` is REPLY_TO (``{text, user, id}``); None or an empty text: no block.
    """
    if not isinstance(reply_to, Mapping):
        return question
    text = str(reply_to.get("text") or "").strip()
    if not text:
        return question
    user = str(reply_to.get("user") or "").strip()
    quoted = "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))
    return f"In reply to {user or 'a message'}:\n{quoted}\n\n{question}"


def strip_tail(text: str) -> str:
    """The question part of a tail message (the mock reads it)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith(("Time: ", "From: ")):
        i += 1
    if i and i < len(lines) and lines[i] == "":
        return "\n".join(lines[i + 1 :])
    return text


def layout(
    system: str, shots: list[dict[str, str]], history: list[list[str]], question: str
) -> list[dict[str, Any]]:
    """Stable prefix (system, few-shot, history) + the dynamic tail."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.extend(shots)
    for ask, answer in history:
        messages.append({"role": "user", "content": ask})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": question})
    return messages
