#!/bin/sh
# Build aks-flex-node_<version>_all.deb into OUTDIR (default build/deb), from a copy of the
# work tree, so the build neither writes next to the repository (dpkg-buildpackage puts its
# results in the parent directory, which CI does not own) nor leaves debian/aks-flex-node,
# .pybuild and *.egg-info in a tree other people are working in.
#
#   tools/build-deb.sh [OUTDIR]
#
# Needs the build dependencies (make deb installs them) and no network. The system python3
# comes first on PATH: a pyenv or /usr/local python3 must not build a Debian package.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build/deb}
case "$out" in /*) ;; *) out=$(pwd)/$out ;; esac
src=$out/src/aks-flex-node

rm -rf "$out"
mkdir -p "$src"
cd "$top"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked and untracked files, minus what .gitignore ignores (build/, venvs, caches).
    git ls-files -z --cached --others --exclude-standard |
        tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$src"
else
    tar --exclude=./build --exclude='./.venv*' --exclude=./.git --exclude=./.pytest_cache \
        --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -xf - -C "$src"
fi

cd "$src"
env PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
    dpkg-buildpackage -us -uc -b >"$out/build.log" 2>&1 || {
    tail -n 40 "$out/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed; the whole log is $out/build.log" >&2
    exit 1
}
mv "$out"/src/aks-flex-node_* "$out"/
rm -rf "$out/src"
ls "$out"/*.deb
