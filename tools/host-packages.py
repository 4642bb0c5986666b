#!/usr/bin/python3
"""Whether every package the Makefile installs on a build and test host exists in a Debian
release's archive: the README promises its commands on a fresh Debian 12 or 13 machine.

    tools/host-packages.py --suite bookworm --suite trixie PACKAGE...

`make check-host-packages` passes the Makefile's own lists (HOST_PACKAGES). The archive's
index is read as apt reads it, `dists/<suite>/main/binary-amd64/Packages.xz` (it lists the
Architecture: all packages too), plus the suite's -updates; a name counts when a package has
it or provides it. Exit status: 0 when every one is there, 1 naming what is missing where,
2 when an index cannot be read (said on stderr).
"""

import argparse
import lzma
import sys
import urllib.request

MIRROR = "http://deb.debian.org/debian"
INDEX_BYTES = 64 << 20  # an uncompressed Packages index is about 50 MB for main/amd64


def names_in(packages_text):
    """The package names a Packages index offers: each stanza's Package and Provides."""
    offered = set()
    for line in packages_text.splitlines():
        if line.startswith("Package:"):
            offered.add(line.split(":", 1)[1].strip())
        elif line.startswith("Provides:"):
            for item in line.split(":", 1)[1].split(","):
                offered.add(item.strip().split(" ", 1)[0])
    return offered


def index(mirror, suite):
    url = f"{mirror}/dists/{suite}/main/binary-amd64/Packages.xz"
    with urllib.request.urlopen(url, timeout=120) as answer:
        raw = answer.read(INDEX_BYTES)
    return lzma.decompress(raw).decode("utf-8", "replace")


def missing(wanted, offered):
    return sorted(set(wanted) - offered)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", action="append", required=True)
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("packages", nargs="+")
    args = parser.parse_args(argv)
    failed = False
    for suite in args.suite:
        offered = set()
        for pocket in (suite, f"{suite}-updates"):
            try:
                offered |= names_in(index(args.mirror, pocket))
            except (OSError, lzma.LZMAError) as err:
                if pocket == suite:
                    print(f"host-packages: cannot read {suite}'s index from {args.mirror}: {err}", file=sys.stderr)
                    return 2
        gone = missing(args.packages, offered)
        if gone:
            failed = True
            print(f"{suite}: not in the archive: {' '.join(gone)}")
        else:
            print(f"{suite}: all {len(set(args.packages))} packages the Makefile installs are in the archive")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
