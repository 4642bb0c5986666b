"""Everything that touches the machine: the root prefix, the only subprocess caller,
atomic file writes, systemd, kernel settings, downloads with checksums, tar installs.

No Azure SDK here (docs/design.md, module table).
"""

from aks_flex_node.host.archive import ArchiveError, members_under, read_members
from aks_flex_node.host.download import (
    ChecksumMismatch,
    DownloadError,
    Downloader,
    DownloadUnavailable,
)
from aks_flex_node.host.fs import HostFileError
from aks_flex_node.host.kernel import Kernel, comment_out_swap
from aks_flex_node.host.root import HOST_BIN_ENV, Host
from aks_flex_node.host.run import (
    CommandError,
    CommandNotFound,
    CommandTimeout,
    RunResult,
    SkippedRun,
)
from aks_flex_node.host.systemd import Systemd, unit_name

__all__ = [
    "ArchiveError", "ChecksumMismatch", "CommandError", "CommandNotFound", "CommandTimeout",
    "DownloadError", "DownloadUnavailable", "Downloader", "HOST_BIN_ENV", "Host",
    "HostFileError", "Kernel", "RunResult", "SkippedRun", "Systemd", "comment_out_swap",
    "members_under", "read_members", "unit_name",
]
