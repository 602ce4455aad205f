"""Pictures an LLM step sends: ``images:`` and ``vision: true``, as OpenAI ``image_url`` parts.

What a step may name (``images:`` evaluates to one of these, or a list of them):

* an ``http(s)`` URL — handed to the provider as it is;
* a ``data:`` URL — handed on as it is (its size checked against ``llm.max_image_bytes``);
* an attachment map as in ``IMAGES`` (``{kind, url, file_id, …}``) — matched to the
  message's own :class:`~tmy.message.Attachment`. When the platform marks it
  ``inline`` (its URL needs credentials or expires) or gives no URL, the platform
  says where it lives (``message.api.media_source``) and tmy downloads it under
  ``llm.max_image_bytes`` and sends a data URL; when the platform's source needs
  headers (a token), likewise; a plain public URL passes as it is. A download goes
  only to public hosts, or those ``limits.media_private_hosts`` or the platform
  (``trusted_media_hosts``) allow (:mod:`tmy.media.hosts`), and what comes back
  must be a picture by its own first bytes (PNG, JPEG, GIF, WebP, BMP, HEIC,
  AVIF): it is sent labelled as what it is, never as its name or header says.

``vision: true`` adds every image attachment of the message (its ``IMAGES``).
At most ``llm.max_images`` pictures go in one request. Every failure is a
step error naming the picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tmy.config.llm import LLMConfig
from tmy.errors import ExecutorError, TmyError
from tmy.media import Media, data_url, download, image_mime, parse_data_url
from tmy.message import Attachment
from tmy.types import StepContext


def wanted(cfg: Mapping[str, Any]) -> bool:
    """Whether the step asks for pictures at all (``vision: true`` or an ``images:`` option)."""
    return bool(cfg.get("vision")) or cfg.get("images") not in (None, "", [])


def check_constant(raw: Any) -> None:
    """A constant ``images:`` value at load time: each text must be an http(s) or data: URL
    (a computed one is checked when the step runs)."""
    for item in raw if isinstance(raw, list) else [raw]:
        if isinstance(item, str) and item and not _is_url(item):
            shown = item if len(item) <= 80 else item[:80] + "…"
            raise ValueError(f"images: {shown!r} is not an http(s) URL or a data: URL")


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://")) or text[:5].lower() == "data:"


def sources(cfg: Mapping[str, Any], attachments: tuple[Attachment, ...]) -> list[Any]:
    """The pictures named by ``vision:`` and ``images:``, in that order, each once."""
    found: list[Any] = []
    if cfg.get("vision"):
        found.extend(a for a in attachments if a.kind == "image")
    raw = cfg.get("images")
    if raw not in (None, "", []):
        found.extend(raw if isinstance(raw, list | tuple) else [raw])
    unique: list[Any] = []
    seen: set[str] = set()
    for item in found:
        key = _key(item)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _key(item: Any) -> str:
    if isinstance(item, Attachment):
        return f"{item.url}\0{item.file_id}"
    if isinstance(item, Mapping):
        return f"{item.get('url') or ''}\0{item.get('file_id') or ''}"
    return str(item)


async def image_parts(ctx: StepContext, cfg: Mapping[str, Any], config: LLMConfig) -> list[Any]:
    """The ``image_url`` content parts for the step's pictures ([] when it names none)."""
    if not wanted(cfg):
        return []
    found = sources(cfg, ctx.message.attachments)
    if len(found) > config.max_images:
        raise ExecutorError(
            f"images: {len(found)} pictures, more than llm.max_images ({config.max_images})"
        )
    parts = []
    for index, item in enumerate(found, 1):
        try:
            url = await _url(ctx, item, config.max_image_bytes)
        except TmyError as exc:
            raise ExecutorError(f"images: picture {index}: {exc}") from None
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


async def _url(ctx: StepContext, item: Any, limit: int) -> str:
    """What the provider is given for one picture: its URL, or a data URL of its bytes."""
    if isinstance(item, Mapping):
        # a map the rule built itself (no attachment of the message): its url is all there is
        attachment = _attachment(ctx.message.attachments, item)
        item = str(item.get("url") or "") if attachment is None else attachment
    if isinstance(item, Attachment):
        return await _attachment_url(ctx, item, limit)
    if not isinstance(item, str):
        raise ExecutorError(
            f"expected a URL, a data: URL or an attachment map (IMAGES), not {type(item).__name__}"
        )
    text = item.strip()
    if text[:5].lower() == "data:":
        parse_data_url(text, limit)  # malformed or too large: said now, not by the provider
        return text
    if _is_url(text):
        return text
    shown = text if len(text) <= 80 else text[:80] + "…"
    raise ExecutorError(f"{shown!r} is not an http(s) URL, a data: URL or an attachment map")


def _attachment(attachments: tuple[Attachment, ...], item: Mapping[str, Any]) -> Attachment | None:
    """The message's attachment a map (from IMAGES) stands for, matched by url and file id."""
    url, file_id = item.get("url") or "", item.get("file_id") or ""
    for att in attachments:
        if (url or file_id) and att.url == url and att.file_id == file_id:
            return att
    return None


async def _attachment_url(ctx: StepContext, att: Attachment, limit: int) -> str:
    """A public URL passes as it is; a credentialed or expiring one is downloaded."""
    api = ctx.message.api
    if not att.inline and att.url:
        return att.url
    if api is None:
        if att.url and att.url.startswith("data:"):
            return att.url
        raise ExecutorError(
            f"the {att.kind} {att.name or att.file_id or att.url!r} must be downloaded "
            "through its platform, and this message has none"
        )
    url, headers = await api.media_source(att)
    if url.startswith("data:"):
        return _as_picture(att, parse_data_url(url, limit))
    if not (att.inline or headers):
        return url
    media = await download(ctx.services.http, url, headers, limit, private_hosts=_private(ctx))
    return _as_picture(att, media)


def _private(ctx: StepContext) -> tuple[str, ...]:
    """The hosts a platform's picture may come from although private: the operator's
    ``limits.media_private_hosts`` and the platform API's own ``trusted_media_hosts``
    (an optional attribute of :class:`~tmy.types.PlatformApi`: the hosts its
    ``media_source`` URLs are built on by the adapter itself, e.g. Telegram's
    configured ``api_base``; default none)."""
    trusted = getattr(ctx.message.api, "trusted_media_hosts", ()) or ()
    return (*ctx.services.settings.limits.media_private_hosts, *trusted)


def _as_picture(att: Attachment, media: Media) -> str:
    """A data URL of ``media`` labelled with the format its bytes are; a body that is no
    picture (a page, a JSON answer relabelled by its name) is refused."""
    mime = image_mime(media.data)
    if mime is None:
        shown = att.name or att.file_id or "picture"
        raise ExecutorError(
            f"the {att.kind} {shown!r} is not a picture: its bytes are none of PNG, JPEG, "
            f"GIF, WebP, BMP, HEIC or AVIF (it came as {media.mime}); not sent"
        )
    return data_url(Media(media.data, mime))
