#!/bin/sh
# Build the Arc agent stand-in package (tests/e2e/arc-agent: azcmagent + himdsd, talking to
# the Azure emulator) into OUTDIR, from a temporary copy: the work tree is not written.
# The end-to-end tests publish it next to aks-flex-node, which Recommends azcmagent, so apt
# pulls it from the test repository as it would pull the real one from Microsoft's.
#
#   tools/build-arc-agent.sh [OUTDIR]      (default build/arc-agent)
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build/arc-agent}
case "$out" in /*) ;; *) out=$(pwd)/$out ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

src=$work/azcmagent
cp -r "$top/tests/e2e/arc-agent" "$src"
# The agent's logic is the integration tests' stand-in, unchanged (see the wrapper).
mkdir -p "$src/lib/bin"
cp "$top/tests/fakes/bin/azcmagent" "$src/lib/bin/azcmagent"
cp "$top/tests/fakes/fakelib.py" "$src/lib/fakelib.py"
find "$src" -name __pycache__ -prune -exec rm -rf {} +

cd "$src"
env PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
	dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1 || {
	tail -n 40 "$work/build.log" >&2
	echo "build-arc-agent: dpkg-buildpackage failed" >&2
	exit 1
}
mkdir -p "$out"
rm -f "$out"/azcmagent_*
mv "$work"/azcmagent_*.deb "$out"/
ls "$out"/azcmagent_*.deb
