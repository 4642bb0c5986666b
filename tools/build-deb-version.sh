#!/bin/sh
# Build aks-flex-node as another version, for upgrade tests: a temporary copy of the work
# tree gets a new debian/changelog entry (the tree itself is never touched), and its
# tools/build-deb.sh builds it into OUTDIR.
#
#   tools/build-deb-version.sh VERSION OUTDIR
#
# The version must sort after the tree's own for an upgrade (0.1.0 -> 0.1.0+e2e1).
set -eu

[ $# -eq 2 ] || { echo "usage: $0 VERSION OUTDIR" >&2; exit 2; }
version=$1
out=$2
case "$out" in /*) ;; *) out=$(pwd)/$out ;; esac
# Debian policy 5.6.12: upstream version [A-Za-z0-9.+~-], starting with a digit.
if ! printf '%s\n' "$version" | grep -Eqx '[0-9][A-Za-z0-9.+~-]*'; then
	echo "build-deb-version: VERSION = '$version': expected a Debian version such as 0.1.0+e2e1" >&2
	exit 2
fi

top=$(cd "$(dirname "$0")/.." && pwd)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cd "$top"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard |
		tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$copy"
else
	tar --exclude=./build --exclude='./.venv*' --exclude=./.git --exclude=./.cache \
		--exclude=__pycache__ -cf - . | tar -xf - -C "$copy"
fi

current=$(dpkg-parsechangelog -l "$copy/debian/changelog" -S Version)
if ! dpkg --compare-versions "$version" gt "$current"; then
	echo "build-deb-version: $version does not sort after the tree's $current: no upgrade" >&2
	exit 2
fi
{
	printf 'aks-flex-node (%s) unstable; urgency=medium\n\n' "$version"
	printf '  * Rebuild of %s as %s for upgrade tests (tools/build-deb-version.sh).\n\n' "$current" "$version"
	printf ' -- aks-flex-node maintainers <aks-flex-node@lists.example.org>  %s\n\n' "$(date -R)"
	cat "$copy/debian/changelog"
} >"$copy/debian/changelog.new"
mv "$copy/debian/changelog.new" "$copy/debian/changelog"
# The library reports its own version too (aks-flex-node version): keep it in step.
sed -i "s/^__version__ = .*/__version__ = \"$version\"/" "$copy/aks_flex_node/__init__.py"

"$copy/tools/build-deb.sh" "$out"
