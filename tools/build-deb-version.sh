#!/bin/sh
# Build aks-flex-node as another version, for upgrade tests: tools/build-deb.sh with
# DEB_VERSION, so its copy of the work tree gets a new debian/changelog entry (the tree
# itself is never touched).
#
#   tools/build-deb-version.sh VERSION OUTDIR
#
# The version must sort after the tree's own for an upgrade (0.1.0 -> 0.1.0+e2e1).
set -eu

[ $# -eq 2 ] || { echo "usage: $0 VERSION OUTDIR" >&2; exit 2; }
# Debian policy 5.6.12: upstream version [A-Za-z0-9.+~-], starting with a digit.
if ! printf '%s\n' "$1" | grep -Eqx '[0-9][A-Za-z0-9.+~-]*'; then
	echo "build-deb-version: VERSION = '$1': expected a Debian version such as 0.1.0+e2e1" >&2
	exit 2
fi
DEB_VERSION=$1 exec "$(dirname "$0")/build-deb.sh" "$2"
