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


class LocalFileError(DownloadError):
    """A local mirror's file (file://) that cannot be read as a release artifact: missing, a
    link, a directory, FIFO or device in its place (careful_read's `reason`: absent,
    symlink, not-regular, cannot-open, too-large). `field` is the setting that named it."""

    code = "mirror-file"

    def __init__(self, field, url, path, why, reason):
        super().__init__(
            f"cannot read {path}, which {field} ({url}) names: {why}",
            remedy=f"check that the mirror is mounted and holds {path} as a regular file "
                   "(`aks-flex-node mirror sync` writes it: docs/air-gapped.md)")
        self.field, self.path, self.reason = field, path, reason

    def to_dict(self):
        return dict(super().to_dict(), field=self.field, path=self.path, reason=self.reason)
