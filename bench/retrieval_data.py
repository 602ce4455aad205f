"""A deterministic document set for the retrieval benchmark, with questions and their answers.

``corpus(n_docs)`` makes ``n_docs`` documents, alternately English and Chinese: product
FAQs, community rules and company policies (:mod:`retrieval_facts`). Each is about one
named entity (``Casora Q22 router``, ``望京摄影俱乐部``) and states six or seven facts
about it, each in its own paragraph among shared sentences (subject × verb × object ×
when, 4,096 per language, no digits), with paragraphs of shared sentences only and, for
each fact, a decoy sentence on its subject in another paragraph. A document is about
4,100 characters in English and 2,800 in Chinese: five or six chunks of 800, so finding
the document is not enough to hold the answer in the top 4. Most are Markdown, one in five
plain text, one in ten HTML.

``questions(docs)`` asks one question about each of the first 100 documents (50 English,
50 Chinese), about each kind of fact in turn, in one of three wordings: sharing a word
with the fact's sentence ("How long is the warranty on the Casora Q22 router?"), sharing
a stem or a character ("For how long is the Casora Q22 router guaranteed?"), or nothing
but the name ("If my Casora Q22 router breaks, until when is the repair free?"). Each
question records its document and the fact's value: a retrieved chunk answers it when
it comes from that document and holds the value (:func:`check`: the value occurs once in
the document and in no shared sentence).

Same arguments, same documents and questions, on every machine (``random.Random``
seeded per document); a larger corpus starts with the smaller one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from retrieval_facts import KINDS, Fact, entity

SEED = 25
WORDINGS = ("word", "stem", "name")  # a fact's asks, in order (retrieval_facts)


@dataclass(frozen=True, slots=True)
class Document:
    path: str  # relative to the corpus folder
    lang: str  # "en" | "zh"
    title: str
    entity: str
    facts: tuple[Fact, ...]
    text: str  # the file's content (.md, .txt or .html)


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    lang: str
    path: str  # the document holding the answer
    fact: str  # the value string a right chunk holds
    kind: str
    wording: str  # what it shares with the fact's sentence: "word", "stem" or "name" only


FILLER = {
    "en": (
        ["Our support team", "The service desk", "The community team", "The head office",
         "Every moderator", "The shipping partner", "The billing department",
         "The repair centre"],
        ["reviews", "answers", "updates", "checks", "handles", "records", "explains",
         "publishes"],
        ["questions about orders", "requests from members", "changes to this page",
         "notes about safety", "feedback about events", "reports about accounts",
         "questions about invoices", "suggestions for the forum"],
        ["within two business days", "every quarter", "as soon as possible",
         "on the first Monday of the month", "before the next event",
         "in the order they arrive", "during office hours", "with great care"],
    ),
    "zh": (
        ["我们的客服团队", "服务台", "社区团队", "总部", "每位管理员", "物流合作方", "财务部门",
         "维修中心"],
        ["审核", "答复", "更新", "核对", "处理", "记录", "说明", "公布"],
        ["订单相关的问题", "成员提出的申请", "本页面的变动", "安全注意事项", "活动反馈",
         "账户问题", "发票问题", "论坛建议"],
        ["两个工作日内", "每个季度", "尽快", "每月第一个周一", "下次活动之前", "按提交顺序",
         "在办公时间内", "认真细致地"],
    ),
}  # fmt: skip


def filler(r: random.Random, lang: str) -> str:
    """One shared sentence (no digits: a fact's value never occurs in one)."""
    who, verb, what, when = (r.choice(part) for part in FILLER[lang])
    return f"{who} {verb} {what} {when}." if lang == "en" else f"{who}会{when}{verb}{what}。"


def _render(fmt: str, title: str, paragraphs: list[str]) -> str:
    if fmt == "html":
        body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
        return (
            f"<!doctype html>\n<html><head><title>{title}</title></head>\n"
            f"<body>\n<h1>{title}</h1>\n{body}\n</body></html>\n"
        )
    if fmt == "md":
        return f"# {title}\n\n" + "\n\n".join(paragraphs) + "\n"
    return f"{title}\n\n" + "\n\n".join(paragraphs) + "\n"


def document(i: int, used: set[str]) -> Document:
    """Document number ``i`` (even: English, odd: Chinese); ``used``: entity names taken."""
    r = random.Random(SEED * 1_000_003 + i)
    lang = "en" if i % 2 == 0 else "zh"
    kind = ("product", "community", "policy")[(i // 2) % 3]
    title_fmt, make = KINDS[(lang, kind)]
    name = entity(r, lang, kind)
    for tries in range(1, 1000):  # the name spaces hold thousands; past them, a number tells
        if name not in used:
            break
        name = entity(r, lang, kind) + (f" {tries}" if tries > 50 else "")
    used.add(name)
    facts = [replace(f, sentence=f.sentence.replace("{v}", f.value)) for f in make(r, name)]
    sep = " " if lang == "en" else ""
    few, many = (2, 6) if lang == "en" else (8, 16)  # Chinese says as much in fewer characters
    paragraphs = [[filler(r, lang) for _ in range(few)]]
    for fact in r.sample(facts, len(facts)):
        around = [filler(r, lang) for _ in range(r.randrange(few, many))]
        around.insert(r.randrange(len(around) + 1), fact.sentence)
        paragraphs.append(around)
    for _ in range(3):  # paragraphs of shared sentences only
        paragraphs.insert(
            r.randrange(1, len(paragraphs) + 1), [filler(r, lang) for _ in range(many)]
        )
    for fact in facts:  # each decoy away from its fact
        others = [p for p in paragraphs if fact.sentence not in p]
        r.choice(others).insert(0, fact.decoy)
    fmt = "html" if i % 20 in (4, 7) else ("txt" if i % 5 == 1 else "md")
    title = title_fmt.format(e=name)
    path = f"{lang}/{kind}/doc{i:05d}.{fmt}"
    text = _render(fmt, title, [sep.join(p) for p in paragraphs])
    return Document(path, lang, title, name, tuple(facts), text)


def corpus(n_docs: int) -> list[Document]:
    """The first ``n_docs`` documents (a larger corpus starts with the smaller one)."""
    used: set[str] = set()
    return [document(i, used) for i in range(n_docs)]


def questions(docs: list[Document], count: int = 100) -> list[Question]:
    """``count`` questions, one per document from the first, about a rotating kind of fact."""
    out = []
    for i, doc in enumerate(docs[:count]):
        r = random.Random(SEED * 7_919 + i)
        fact = doc.facts[(i // 6) % len(doc.facts)]  # each (language, kind) in turn
        k = r.randrange(len(fact.asks))
        out.append(Question(fact.asks[k], doc.lang, doc.path, fact.value, fact.kind, WORDINGS[k]))
    return out


def check(docs: list[Document], qs: list[Question]) -> None:
    """Each question's value occurs exactly once in its document and in no shared sentence."""
    by_path = {d.path: d for d in docs}
    for q in qs:
        text = by_path[q.path].text
        if text.count(q.fact) != 1:
            raise AssertionError(f"{q.path}: {q.fact!r} occurs {text.count(q.fact)} times")
        if any(q.fact in part for parts in FILLER[q.lang] for part in parts):
            raise AssertionError(f"{q.fact!r} is in a shared sentence")
