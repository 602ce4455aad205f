"""How ``python run.py ctx`` shows what a ``memory:`` step recalled, and why."""

from __future__ import annotations

from typing import Any


def _parts(d: dict[str, Any]) -> str:
    if d.get("kind") == "dialogue":
        return (
            f"score {d['score']:.2f} = 0.5·relevance {d['relevance']:.2f} "
            f"+ 0.5·freshness {d['recency']:.2f} ({d.get('why', '')})"
        )
    text = (
        f"score {d['score']:.2f} = relevance {d['relevance']:.2f} × recency "
        f"{d['recency']:.2f} × importance {d['importance']:.2f} (bm25 {d['bm25']:.2f}"
    )
    if d.get("matched"):
        text += "; terms " + ", ".join(d["matched"])
    text += ")"
    if d.get("similarity") is not None:
        text += f"; similarity {d['similarity']:.2f}, rrf {d.get('rrf', 0):.4f}"
    return text


def ctx_lines(details: dict[str, Any]) -> list[str]:
    """``#`` lines for the ``ctx`` header: each recalled item with its score parts, near misses."""
    if "error" in details and "entries" not in details:
        return [f"# memory: recall failed ({details['error']}); the request goes without it"]
    entries = details.get("entries", [])
    dialogues = details.get("dialogues", [])
    lines = [
        f"# memory ({details.get('mode', 'lexical')}, min_score {details.get('min_score')}): "
        f"{len(entries)} of {details.get('considered', 0)} entries and {len(dialogues)} "
        f"dialogue summaries recalled into the tail ({details.get('block_chars', 0)} characters)"
    ]
    for d in entries:
        lines.append(f"#   + {d['id']} [{d['scope']}] {d['text']!r}: {_parts(d)}")
    for d in dialogues:
        lines.append(f"#   + summary {d['id']} {d['text']!r}: {_parts(d)}")
    for d in details.get("rejected", []):
        lines.append(f"#   - {d['id']} [{d['scope']}] {d['text']!r}: not recalled, {d.get('why')}")
    for note in details.get("notes", []):
        lines.append(f"#   ! {note}")
    return lines
