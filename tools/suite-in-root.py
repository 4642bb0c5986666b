#!/usr/bin/python3
"""The library's suite inside a Debian root of another release, on that release's own packages.

    tools/suite-in-root.py --suite trixie --packages 'python3 python3-azure ...' -- -q -n 4 ...

`make test-trixie` runs it: what the package runs on in Debian 13 (its python3, python3-azure,
msal, configobj, ansible-core, ...), not PyPI pins. Everything after `--` goes to pytest.

The root: `mmdebstrap --variant=apt` of the suite (its updates and security archive too) with
the packages named, cached as a directory under .cache/suite-roots/<suite>-<key> (git-ignored;
AKS_FLEX_NODE_SUITE_ROOTS moves it), where key hashes the suite, the APT sources and the
sorted package list: a changed list builds a new root, an unchanged one costs
nothing. The first build needs Debian's archive (a few minutes); runs after it need no
network. Two runs at once: one builds, the other waits for it (a lock beside the root).

The run: `systemd-nspawn` without --boot (no init, no machined: --register=no --as-pid2)
- the root is mounted read-only with a tmpfs above it (--volatile=overlay): what the suite
  writes outside the repository vanishes with the run, so the cache stays as built;
- the repository is bind-mounted at /src (read-write: pytest writes its cache and
  Python 3.13's bytecode there, both git-ignored), and the Azure REST API specs the contract
  tests read (AZURE_REST_SPECS, tests/contract/swagger.py) read-only at their own path;
- --private-network: the suite gets a loopback of its own and nothing else, which proves it
  needs nothing but loopback (the emulator stands for Azure);
- nspawn keeps CAP_SYS_ADMIN in the container, which the tests that mount a tmpfs need.
Exit status: pytest's (1 when a test fails), 2 for a bad argument or a root that cannot be
built, said on stderr.
"""

import argparse
import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
# AKS_FLEX_NODE_SUITE_ROOTS moves the cache (a CI that clones afresh can keep it elsewhere).
CACHE = pathlib.Path(os.environ.get("AKS_FLEX_NODE_SUITE_ROOTS") or REPO / ".cache" / "suite-roots")
# What an installed Debian machine has: the release, its updates and its security archive
# (the .deb runs on the Python and OpenSSL security updates bring).
SOURCES = ("deb http://deb.debian.org/debian {suite} main",
           "deb http://deb.debian.org/debian {suite}-updates main",
           "deb http://deb.debian.org/debian-security {suite}-security main")
SYSPATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SPECS = "/work/shared/azure-rest-specs"  # tests/contract/swagger.py's default
# Always in the root, whatever the caller names: `mount` is Priority: required but not in
# mmdebstrap's apt variant (essential packages and apt only), and the tests that mount a
# tmpfs run it.
ALWAYS = ("mount",)


class RootError(Exception):
    pass


def root_key(suite, packages, sources):
    """The cache key of a root: its suite, APT sources and package set (order and repeats aside)."""
    text = "\n".join((suite, *sources, *sorted(set(packages))))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _mounts_under(path):
    """Mount points at or under `path` (/proc/self/mountinfo's fifth field, octal escapes
    decoded), deepest first."""
    prefix = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def _remove_leftovers(partial):
    """A killed build's tree: its /proc, /sys, /dev mounts (mmdebstrap's root mode) are
    unmounted first, so removing it never reaches into the host's."""
    for point in _mounts_under(partial):
        subprocess.run(["umount", "--lazy", point], check=True, env={"PATH": SYSPATH})
    if _mounts_under(partial):
        raise RootError(f"{partial}: still has mounts under it; not removed")
    shutil.rmtree(partial, ignore_errors=True)


def ensure_root(suite, packages, cache=CACHE, sources=SOURCES):
    """The cached root for `suite` with `packages` (ALWAYS added) from `sources` (APT lines,
    {suite} filled in): built once, then reused."""
    packages = sorted(set(packages) | set(ALWAYS))
    sources = [line.format(suite=suite) for line in sources]
    root = cache / f"{suite}-{root_key(suite, packages, sources)}"
    if (root / "etc/os-release").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "etc/os-release").exists():
            return root  # built by the run we waited for
        partial = root.with_name(root.name + ".partial")
        _remove_leftovers(partial)
        print(f"suite-in-root: building the {suite} root {root.name} (mmdebstrap; once)", file=sys.stderr)
        result = subprocess.run(
            # nice: the build's dpkg runs and byte-compilation (python3-azure alone is
            # hundreds of MB) yield to whatever else runs on the machine.
            ["nice", "-n", "19", "mmdebstrap", "--mode=root", "--variant=apt", "--include=" + ",".join(packages),
             suite, str(partial), *sources],
            capture_output=True, text=True, timeout=1800, env={"PATH": SYSPATH, "LC_ALL": "C.UTF-8"})
        if result.returncode != 0:
            _remove_leftovers(partial)
            raise RootError(f"mmdebstrap could not build the {suite} root (exit {result.returncode}):\n"
                            f"{result.stderr[-3000:]}")
        partial.rename(root)
    return root


def nspawn_argv(root, pytest_args, repo=REPO, tty=False, specs=None):
    """The systemd-nspawn command that runs pytest in `root` on the repository (see above).
    Without a terminal (CI, a log file) the output goes through pipes, not a pseudo-terminal
    (whose colours and carriage returns would fill the log). `specs`: the Azure REST API
    specs the contract tests read from outside the tree (tests/contract/swagger.py), bound
    read-only at the same path."""
    extra = [f"--bind-ro={specs}", f"--setenv=AZURE_REST_SPECS={specs}"] if specs else []
    return ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--as-pid2",
            f"--console={'interactive' if tty else 'pipe'}",
            f"--directory={root}", "--volatile=overlay", "--private-network",
            f"--bind={repo}:/src", "--chdir=/src", *extra,
            f"--setenv=PATH={SYSPATH}", "--setenv=LC_ALL=C.UTF-8", "--setenv=HOME=/root", "--",
            "/usr/bin/python3", "-m", "pytest", *pytest_args]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, help="the Debian release (trixie)")
    parser.add_argument("--packages", required=True,
                        help="space-separated Debian packages the suite needs (the Makefile's APT_DEPS)")
    parser.add_argument("--source", action="append", dest="sources",
                        help="an APT source line ({suite} is filled in), repeatable; default: the release, "
                             "its -updates and -security from deb.debian.org")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("suite-in-root: needs root (mmdebstrap --mode=root, systemd-nspawn)", file=sys.stderr)
        return 2
    for tool in ("mmdebstrap", "systemd-nspawn"):
        if shutil.which(tool, path=SYSPATH) is None:
            print(f"suite-in-root: {tool} not found (apt-get install mmdebstrap systemd-container)", file=sys.stderr)
            return 2
    try:
        root = ensure_root(args.suite, args.packages.split(), sources=args.sources or SOURCES)
    except (RootError, subprocess.TimeoutExpired) as err:
        print(f"suite-in-root: {err}", file=sys.stderr)
        return 2
    release = (root / "etc/debian_version").read_text().strip()
    print(f"suite-in-root: the suite in {root} (Debian {release})", file=sys.stderr)
    env = {"PATH": SYSPATH, "LC_ALL": "C.UTF-8",
           # The node's preflight and some tests read cgroup v2; nspawn gives it the unified
           # hierarchy even on a host that mounts the hybrid one.
           "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    specs = os.environ.get("AZURE_REST_SPECS") or SPECS
    argv = nspawn_argv(root, args.pytest_args, tty=tty, specs=specs if os.path.isdir(specs) else None)
    return subprocess.run(argv, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
