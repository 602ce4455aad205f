"""The ``kb`` command: manage and try the knowledge bases.

::

    kb add NAME PATH                 ingest a file or folder into base NAME now
    kb [list [NAME]]                 bases with document and chunk counts; NAME: its documents
    kb search NAME QUERY [--top N]   the chunks a knowledge: step would get, with their scores
    kb rebuild NAME                  drop the base and ingest it again from its paths
    kb del NAME [SOURCE]             remove one document, or the whole base

On the CLI (``--json`` prints the data), in chat (``.tmy kb …``, global admins
only) and on the HTTP admin API. ``kb add`` reads files on the server, so chat
does not offer it; over the HTTP API and the console it reads only files inside
a configured base's ``paths`` (a key that lets one use the bot must not read
``/etc`` or the config); the CLI, run on the server, may name any file or folder.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tmy.command import Arg, Command, CommandError, Invocation, Result
from tmy.knowledge import documents, layout
from tmy.knowledge.bases import KnowledgeBases, knowledge_of
from tmy.knowledge.config import roots_of
from tmy.knowledge.ingest import IngestReport
from tmy.llm.knowledge import MAX_TOP, KnowledgeSpec, Passage

ACTIONS = ("add", "list", "search", "rebuild", "del")
USAGE = (
    "usage: kb add NAME PATH | kb list [NAME] | kb search NAME QUERY [--top N] [--json] | "
    "kb rebuild NAME | kb del NAME [SOURCE]"
)
SHOWN_CHARS = 300  # a passage's text in chat; the CLI and JSON show it whole


def _kb(inv: Invocation) -> KnowledgeBases:
    engine = getattr(inv.app, "engine", None)
    if engine is None:
        raise CommandError("kb needs the app open")
    return knowledge_of(engine.services)


def _words(value: object) -> str:
    """An argument's text (a CLI that gives the rest of the line as words: them joined)."""
    return " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value or "")


def _need(inv: Invocation, *names: str) -> list[str]:
    values = [_words(inv.args.get(n)).strip() for n in names]
    if not all(values):
        raise CommandError(USAGE)
    return values


def _ingested(report: IngestReport) -> Result:
    took = report.added or report.replaced or report.unchanged or report.removed
    return Result(report.summary(), report.as_json(), ok=bool(took) or not report.skipped)


def _within_configured(kb: KnowledgeBases, paths: list[Path]) -> None:
    """Over HTTP and the console a PATH must lie inside a configured base's ``paths`` (links
    resolved): the API key and the console password let one use the bot, not read any file
    the daemon can (``/etc``, the config with its keys). The CLI may name any file."""
    settings = kb.services.settings
    allowed = [os.path.realpath(r) for c in kb.configs.values() for r in roots_of(settings, c)]
    for path in paths:
        real = os.path.realpath(path)
        if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in allowed):
            raise CommandError(
                f"kb add over HTTP reads only files inside the paths of a configured base "
                f"({', '.join(allowed) or 'none configured'}), not {str(path)!r}: "
                "run kb add on the server's command line for others"
            )


async def _add(inv: Invocation, kb: KnowledgeBases) -> Result:
    if inv.front == "chat":
        raise CommandError("kb add reads files on the server: use the CLI or the HTTP API")
    (name,) = _need(inv, "name", "target")[:1]
    given = inv.args.get("target")
    texts = list(given) if isinstance(given, list | tuple) else [str(given).strip()]
    paths = [Path(p).expanduser() for p in texts]
    if inv.front != "cli":
        _within_configured(kb, paths)
    try:
        return _ingested(await kb.ingest(name, paths))
    except ValueError as exc:  # a bad base name
        raise CommandError(str(exc)) from None


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KB" if n < 1024**2 else f"{n / 1024**2:.1f} MB"


async def _base_info(kb: KnowledgeBases, name: str) -> dict[str, Any]:
    store = kb.services.store
    docs = await documents.documents(store, name)
    stats = await store.index_stats(layout.namespace(name))
    cfg = kb.configs.get(name)
    info: dict[str, Any] = {
        "name": name,
        "documents": len(docs),
        "chunks": stats.n,
        "configured": cfg is not None,
    }
    if cfg is not None:
        info.update(paths=list(cfg.paths), watch=cfg.watch)
        info["embeddings"] = cfg.embeddings.identity if cfg.embeddings else None
    return info


def _info_line(info: dict[str, Any]) -> str:
    docs, chunks = info["documents"], info["chunks"]
    line = f"{info['name']}: {docs} document{'s' if docs != 1 else ''}, "
    line += f"{chunks} chunk{'s' if chunks != 1 else ''}"
    if info["configured"]:
        line += f" — paths: {', '.join(info['paths']) or 'none'}"
        line += " (watched)" if info["watch"] else ""
        line += f", embeddings {info['embeddings']}" if info["embeddings"] else ""
    else:
        line += " — added with kb add"
    return line


