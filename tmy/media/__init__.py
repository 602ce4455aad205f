"""Pictures and files between platforms and steps: downloading what a message carries
(under a size limit, with the platform's credentials, from public hosts only) and
loading what a reply sends (an http(s) URL, a ``data:`` URL, or a file under
``media/`` in the rules directory).

This package sits below config: limits and the rules directory are arguments.
"""

from tmy.media.dataurl import Media, MediaError, data_url, image_mime, parse_data_url, sniff
from tmy.media.fetch import MAX_REDIRECTS, download, load
from tmy.media.hosts import PRIVATE_HOSTS_KEY, check_url, is_allowed, why_blocked
from tmy.media.local import inside, media_dir, read_file, reply_file

__all__ = [
    "MAX_REDIRECTS",
    "PRIVATE_HOSTS_KEY",
    "Media",
    "MediaError",
    "check_url",
    "data_url",
    "download",
    "image_mime",
    "inside",
    "is_allowed",
    "load",
    "media_dir",
    "parse_data_url",
    "read_file",
    "reply_file",
    "sniff",
    "why_blocked",
]
