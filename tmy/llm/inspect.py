"""``python run.py ctx [--user U --chat C] TEXT``: what exactly would be sent, without sending.

The message goes through the real engine — trigger match, the steps before the
first model request, prompt building, history, tools — and the first request
is captured instead of sent (seed 003's offline inspector). The run stops
there, so nothing is appended to the history and no tokens are counted. Steps
before the first LLM request do run (they produce its input); a rule whose
earlier steps have side effects has them here too.

The stable prefix signature (sha256 of the system and few-shot messages plus
the tools) must stay the same across turns and users: if it changes, something
dynamic leaked into the system prompt and the provider's prompt cache misses.
The history follows it and only grows at its end.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from typing import Any

from tmy.config import Settings
from tmy.llm.exchange import CAPTURE
from tmy.llm.usage import today, usage_of
from tmy.redact import safe_url


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``ctx`` subcommand's arguments (the common --user/--chat/... come with it)."""
    parser.description = "print the LLM request this message would send, without sending it"
    parser.add_argument("text", help="the message, as a user would send it")
    parser.add_argument("--json", action="store_true", help="print only the request body")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Entry point for ``tmy ctx``; 0 when a request was printed, 1 when none would be sent."""
    from tmy import logs
    from tmy.cli import identity

    asked = getattr(args, "log_level", None) or os.environ.get("TMY_LOG_LEVEL")
    if not asked and not settings.log_file:
        # The dry run ends the run early on purpose: its "run.failed" warning (and the
        # mock notice, which the header shows anyway) would only be noise here.
        logs.configure("error")
    return asyncio.run(inspect(settings, args.text, identity(args), as_json=args.json))


def prefix_signature(body: dict[str, Any], prefix_len: int) -> str:
    """sha256 over the stable prefix: the first ``prefix_len`` messages and the tools."""
    stable = {"messages": body.get("messages", [])[:prefix_len], "tools": body.get("tools")}
    raw = json.dumps(stable, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


async def inspect(
    settings: Settings, text: str, who: dict[str, str], *, as_json: bool = False, out: Any = None
) -> int:
    """Run ``text`` up to its first LLM request and print that request."""
    from tmy.app import App
    from tmy.message import Message

    out = out or sys.stdout
    captured: list[dict[str, Any]] = []
    token = CAPTURE.set(captured)
    try:
        async with App(settings.with_(console=False, http_enabled=False)) as app:
            assert app.engine is not None
            message = Message(text, **who)
            reply = await app.engine.handle(message)
            day = today(app.engine.tz)
            used = await usage_of(app.engine.services.store, message, day)
    finally:
        CAPTURE.reset(token)
    if not captured:
        if reply.rule is None:
            print("(no rule matched: nothing would be sent)", file=out)
        else:
            why = f" (the run stopped: {reply.error})" if reply.error else ""
            print(f"(rule {reply.rule!r} sends no LLM request for this message{why})", file=out)
        return 1
    request = captured[0]
    body, model = request["body"], request["model"]
    if as_json:
        print(json.dumps(body, ensure_ascii=False, indent=2), file=out)
        return 0
    url = model.base_url if model.is_mock else f"{safe_url(model.base_url)}/chat/completions"
    print(f"# rule {reply.rule} · step {request['uri']} · scene {request['scene']}", file=out)
    print(f"# POST {url} · model {model.name} ({model.model})", file=out)
    print(
        f"# stable prefix: {request['prefix_len']} messages"
        f"{' + tools' if body.get('tools') else ''} (sha256 "
        f"{prefix_signature(body, request['prefix_len'])}), then "
        f"{request['history_len']} history messages, then the dynamic tail",
        file=out,
    )
    mine = used.get("user") or {}
    print(
        f"# tokens today for {who['user']}: {mine.get('prompt', 0)} prompt + "
        f"{mine.get('completion', 0)} completion ({mine.get('cached', 0)} cached)",
        file=out,
    )
    for record in reply.steps:  # long-term memory (tmy/memory): what was recalled, and why
        if record.uri == request["uri"] and "memory" in record.extra:
            from tmy.memory.report import ctx_lines

            print("\n".join(ctx_lines(record.extra["memory"])), file=out)
    print(json.dumps(body, ensure_ascii=False, indent=2), file=out)
    return 0
