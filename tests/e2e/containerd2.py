"""A containerd 2.x for the GPU scenario: Debian forky's own containerd .deb, fetched by an
apt of its own that checks the archive's signature, kept in the e2e cache.

Why forky: the GPU scenario's containerd must merge our NVIDIA drop-in into config.toml key
by key, which containerd does from 2.0 on (containerd PR #9982); bookworm ships 1.6 and
trixie 1.7, which replace the whole CRI table with the imported one (docs/gpu.md).
Debian forky has containerd 2.x (2.1.9+ds1-5 when this was written: Depends: runc,
libc6 (>= 2.34); bookworm's libc is 2.36 and trixie's 2.41, so its binaries run on both
nodes). tests/e2e/mirror.py repacks its bin/ as the upstream release tarball, as it does
each release's own containerd.

    deb = containerd2.deb()        # CACHE/containerd2-<key>/containerd_<version>_amd64.deb

How the .deb is trusted: an isolated apt configuration (APT_CONFIG names a file of ours, so
nothing of the host's /etc/apt is read) whose one source is forky's main, `signed-by`
Debian's archive keyring (debian-archive-keyring, the host's). `apt-get update` checks the
InRelease signature and `apt-get download` the .deb's SHA256 against the signed Packages
index (apt-secure(8)); the .deb is moved into the cache only after apt accepted it.
Acquire::Check-Valid-Until is off: the archive this runs against may be a snapshot whose
Release is past its Valid-Until (testing's is a week ahead; a snapshot is older), and that
check guards against a replayed index, not a forged one: the signature is still checked
(apt.conf(5), Acquire::Check-Valid-Until).

A second run finds the verified .deb in the cache and asks the archive nothing. The cache
key covers the mirror, the suite, the package and the architecture: a change of any of them
fetches again. If forky's containerd is no longer 2.x, that is an error saying so; only an
archive that cannot be reached makes the scenario skip (ArchiveUnreachable), saying why.
"""

import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

from tests.e2e import container as ct

SUITE = "forky"
PACKAGE = "containerd"
ARCH = "amd64"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"  # debian-archive-keyring
MIN_MAJOR = 2
# What apt prints when it cannot reach the archive at all (apt's acquire methods' messages:
# "Could not resolve", "Could not connect to", "Temporary failure resolving", "Connection
# failed"): only then is the scenario skipped.
UNREACHABLE = re.compile(r"Could not resolve|Could not connect|Temporary failure resolving|Connection failed|"
                         r"Network is unreachable|No route to host")


class ArchiveUnreachable(ct.E2EError):
    """Debian's archive did not answer: the scenario cannot get a containerd 2.x."""


def cache_dir(cache=ct.CACHE, mirror=ct.MIRROR):
    key = hashlib.sha256(json.dumps([mirror, SUITE, PACKAGE, ARCH]).encode()).hexdigest()[:12]
    return pathlib.Path(cache) / f"containerd2-{key}"


def _apt_config(work, mirror):
    """The isolated apt: its own sources, state, cache and (no) configuration parts."""
    for sub in ("etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d", "etc/trusted.gpg.d",
                "state/lists/partial", "cache/archives/partial"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    (work / "etc/sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror} {SUITE} main\n")
    config = work / "apt.conf"
    config.write_text("".join(f'{key} "{value}";\n' for key, value in (
        ("Dir::Etc", work / "etc"),
        ("Dir::Etc::SourceList", work / "etc/sources.list"),
        ("Dir::Etc::SourceParts", work / "etc/sources.list.d"),
        ("Dir::Etc::Parts", work / "etc/apt.conf.d"),
        ("Dir::Etc::PreferencesParts", work / "etc/preferences.d"),
        ("Dir::Etc::TrustedParts", work / "etc/trusted.gpg.d"),
        ("Dir::State", work / "state"),
        ("Dir::State::status", "/dev/null"),
        ("Dir::Cache", work / "cache"),
        ("APT::Architecture", ARCH),
        ("Acquire::Languages", "none"),
        ("Acquire::Check-Valid-Until", "false"),
        # The download directory is root's own temporary one: apt's _apt user need not reach it.
        ("APT::Sandbox::User", "root"),
    )))
    return config


def _apt(config, argv, cwd=None):
    env = ct.system_env(APT_CONFIG=str(config))
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)


def _candidate(config):
    """The candidate version of PACKAGE in the fetched index, or None."""
    shown = _apt(config, ["apt-cache", "policy", PACKAGE])
    match = re.search(r"Candidate:\s*(\S+)", shown.stdout)
    return match.group(1) if match and match.group(1) != "(none)" else None


def deb(cache=ct.CACHE, mirror=ct.MIRROR):
    """The path of forky's containerd .deb (2.x), verified by apt; cached."""
    where = cache_dir(cache, mirror)
    where.mkdir(parents=True, exist_ok=True)
    # Several test workers start at once: one fetches, the others wait for it.
    with open(where / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(where.glob(f"{PACKAGE}_*_{ARCH}.deb"))
        return found[-1] if found else _fetch(where, mirror)


def _fetch(where, mirror):
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        work = pathlib.Path(tmp)
        config = _apt_config(work, mirror)
        update = _apt(config, ["apt-get", "-q", "update"])
        said = update.stdout + update.stderr
        version = _candidate(config)
        if version is None:
            if UNREACHABLE.search(said):
                raise ArchiveUnreachable(f"{mirror} ({SUITE}) could not be reached, so no containerd 2.x for the "
                                         f"GPU scenario: {said.strip()[-600:]}")
            raise ct.E2EError(f"no {PACKAGE} in {mirror} {SUITE} main (apt-get update exited "
                              f"{update.returncode}): {said.strip()[-1500:]}")
        major = re.match(r"^(?:\d+:)?(\d+)\.", version)
        if not major or int(major.group(1)) < MIN_MAJOR:
            raise ct.E2EError(f"{SUITE}'s {PACKAGE} is {version}, not {MIN_MAJOR}.x: the GPU scenario needs a "
                              f"containerd that merges imported config files (2.0 or later); find another source "
                              f"of a 2.x .deb for tests/e2e/containerd2.py")
        out = work / "download"
        out.mkdir()
        got = _apt(config, ["apt-get", "-q", "download", f"{PACKAGE}={version}"], cwd=out)
        files = sorted(out.glob(f"{PACKAGE}_*_{ARCH}.deb"))
        if got.returncode != 0 or len(files) != 1:
            raise ct.E2EError(f"apt-get download {PACKAGE}={version} exited {got.returncode}:\n"
                              f"{(got.stdout + got.stderr).strip()[-1500:]}")
        target = where / files[0].name
        # Whole or not at all: only a file apt accepted gets the cached name.
        shutil.move(str(files[0]), str(target.with_suffix(".partial")))
        os.replace(target.with_suffix(".partial"), target)
        return target
