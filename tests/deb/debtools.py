"""Helpers shared by the Debian package tests (reading a built .deb, the system env)."""

import os
import subprocess
from pathlib import Path

from debian.deb822 import PkgRelation

REPO = Path(__file__).resolve().parents[2]
DEBIAN = REPO / "debian"
PACKAGE = "aks-flex-node"
# The package is built and run by Debian's own tools and python3: never a pyenv one.
SYSPATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def system_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH=SYSPATH, LC_ALL="C.UTF-8")
    env.pop("DEBIAN_FRONTEND", None)
    env.update(extra)
    return env


class Built:
    """What tools/build-deb.sh left in a directory: the .deb, the .changes, the log."""

    def __init__(self, out):
        self.out = Path(out)
        debs = sorted(self.out.glob(f"{PACKAGE}_*_all.deb"))
        if len(debs) != 1:
            raise AssertionError(f"expected one {PACKAGE}_<version>_all.deb in {out}, found {debs}")
        self.deb = debs[0]
        self.changes = next(self.out.glob(f"{PACKAGE}_*.changes"))
        self.log = self.out / "build.log"

    def field(self, name):
        return subprocess.run(["dpkg-deb", "-f", str(self.deb), name], check=True,
                              capture_output=True, text=True).stdout.strip()

    def contents(self):
        """{path: (mode, owner/group)} of the data archive, paths as installed (/usr/...)."""
        listing = subprocess.run(["dpkg-deb", "-c", str(self.deb)], check=True,
                                 capture_output=True, text=True).stdout
        entries = {}
        for line in listing.splitlines():
            perms, owner, _size, _date, _time, path = line.split(None, 5)
            path = path.split(" -> ")[0]
            entries["/" + path.lstrip("./").rstrip("/")] = (perms, owner)
        return entries


def depends(field_text):
    """'a (>= 1), b | c' -> {'a': ('(>= 1)', 'a (>= 1)'), 'b': ('', 'b | c')}: each item keyed
    by its first alternative (with its :arch qualifier), parsed by python-debian."""
    out = {}
    for alternatives in PkgRelation.parse_relations(field_text):
        first = alternatives[0]
        name = first["name"] + (f":{first['archqual']}" if first.get("archqual") else "")
        version = f"({first['version'][0]} {first['version'][1]})" if first.get("version") else ""
        out[name] = (version, PkgRelation.str([alternatives]))
    return out


def conf_value(text, key):
    """The last `key = value` in a configuration file's text (what a sh reader sees), or None."""
    value = None
    for line in text.splitlines():
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key:
            value = rest.strip()
    return value
