"""Everything that touches the machine: the root prefix, the only subprocess caller,
atomic file writes, mounts, systemd, kernel settings, downloads with checksums, tar reads.

No Azure SDK here (docs/design.md, module table). Names are loaded on first use (PEP 562),
so `aks-flex-node token` can take `host.fs` without paying for tarfile, ssl and the rest.
"""

_WHERE = {
    "ArchiveError": "archive",
    "Azcmagent": "azcmagent", "AzcmagentError": "azcmagent",
    "ChecksumMismatch": "download_errors", "DownloadError": "download_errors",
    "DownloadUnavailable": "download_errors", "Downloader": "download",
    "HostFileError": "fs",
    "Kernel": "kernel", "comment_out_swap": "kernel",
    "Mount": "mounts", "MountinfoError": "mounts",
    "HOST_BIN_ENV": "root", "Host": "root",
    "CommandError": "run", "CommandNotFound": "run", "CommandTimeout": "run", "RunResult": "run",
    "SkippedRun": "run",
    "Systemd": "systemd", "unit_name": "systemd",
}

__all__ = sorted(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Here, not at the top: `token`'s cached answer takes host.careful_read and, on Python 3.10,
    # would otherwise load importlib with it (cached_token.py: nothing beyond json, os and time).
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
