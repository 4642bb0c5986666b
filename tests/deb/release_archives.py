"""What each release we serve has in its archive, for the packages our .deb depends on.

The .deb is built once, on Debian 12, and served to Debian 12 and 13, Ubuntu 22.04, 24.04 and
26.04 from one suite (docs/apt-repository.md), so its Depends must be satisfiable from
each release's archive. Ubuntu 22.04's and 24.04's versions are those read on
packages.ubuntu.com, cited per row in docs/ubuntu.md, 26.04's (and noble's python3-yaml) from
Ubuntu's archive's Packages files (docs/ubuntu.md); Debian 12's from its archive
(apt-cache policy on a Debian 12 machine), Debian 13's from its archive's Packages files
(dists/trixie/main/binary-{amd64,all}/Packages, at 13.8; tests/deb/test_install.py installs
the .deb on both from the archive itself); the oldest
pocket's version is given (release, else -updates where the release pocket's is not known),
since a node may not have -updates enabled. python3: only the release's Python minor is
known here, not the Debian revision, so "3.10" / "3.12" stand for any 3.10.x / 3.12.x.
"""

# {release: {binary package: version}}; a virtual package maps to None (provided).
# python3-cryptography (an explicit dependency since the health/ package reads certificate
# expiries; python3-azure's msal pulled it in before): read 2026-11-27 from each archive's
# dists/<release>/main/binary-amd64/Packages (deb.debian.org, archive.ubuntu.com).
ARCHIVES = {
    "Debian 12 (bookworm)": {
        "python3": "3.11.2-1+b1",
        "python3-azure": "20230112+git-1",
        "python3-configobj": "5.0.8-1",
        "python3-cryptography": "38.0.4-3+deb12u1",
        "python3-yaml": "6.0-3+b2",
        "python3-debconf": "1.5.82",
        "debconf": "1.5.82",
        "debconf-2.0": None,
        "ucf": "3.0043+nmu1+deb12u1",
    },
    "Debian 13 (trixie)": {
        "python3": "3.13.5-1",
        "python3-azure": "20250603+git-1",
        "python3-configobj": "5.0.9-1",
        "python3-cryptography": "43.0.0-3+deb13u1",
        "python3-yaml": "6.0.2-1+b2",
        "python3-debconf": "1.5.91",
        "debconf": "1.5.91",
        "debconf-2.0": None,
        "ucf": "3.0052",
    },
    "Ubuntu 22.04 (jammy)": {
        "python3": "3.10",
        "python3-azure": "20211104+git-1",
        "python3-configobj": "5.0.6-5ubuntu0.1",  # jammy-updates/-security
        "python3-cryptography": "3.4.8-1ubuntu2",
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
        "python3-cryptography": "41.0.7-4build3",
        # Read from noble's archive index (dists/noble/main/binary-amd64/Packages), 2026-11-27.
        "python3-yaml": "6.0.1-2build2",
        "python3-debconf": "1.5.86ubuntu1",
        "debconf": "1.5.86ubuntu1",
        "debconf-2.0": None,
        "ucf": "3.0043+nmu1",
    },
    # Read from Ubuntu's archive itself (dists/resolute/{main,universe}/binary-amd64/Packages,
    # Release signed 2026-04-23; docs/ubuntu.md): the release pocket's versions.
    "Ubuntu 26.04 (resolute)": {
        "python3": "3.14.3-0ubuntu2",
        "python3-azure": "20260303+git-1",
        "python3-configobj": "5.0.9-1build1",
        "python3-cryptography": "46.0.5-1ubuntu2",
        "python3-yaml": "6.0.3-1build1",
        "python3-debconf": "1.5.92",
        "debconf": "1.5.92",
        "debconf-2.0": None,
        "ucf": "3.0052ubuntu1",
    },
}
