#!/bin/sh
# Publish .deb files into a signed APT repository (aptly), and write what a node needs to
# use it: the public keyring and a deb822 .sources stanza with Signed-By.
#
#   tools/publish-repo.sh [-o OUTDIR] [-k KEYDIR] [-u URI] [-s SUITE] DEB...
#
#   OUTDIR  the repository as it is served: dists/, pool/, plus
#           aks-flex-node-archive-keyring.gpg and aks-flex-node.sources (default build/repo)
#   KEYDIR  where the signing key made here is kept, 0700 (default .cache/repo-key);
#           REPO_KEY=FILE signs with the secret key in FILE instead (armored or binary,
#           REPO_KEY_PASSPHRASE_FILE if it has a passphrase); nothing is kept of it.
#   URI     the URIs: of the .sources stanza (default file:OUTDIR)
#   SUITE   the suite, also its codename (default stable); the component is main
#
# The repository keeps every version it was given (aptly's local repos do; reprepro 5.3.1,
# Debian 12's, keeps one version per package and has no Limit: field), so publishing a new
# version leaves the older ones installable: `apt-get install aks-flex-node=VERSION` and
# upgrade tests need that. aptly's own database and pool stay in OUTDIR/.aptly.
# docs/apt-repository.md is the operator's guide.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/repo
keydir=$top/.cache/repo-key
uri=
suite=stable
component=main
archs=amd64,arm64
name=aks-flex-node

usage() {
	echo "usage: $0 [-o OUTDIR] [-k KEYDIR] [-u URI] [-s SUITE] DEB..." >&2
	exit 2
}
while getopts o:k:u:s: opt; do
	case $opt in
	o) out=$OPTARG ;;
	k) keydir=$OPTARG ;;
	u) uri=$OPTARG ;;
	s) suite=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage
case "$out" in /*) ;; *) out=$(pwd)/$out ;; esac
case "$keydir" in /*) ;; *) keydir=$(pwd)/$keydir ;; esac
uri=${uri:-file:$out}
for deb in "$@"; do
	[ -f "$deb" ] || { echo "publish-repo: $deb: no such .deb file" >&2; exit 2; }
done
case "$suite" in
*[!A-Za-z0-9.-]* | '') echo "publish-repo: suite = '$suite': expected letters, digits, '.' or '-'" >&2; exit 2 ;;
esac
for tool in aptly gpg; do
	command -v $tool >/dev/null || { echo "publish-repo: $tool is missing: apt-get install aptly gnupg (make repo does)" >&2; exit 2; }
done

# --- the signing key --------------------------------------------------------------------
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passphrase=
if [ -n "${REPO_KEY:-}" ]; then
	[ -r "$REPO_KEY" ] || { echo "publish-repo: REPO_KEY = '$REPO_KEY': expected a readable secret key file" >&2; exit 2; }
	GNUPGHOME=$work/gnupg
	mkdir -m 0700 "$GNUPGHOME"
	export GNUPGHOME
	gpg --batch --quiet --import "$REPO_KEY" 2>"$work/import.log" || {
		cat "$work/import.log" >&2
		echo "publish-repo: REPO_KEY = '$REPO_KEY': gpg cannot import it; expected an OpenPGP secret key" >&2
		exit 2
	}
	passphrase=${REPO_KEY_PASSPHRASE_FILE:-}
else
	GNUPGHOME=$keydir/gnupg
	export GNUPGHOME
	if ! [ -d "$GNUPGHOME" ]; then
		mkdir -p "$keydir"
		chmod 0700 "$keydir"
		mkdir -m 0700 "$GNUPGHOME"
		# ed25519, signing only, no passphrase (a CI key; docs/apt-repository.md#key).
		gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
			--quick-gen-key "aks-flex-node test repository <aks-flex-node@lists.example.org>" ed25519 sign 2y
		echo "publish-repo: made a new signing key in $GNUPGHOME" >&2
	fi
fi
fpr=$(gpg --batch --with-colons --list-secret-keys 2>/dev/null | awk -F: '$1 == "fpr" { print $10; exit }')
[ -n "$fpr" ] || { echo "publish-repo: no secret key in $GNUPGHOME" >&2; exit 2; }

# --- the repository ---------------------------------------------------------------------
state=$out/.aptly
mkdir -p "$state"
cat >"$state/aptly.conf" <<EOF
{
  "rootDir": "$state",
  "gpgProvider": "gpg2",
  "architectures": ["amd64", "arm64"],
  "FileSystemPublishEndpoints": {"out": {"rootDir": "$out", "linkMethod": "copy"}}
}
EOF
aptly() { command aptly -config="$state/aptly.conf" "$@"; }

aptly repo show "$name" >/dev/null 2>&1 ||
	aptly repo create -distribution="$suite" -component="$component" "$name" >/dev/null
# -force-replace: a rebuilt .deb of the same version replaces the published one.
aptly repo add -force-replace "$name" "$@" >"$work/add.log" 2>&1 || { cat "$work/add.log" >&2; exit 1; }

sign="-gpg-key=$fpr -batch"
[ -z "$passphrase" ] || sign="$sign -passphrase-file=$passphrase"
# Published afresh each time: a publish update cannot change the suite or the key.
aptly publish drop "$suite" filesystem:out:. >/dev/null 2>&1 || true
aptly publish repo $sign -architectures="$archs" -distribution="$suite" -origin="$name" \
	-label="$name" "$name" filesystem:out:. >"$work/publish.log" 2>&1 ||
	{ cat "$work/publish.log" >&2; exit 1; }

# --- what a node needs ------------------------------------------------------------------
keyring=$out/$name-archive-keyring.gpg
gpg --batch --yes --export "$fpr" >"$keyring.new"
mv "$keyring.new" "$keyring"
cat >"$out/$name.sources" <<EOF
Types: deb
URIs: $uri
Suites: $suite
Components: $component
Signed-By: /usr/share/keyrings/$name-archive-keyring.gpg
EOF
# apt reads file: repositories as the _apt user: everything published is world-readable.
chmod -R a+rX "$out/dists" "$out/pool" "$keyring" "$out/$name.sources"

echo "published into $out (suite $suite, key $fpr):"
aptly repo show -with-packages "$name" | sed -n '/^Packages:/,$p' | tail -n +2
