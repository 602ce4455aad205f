"""The text view of an explanation (full for the CLI, compact for a chat answer)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tmy.llm.knowledge import ctx_lines
from tmy.logs import preview

if TYPE_CHECKING:  # annotations only: the model's render() calls this module
    from tmy.explain.model import Explanation

_SHOW = 300  # characters of a value in the text view
_SHOW_CHAT = 120  # … in the admin command's answer
_SHOW_LLM = 4000  # … of an LLM request body (the prompt is what one wants to read)


def _show(value: Any, limit: int) -> str:
    if isinstance(value, str):
        return repr(preview(value, limit))
    shown = preview(value, limit)
    return shown if isinstance(shown, str) else json.dumps(shown)


def _sent_line(sent: dict[str, Any]) -> str:
    if sent["kind"] != "llm":
        return f"{sent['method']} {sent['url']}"
    if sent["url"] == "TESTONLY":
        return f"an LLM request to model {sent['model']!r} (the TESTONLY mock answers it)"
    return (
        f"an LLM request to model {sent['model']!r}: {sent['method']} {sent['url']} "
        "(the TESTONLY mock answered it here)"
    )


def render(ex: Explanation, compact: bool) -> str:
    """The text view: header, candidates, near misses, steps, reply, writes, notes."""
    limit = _SHOW_CHAT if compact else _SHOW
    lines = _header(ex, compact, limit)
    lines += _matching(ex, compact)
    if ex.steps:
        lines += _steps(ex, compact, limit)
    elif ex.matched is not None and not ex.blocked and ex.rule is not None:
        lines.append("steps: none")
    if ex.matched is not None and not ex.blocked:
        reply = ex.reply
        lines.append(f"reply: {_show(reply.get('text', ''), limit)}")
        if reply.get("outgoing"):
            lines.append(f"with: {_parts(reply['outgoing'])}")
        if "approve" in reply:
            verdict = "accept" if reply["approve"] else "decline"
            why = f" ({reply['approve_reason']})" if reply.get("approve_reason") else ""
            lines.append(f"request: {verdict}{why} (APPROVE)")
        if reply.get("error"):
            lines.append(f"error: {reply['error']}")
    if ex.writes and not compact:
        lines.append("store writes (kept in the overlay, not stored):")
        for key, value in ex.writes.items():
            lines.append(f"  {key} = {'(deleted)' if value is None else _show(value, limit)}")
    elif ex.writes:
        lines.append(f"store writes (not stored): {', '.join(ex.writes)}")
    lines.extend(f"note: {n}" for n in ex.notes)
    if ex.dry_run and ex.steps and not compact:
        lines.append("(nothing was changed; --run sends the message for real)")
    return "\n".join(lines)


def _header(ex: Explanation, compact: bool, limit: int) -> list[str]:
    lines = [ex.headline]
    if ex.matched is not None and ex.rule is not None:
        r = ex.rule
        lines[0] += f" ({r.file}:{r.line})"
    if ex.event is not None:  # no text: what the platform reported
        e = ex.event
        lines.append(f"event: {e['kind']} ({e['raw'] or 'no platform name'})")
        if e["data"]:
            lines.append(f"EVENT_DATA: {_show(e['data'], limit)}")
    else:
        lines.append(f"text: {_show(ex.text, limit)}")
        folded = f" (case-folded: {_show(ex.folded, limit)})" if ex.folded != ex.normalised else ""
        lines.append(f"normalised: {_show(ex.normalised, limit)}{folded}")
    m = ex.message
    if m and not compact:
        lines.append(
            f"message: user {m['user']} · chat {m['chat']} · platform {m['platform']} · "
            f"{'private' if m['private'] else 'group'}"
            f"{' · admin' if m['admin'] else ''}"
            f"{' · admin of this chat' if m.get('chat_admin') else ''}"
            f"{' · mentions the bot' if m['mention'] else ''}"
        )
    return lines


def _matching(ex: Explanation, compact: bool) -> list[str]:
    """Candidates (best first), near misses not already listed, the open session."""
    lines = []
    if ex.candidates:
        event = ex.event is not None
        lines.append(
            "rules listening (rulebook order; the first the filters admit runs):"
            if event
            else "candidates (best first; the first one the filters admit wins):"
        )
        rows = ex.candidates[:10] if compact else ex.candidates
        for c in rows:
            mark = "*" if c["won"] else "-"
            where = f"{c['file']}:{c['line']}"
            if compact:
                lines.append(f"  {mark} {c['rule']} {c['trigger']!r}: {c['why']}")
            elif event:
                lines.append(f"  {mark} {c['rule']}  {where}  — {c['why']}")
            else:
                lines.append(
                    f"  {mark} {c['rule']}  {c['trigger']!r}  {c['kind']}  "
                    f"priority {c['priority']}  literal {c['literal_length']}  {where}  "
                    f"— {c['why']}"
                )
        if len(rows) < len(ex.candidates):
            lines.append(f"  … and {len(ex.candidates) - len(rows)} more")
    elif ex.event is not None:
        lines.append(f"rules listening for {ex.event['kind']}: none")
    elif ex.looked_up:
        lines.append("candidates: none (no trigger matched)")
    # a refused candidate is already shown above with its reason
    listed = {(c["rule"], c["trigger"]) for c in ex.candidates}
    misses = [n for n in ex.near_misses if (n["rule"], n["trigger"]) not in listed]
    if misses:
        lines.append("near misses:")
        shown = misses[:5] if compact else misses
        for n in shown:
            lines.append(f"  - {n['rule']} {n['trigger']!r}: {n['why']}")
        if len(shown) < len(misses):
            lines.append(f"  … and {len(misses) - len(shown)} more")
    if ex.session is not None and not compact:
        lines.append(f"session: open for rule {ex.session['rule']!r}")
    return lines


def _steps(ex: Explanation, compact: bool, limit: int) -> list[str]:
    how = (
        "dry run: store writes kept in an overlay, HTTP and LLM requests not sent"
        if ex.dry_run
        else "the real run"
    )
    lines = [f"steps ({how}):"]
    for s in ex.steps:
        head = f"  {s['uri']} [{s['plugin']}]"
        if not s.get("ran", True) or s.get("skipped"):
            lines.append(f"{head} skipped: {s.get('skip_reason', 'skipped')}")
            continue
        stop = "  (stop: ended the run)" if s.get("stopped") else ""
        lines.append(f"{head} {s['ms']:g} ms{stop}")
        lines.append(f"      input:  {_show(s['input'], limit)}")
        found = (s.get("extra") or {}).get("knowledge")
        if found:  # which chunks a knowledge: step chose, and why (their scores)
            lines += ["      " + line.removeprefix("# ") for line in ctx_lines(found)]
        for sent in s.get("would_send", ()):
            lines.append(f"      would send: {_sent_line(sent)}")
            if not compact:
                if sent.get("headers"):
                    shown = json.dumps(sent["headers"], ensure_ascii=False)
                    lines.append(f"        headers: {shown}")
                if sent.get("body") is not None:
                    body_limit = _SHOW_LLM if sent["kind"] == "llm" else limit
                    lines.append(f"        body: {_show(sent['body'], body_limit)}")
        for draw in s.get("drew", ()):
            lines.append(f"      drew:   {_drew(draw, limit)}")
        if s["error"]:
            lines.append(f"      error:  {s['error']}")
        else:
            lines.append(f"      result: {_show(s['result'], limit)}")
    attributed = {s["uri"] for s in ex.steps if s.get("drew")}
    others = [d for d in ex.draws if d["uri"] not in attributed]
    if others:  # the real run (--run) does not say which step drew
        lines.append("random draws:")
        lines.extend(f"  drew: {_drew(d, limit)}" for d in others)
    return lines


def _parts(outgoing: dict[str, Any]) -> str:
    """A structured reply's parts in one line: ``1 image, 2 buttons, a quote``."""
    shown = []
    for key, one in (("images", "image"), ("files", "file"), ("mentions", "mention")):
        if outgoing.get(key):
            n = len(outgoing[key])
            shown.append(f"{n} {one}{'s' if n > 1 else ''}")
    buttons = [b["text"] for row in outgoing.get("buttons") or () for b in row]
    if buttons:
        shown.append(f"buttons {', '.join(repr(b) for b in buttons)}")
    if outgoing.get("reply_to") is not None:
        shown.append("a quote")
    return ", ".join(shown)


def _drew(draw: dict[str, Any], limit: int) -> str:
    """``3 from randint(1, 6)``: the value drawn and the call that drew it."""
    value = draw["value"]
    shown = _show(value, limit) if isinstance(value, str) else _plain(value, limit)
    return f"{shown} from {draw['call']}"


def _plain(value: Any, limit: int) -> str:
    """A drawn number or list as written in an expression (``0.6394``, ``[2, 1]``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return _show(value, limit)
