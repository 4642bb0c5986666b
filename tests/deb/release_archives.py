"""What each release we serve has in its archive, for the packages our .deb depends on.

The .deb is built once, on Debian 12, and served to Debian 12, Ubuntu 22.04 and Ubuntu 24.04
from one suite (docs/apt-repository.md), so its Depends must be satisfiable from each
release's archive. No Ubuntu archive is reachable from here: the versions are those read on
packages.ubuntu.com, cited per row in docs/ubuntu.md, and Debian 12's from its archive
(apt-cache policy on a Debian 12 machine); the oldest
pocket's version is given (release, else -updates where the release pocket's is not known),
since a node may not have -updates enabled. python3: only the release's Python minor is
known here, not the Debian revision, so "3.10" / "3.12" stand for any 3.10.x / 3.12.x.
"""

# {release: {binary package: version}}; a virtual package maps to None (provided).
ARCHIVES = {
    "Debian 12 (bookworm)": {
        "python3": "3.11.2-1+b1",
        "python3-azure": "20230112+git-1",
        "python3-configobj": "5.0.8-1",
        "python3-yaml": "6.0-3+b2",
        "python3-debconf": "1.5.82",
        "debconf": "1.5.82",
        "debconf-2.0": None,
        "ucf": "3.0043+nmu1+deb12u1",
    },
    "Ubuntu 22.04 (jammy)": {
        "python3": "3.10",
        "python3-azure": "20211104+git-1",
        "python3-configobj": "5.0.6-5ubuntu0.1",  # jammy-updates/-security
        "python3-yaml": "5.4.1-1ubuntu1",
        "python3-debconf": "1.5.79ubuntu1",
        "debconf": "1.5.79ubuntu1",
        "debconf-2.0": None,
        "ucf": "3.0043",
    },
    "Ubuntu 24.04 (noble)": {
        "python3": "3.12",
        "python3-azure": "20230705+git-1",
        "python3-configobj": "5.0.8-3",
        # Not read here: Debian has shipped 6.0 since bookworm and noble was taken from Debian
        # after it, so at least 6.0 (inferred).
        "python3-yaml": "6.0",
        "python3-debconf": "1.5.86ubuntu1",
        "debconf": "1.5.86ubuntu1",
        "debconf-2.0": None,
        "ucf": "3.0043+nmu1",
    },
}
