#!/bin/sh
# Build aks-flex-node_<version>_all.deb into OUTDIR (default build/deb), from a copy of the
# work tree, so the build neither writes next to the repository (dpkg-buildpackage puts its
# results in the parent directory, which CI does not own) nor leaves debian/aks-flex-node,
# .pybuild and *.egg-info in a tree other people are working in.
#
#   tools/build-deb.sh [OUTDIR]
#
# DEB_VERSION=V builds the copy as version V (tools/build-deb-version.sh, for upgrade tests):
# its debian/changelog gets an entry for V and the library's __version__ follows.
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
if [ -n "${DEB_VERSION:-}" ]; then
    current=$(dpkg-parsechangelog -S Version)
    if ! dpkg --compare-versions "$DEB_VERSION" gt "$current"; then
        echo "build-deb: $DEB_VERSION does not sort after the tree's $current: no upgrade" >&2
        exit 2
    fi
    {
        printf 'aks-flex-node (%s) unstable; urgency=medium\n\n' "$DEB_VERSION"
        printf '  * Rebuild of %s as %s for upgrade tests (tools/build-deb-version.sh).\n\n' "$current" "$DEB_VERSION"
        printf ' -- aks-flex-node maintainers <aks-flex-node@lists.example.org>  %s\n\n' "$(date -R)"
        cat debian/changelog
    } >debian/changelog.new
    mv debian/changelog.new debian/changelog
    # The library reports its own version too (aks-flex-node version): keep it in step.
    sed -i "s/^__version__ = .*/__version__ = \"$DEB_VERSION\"/" aks_flex_node/__init__.py
fi
env PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
    dpkg-buildpackage -us -uc -b >"$out/build.log" 2>&1 || {
    tail -n 40 "$out/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed; the whole log is $out/build.log" >&2
    exit 1
}
mv "$out"/src/aks-flex-node_* "$out"/
rm -rf "$out/src"
ls "$out"/*.deb
