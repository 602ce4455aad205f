"""Where an ``mxc://`` URI is downloaded from (Matrix 1.11's authenticated media)."""

from __future__ import annotations

DOWNLOAD_PATH = "_matrix/client/v1/media/download"


def download_base(api_base: str) -> str:
    """Where ``mxc://server/id`` is downloaded from: ``<base>/<server>/<id>``."""
    return f"{api_base.rstrip('/')}/{DOWNLOAD_PATH}"


def download_url(base: str, mxc: str) -> str:
    """The authenticated download URL of ``mxc`` (``""`` when it is not an mxc URI)."""
    if not mxc.startswith("mxc://") or mxc.count("/") != 3:
        return ""
    server, media_id = mxc[len("mxc://") :].split("/")
    return f"{base}/{server}/{media_id}" if server and media_id else ""
