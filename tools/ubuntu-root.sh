#!/bin/sh
# The library's suite on an Ubuntu release's own packages, in a throwaway root of that release
# (docs/ubuntu.md). Used by `make test-ubuntu-resolute`.
#
#   tools/ubuntu-root.sh build CACHE     CACHE/root: resolute (-updates, -security) from
#                                        Ubuntu's archive, made with mmdebstrap; CACHE/versions
#                                        lists what it holds (dpkg-query)
#   tools/ubuntu-root.sh built CACHE     exit 0 when CACHE/root holds what `build` would make
#                                        now (same suite, mirror, key and packages), else 1
#   tools/ubuntu-root.sh run CACHE ARGS  python3 -m pytest ARGS inside CACHE/root
#                                        (systemd-nspawn), on this work tree bound at /src
#
# Why a root and not a venv: Ubuntu 26.04's Python (3.14) is not on this machine, and its
# archive is: so the suite runs on Ubuntu's own python3.14, python3-azure, python3-msal ... (the
# stack our .deb runs on there), not on PyPI stand-ins.
#
# Trust: resolute's Release files are signed by the "Ubuntu Archive Automatic Signing Key
# (2018)", whose fingerprint is pinned below; the key itself is taken from resolute's
# ubuntu-keyring package and used only if its fingerprint is that one.
set -eu

MIRROR=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
SUITE=resolute
KEY_FPR=F6ECB3762474EDA9D21B7022871920D1991BC93C
KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1build1_all.deb
# What the suite needs (the Makefile's NOT_ON_OTHER_STACKS selection): the library's own
# dependencies as our .deb names them, the tests' tools (Ubuntu's builds too), and `mount`
# (Priority: required, but outside mmdebstrap's apt variant; the tests mount tmpfs).
PACKAGES="python3 python3-azure python3-msal python3-configobj python3-yaml python3-debian \
python3-cryptography python3-requests python3-kubernetes python3-pytest python3-pytest-xdist \
openssl tinyproxy-bin mount"

usage() {
    echo "usage: $0 build CACHE | built CACHE | run CACHE [PYTEST_ARGS...]" >&2
    exit 2
}

# What a root is made of: a root whose CACHE/made says otherwise is made again.
recipe() {
    echo "$SUITE $MIRROR $KEY_FPR $KEYRING_DEB" $PACKAGES
}

built() {
    [ -f "$1/made" ] && [ "$(cat "$1/made")" = "$(recipe)" ]
}

build() {
    cache=$1
    mkdir -p "$cache"
    cache=$(realpath "$cache")  # apt's signed-by takes an absolute path
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    keyring=$cache/ubuntu-archive-2018.gpg
    curl -fsS --retry 3 -o "$tmp/keyring.deb" "$MIRROR/$KEYRING_DEB"
    dpkg-deb -x "$tmp/keyring.deb" "$tmp/keyring"
    mkdir -m 700 "$tmp/gnupg"
    gpg -q --homedir "$tmp/gnupg" --import "$tmp/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg"
    gpg -q --homedir "$tmp/gnupg" --export "$KEY_FPR" > "$tmp/key.gpg"
    if ! gpg --homedir "$tmp/gnupg" --show-keys --with-colons "$tmp/key.gpg" | grep -qx "fpr:::::::::$KEY_FPR:"; then
        echo "$0: $MIRROR/$KEYRING_DEB holds no key $KEY_FPR (Ubuntu's 2018 archive key)" >&2
        exit 1
    fi
    mv "$tmp/key.gpg" "$keyring"
    rm -rf "$cache/root" "$cache/versions" "$cache/made"
    # nice: the build's dpkg and byte-compilation (python3-azure is 580 MB installed) yield to
    # whatever else runs here.
    nice -n 19 mmdebstrap --variant=apt --components=main,universe \
        --include="$(echo $PACKAGES | tr ' ' ,)" \
        --aptopt='Acquire::Languages "none"' \
        --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" > "$1/.versions"' \
        "$SUITE" "$cache/root" \
        "deb [signed-by=$keyring] $MIRROR $SUITE main universe" \
        "deb [signed-by=$keyring] $MIRROR $SUITE-updates main universe" \
        "deb [signed-by=$keyring] $MIRROR $SUITE-security main universe"
    mv "$cache/root/.versions" "$cache/versions"
    recipe > "$cache/made"
}

run() {
    root=$1/root
    shift
    [ -x "$root/usr/bin/python3" ] || { echo "$0: no root at $root: run '$0 build $1' first" >&2; exit 1; }
    # As tools/suite-in-root.py runs Debian's roots (make test-trixie): no init; the root
    # read-only under a tmpfs (what the suite writes outside /src vanishes with the run); a
    # loopback of its own and no other network; CAP_SYS_ADMIN kept for the tests that mount
    # a tmpfs; cgroup v2 whatever the host mounts.
    # The contract tests read the Azure REST API specs from outside the tree
    # (tests/contract/swagger.py): they are bound read-only at the same path.
    specs=${AZURE_REST_SPECS:-/work/shared/azure-rest-specs}
    set -- -- /usr/bin/python3 -m pytest "$@"
    if [ -d "$specs" ]; then
        set -- --bind-ro="$specs" --setenv=AZURE_REST_SPECS="$specs" "$@"
    fi
    SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 exec systemd-nspawn --quiet --register=no --keep-unit --as-pid2 \
        --directory="$root" --volatile=overlay --private-network \
        --bind="$(pwd):/src" --chdir=/src \
        --setenv=PATH=/usr/sbin:/usr/bin:/sbin:/bin --setenv=LC_ALL=C.UTF-8 --setenv=HOME=/root "$@"
}

[ $# -ge 2 ] || usage
command=$1
shift
case $command in
    build) build "$1" ;;
    built) built "$1" ;;
    run) run "$@" ;;
    *) usage ;;
esac