def _doc_line(doc: dict[str, Any], tz: Any) -> str:
    when = datetime.fromtimestamp(float(doc.get("ingested") or time.time()), tz)
    pages = f", {doc['pages']} pages" if doc.get("pages") else ""
    vectors = ", vectors" if doc.get("vectors") else ""
    chunks = int(doc.get("chunks") or 0)
    return (
        f"  {doc.get('source')}: {chunks} chunk{'s' if chunks != 1 else ''}, "
        f"{_size(int(doc.get('bytes') or 0))}"
        f"{pages}{vectors}, ingested {when:%Y-%m-%d %H:%M}"
    )


async def _list(inv: Invocation, kb: KnowledgeBases) -> Result:
    await kb.refresh()
    name = inv.args.get("name")
    if not name:
        infos = [await _base_info(kb, n) for n in kb.names()]
        text = "\n".join(_info_line(i) for i in infos) or "no knowledge bases"
        return Result(text, {"bases": infos})
    kb.check(name)
    info = await _base_info(kb, name)
    docs = sorted(
        (await documents.documents(kb.services.store, name)).values(),
        key=lambda d: str(d.get("source")),
    )
    tz = inv.app.settings.tz if inv.app is not None else None
    lines = [_info_line(info), *(_doc_line(d, tz) for d in docs)]
    keep = ("source", "path", "kind", "chunks", "bytes", "pages", "vectors", "hash", "ingested")
    info["documents"] = [{k: d.get(k) for k in keep} for d in docs]
    return Result("\n".join(lines), info)


def _top(inv: Invocation) -> int:
    raw = inv.args.get("top")
    if raw in (None, ""):
        return 4
    try:
        top = int(str(raw))
    except ValueError:
        raise CommandError(f"--top takes a whole number, not {raw!r}") from None
    if not 1 <= top <= MAX_TOP:
        raise CommandError(f"--top is from 1 to {MAX_TOP}")
    return top


def _passage(n: int, p: Passage, compact: bool) -> str:
    text = p.text if not compact or len(p.text) <= SHOWN_CHARS else p.text[:SHOWN_CHARS] + "…"
    why = ", ".join(f"{k} {v}" for k, v in p.why.items() if k != "matched")
    body = "\n".join("   " + line for line in text.splitlines())
    return f"{n}. {p.source} ({p.position}) score {p.score:.4g} — {why}\n{body}"


async def _search(inv: Invocation, kb: KnowledgeBases) -> Result:
    name, query = _need(inv, "name", "target")
    top = _top(inv)
    kb.check(name)
    passages = await kb.search(kb.services, KnowledgeSpec((name,), top), query)
    data = {
        "base": name,
        "query": query,
        "top": top,
        "passages": [
            {
                "base": p.base,
                "source": p.source,
                "position": p.position,
                "score": p.score,
                "why": dict(p.why),
                "text": p.text,
            }
            for p in passages
        ],
    }
    if not passages:
        shown = query if len(query) <= 80 else query[:80] + "…"
        return Result(f"{name}: nothing found for {shown!r}", data)
    text = "\n".join(_passage(n, p, inv.compact) for n, p in enumerate(passages, 1))
    return Result(text, data)


async def _rebuild(inv: Invocation, kb: KnowledgeBases) -> Result:
    (name,) = _need(inv, "name")
    return _ingested(await kb.rebuild(name))


async def _delete(inv: Invocation, kb: KnowledgeBases) -> Result:
    (name,) = _need(inv, "name")
    source = _words(inv.args.get("target")).strip() or None
    done = await kb.delete(name, source)
    if done["whole"]:
        gone = done["removed"]
        text = f"knowledge base {name} deleted ({gone} document{'s' if gone != 1 else ''})"
        return Result(text, done)
    if not done["removed"]:
        return Result(f"{name} has no document {source!r}", done, ok=False)
    return Result(f"{name}: removed {', '.join(map(str, done['sources']))}", done)


_RUN = {"add": _add, "list": _list, "search": _search, "rebuild": _rebuild, "del": _delete}


async def run_kb(inv: Invocation) -> Result:
    """``kb ACTION …`` (see the module docstring)."""
    action = str(inv.args.get("action") or "list")
    if action not in _RUN:
        raise CommandError(USAGE)
    return await _RUN[action](inv, _kb(inv))


KB = Command(
    name="kb",
    help="knowledge bases: add files, list, search, rebuild, delete",
    run=run_kb,
    args=(
        Arg("action", "what to do (default: list)", choices=ACTIONS, required=False),
        Arg("name", "the knowledge base", required=False, metavar="NAME"),
        Arg(
            "target",
            "add: a file or folder; search: the question; del: a document",
            required=False,
            rest=True,
            metavar="PATH|QUERY|SOURCE",
        ),
        Arg("top", "search: how many chunks (default 4)", flag=True, required=False, metavar="N"),
    ),
    usage="add|list|search|rebuild|del [NAME] [PATH|QUERY|SOURCE] [--top N] [--json]",
    usage_error=USAGE,
    description="manage the knowledge bases (knowledge: in the config) and try their search",
    json_help="print the result as JSON",
)

COMMANDS = (KB,)
