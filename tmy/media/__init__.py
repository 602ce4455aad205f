"""Pictures and files between platforms and steps: downloading what a message carries
(under a size limit, with the platform's credentials) and loading what a reply sends
(an http(s) URL, a ``data:`` URL, or a file under the rules directory)."""
