"""The errors of a download, in a module of their own: the checksum parser (checksums.py)
and the Downloader (download.py) raise the same classes, and neither imports the other.
"""

from aks_flex_node.errors import FlexNodeError, TemporaryError


class DownloadError(FlexNodeError):
    """A download failed for a reason that another try will not fix."""

    code = "download"


class ChecksumMismatch(DownloadError):
    code = "checksum-mismatch"


class DownloadUnavailable(TemporaryError):
    """The server could not be reached or kept failing: try again later."""

    code = "download-unavailable"
