"""Structured replies: a step result map that carries images, files, mentions, a quote, buttons.

A run whose ``STEP_RESULT`` is a map made only of the keys below (and at least
one besides ``text``) answers ``PRE_ANSWER + text + POST_ANSWER`` plus an
:class:`~tmy.message.Outgoing` the adapter sends natively (OneBot segments,
Telegram ``sendPhoto`` and inline keyboards, Discord attachments and
components), falling back to the text where its platform cannot::

    {"text": "Here it is", "image": "https://…/cat.png", "reply": true,
     "buttons": [[{"text": "Again", "data": "again"}], [{"text": "Docs", "url": "https://…"}]]}

=============== ==============================================================
``text``        the reply text (PRE/POST_ANSWER around it); may be left out
``image(s)``    one or a list: http(s) URLs, data: URLs, paths under the rules
                folder, or attachment maps (IMAGES) whose ``url`` is taken
``file(s)``     the same, sent as files
``mention(s)``  user ids to @ (numbers are taken as text)
``reply``       ``true``: quote the message being answered; text: that message id
``buttons``     rows (a list of lists) or one row (a flat list); a button is
                ``{text, data}`` (pressing it sends a ``button`` event with
                ``data``), ``{text, url}`` (opens a link) or ``"text"`` (data = text)
=============== ==============================================================

Any other map (one with a key not listed, or only ``text``) renders as it did
before: as text. A structured map with a wrong part (a button without text, an
image that is a number) is an EvalError: the run fails with that message
instead of sending half a reply.
"""

from __future__ import annotations

from typing import Any

from tmy.errors import EvalError
from tmy.message import Button, Outgoing

STRUCTURED_KEYS = frozenset(
    ("text", "image", "images", "file", "files", "mention", "mentions", "reply", "buttons")
)
MAX_BUTTON_DATA = 64  # bytes: Telegram's callback_data limit, the smallest of the platforms
MAX_PARTS = 20  # images, files, mentions or buttons in one reply


def outgoing_of(result: Any) -> tuple[Any, Outgoing] | None:
    """``(text, Outgoing)`` when ``result`` is a structured reply map, else None.

    ``text`` is the map's ``text`` (``""`` when it has none), still to be put
    between PRE_ANSWER and POST_ANSWER. EvalError when a part is malformed.
    """
    if type(result) is not dict or not result or not result.keys() <= STRUCTURED_KEYS:
        return None
    if set(result) == {"text"}:
        return None
    out = Outgoing(
        images=_sources(result, "image", "images"),
        files=_sources(result, "file", "files"),
        mentions=_mentions(result),
        reply_to=_reply(result.get("reply")),
        buttons=_buttons(result.get("buttons")),
    )
    return result.get("text", ""), out


def outgoing_from_dict(data: Any) -> Outgoing | None:
    """An :class:`Outgoing` back from its ``as_dict()`` form (a stored cron post), or None."""
    if not isinstance(data, dict):
        return None
    rows = [
        [Button(str(b.get("text", "")), str(b.get("data", "")), str(b.get("url", ""))) for b in row]
        for row in data.get("buttons") or []
    ]
    out = Outgoing(
        images=list(data.get("images") or []),
        files=list(data.get("files") or []),
        mentions=list(data.get("mentions") or []),
        reply_to=data.get("reply_to"),
        buttons=rows,
    )
    return out or None


def _listed(result: dict[str, Any], one: str, many: str) -> list[Any]:
    if one in result and many in result:
        raise EvalError(f"a reply map has '{one}' or '{many}', not both")
    value = result.get(one, result.get(many))
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_PARTS:
        raise EvalError(f"a reply carries at most {MAX_PARTS} {many}, got {len(items)}")
    return items


def _sources(result: dict[str, Any], one: str, many: str) -> list[str]:
    out = []
    for item in _listed(result, one, many):
        source = item.get("url") if isinstance(item, dict) else item
        if not isinstance(source, str) or not source:
            raise EvalError(
                f"reply {many}: each is a URL, a data: URL or a path under the rules folder "
                f"(or a map with a url), got {item!r}"
            )
        out.append(source)
    return out


def _mentions(result: dict[str, Any]) -> list[str]:
    out = []
    for item in _listed(result, "mention", "mentions"):
        if isinstance(item, bool) or not isinstance(item, (str, int)) or item == "":
            raise EvalError(f"reply mentions: each is a user id, got {item!r}")
        out.append(str(item))
    return out


def _reply(value: Any) -> str | None:
    if value is None or value is False:
        return None
    if value is True:
        return ""  # the message being answered
    if isinstance(value, (str, int)) and value != "":
        return str(value)
    raise EvalError(f"reply 'reply' is true (quote the message) or a message id, got {value!r}")


def _buttons(value: Any) -> list[list[Button]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise EvalError(f"reply buttons: a list of rows (or one row), got {value!r}")
    rows = value if value and all(isinstance(r, list) for r in value) else [value]
    out = [[_button(b) for b in row] for row in rows if row]
    if sum(map(len, out)) > MAX_PARTS:
        raise EvalError(f"a reply carries at most {MAX_PARTS} buttons")
    return out


def _button(spec: Any) -> Button:
    if isinstance(spec, str) and spec:
        spec = {"text": spec, "data": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("text"), str) or not spec["text"]:
        raise EvalError(f"reply button: {{text, data}}, {{text, url}} or a text, got {spec!r}")
    unknown = set(spec) - {"text", "data", "url"}
    if unknown:
        raise EvalError(f"reply button {spec['text']!r}: unknown key {sorted(unknown)[0]!r}")
    data, url = spec.get("data", ""), spec.get("url", "")
    if not isinstance(data, str) or not isinstance(url, str):
        raise EvalError(f"reply button {spec['text']!r}: data and url are text")
    if data and url:
        raise EvalError(f"reply button {spec['text']!r}: data or url, not both")
    if not url:
        data = data or spec["text"]
        if len(data.encode()) > MAX_BUTTON_DATA:
            raise EvalError(
                f"reply button {spec['text']!r}: data is at most {MAX_BUTTON_DATA} bytes "
                "(Telegram's limit)"
            )
    return Button(spec["text"], data, url)
