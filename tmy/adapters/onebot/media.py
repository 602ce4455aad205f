"""Pictures, files, voice and video a OneBot message carries, as :class:`Attachment`.

========  ==============  ===================================================
segment   kind            what is kept
========  ==============  ===================================================
image     image           ``url``, ``file`` (the file id), ``file_size``
mface     sticker         ``url``, ``summary`` as the name (QQ market faces)
record    voice           ``url`` when given, ``file``, ``file_size``
video     video           ``url``, ``file``, ``file_size``
file      file            ``file_id`` (or ``file``), ``file`` as the name, size
========  ==============  ===================================================

``face`` (QQ's small built-in emoji) is no attachment: it stays the ``[face]``
placeholder. The text keeps each segment's placeholder (``[image]``) so a
trigger can still match an image-only message. QQ's media URLs
(``multimedia.nt.qq.com.cn/…&rkey=…``) expire within hours, so every URL is
marked ``inline``: whoever hands it on (an LLM step) downloads it now and
sends the bytes, not the URL.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from tmy.adapters.onebot.codec import Segment
from tmy.message import Attachment

KINDS = {"image": "image", "mface": "sticker", "record": "voice", "video": "video", "file": "file"}


def attachments_of(segments: list[Segment]) -> tuple[Attachment, ...]:
    """The attachments among a message's segments, in order."""
    out = []
    for seg in segments:
        kind = KINDS.get(seg["type"])
        if kind is not None:
            out.append(_attachment(kind, seg["data"]))
    return tuple(out)


def _attachment(kind: str, data: dict[str, str]) -> Attachment:
    url = data.get("url", "")
    file = data.get("file", "")
    if not url and file.startswith(("http://", "https://")):
        url = file  # older implementations put the URL in ``file``
    name = data.get("summary", "") if kind == "sticker" else file
    if name.startswith(("http://", "https://", "base64://", "file://")):
        name = ""
    file_id = data.get("file_id") or (file if file and file != url else "")
    return Attachment(
        kind,
        url=url if url.startswith(("http://", "https://")) else "",
        file_id=file_id,
        size=_size(data.get("file_size") or data.get("size")),
        mime=data.get("mime", "") or _guess(name),
        name=name,
        inline=bool(url),
    )


def _size(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _guess(name: str) -> str:
    return (mimetypes.guess_type(name)[0] or "") if "." in name else ""
