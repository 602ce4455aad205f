"""Pictures and files between platforms and steps: downloading what a message carries
(under a size limit, with the platform's credentials) and loading what a reply sends
(an http(s) URL, a ``data:`` URL, or a file under the rules directory).

This package sits below config: limits and the rules directory are arguments.
"""

from tmy.media.dataurl import Media, MediaError, data_url, parse_data_url, sniff
from tmy.media.fetch import download, inside, load, read_file

__all__ = [
    "Media",
    "MediaError",
    "data_url",
    "download",
    "inside",
    "load",
    "parse_data_url",
    "read_file",
    "sniff",
]
