# Every target that needs something installs it first: a fresh Debian 12 / Ubuntu machine needs
# nothing else than `make`. The package runs on /usr/bin/python3 and Debian's modules, so the
# default test run uses those; `make test-pypi` repeats the suite with the current PyPI SDKs.
SYSPATH := /usr/sbin:/usr/bin:/sbin:/bin
PY := /usr/bin/python3
VENV := .venv-pypi
APT_DEPS := python3 python3-azure python3-configobj python3-yaml python3-debian python3-pytest \
            python3-cryptography python3-requests python3-venv python3-pip openssl \
            tinyproxy-bin debconf-utils ucf po-debconf python3-debconf python3-pytest-xdist \
            ansible-core ansible-lint python3-wheel python3-setuptools python3-kubernetes
# tinyproxy-bin: the proxy binary alone (no system service); tests/integration/test_proxy.py
# starts its own on loopback. debconf-utils, ucf, po-debconf, python3-debconf: the bad-input
# corpus runs the package's config script and postinst on preseeded answers (tests/bad_inputs).
# ansible-core, ansible-lint: examples/ansible is linted and syntax-checked (tests/unit).
# python3-wheel, python3-setuptools: make bench times the CLI installed from a wheel.
# python3-kubernetes: the official client drives the API server stand-in (tests/integration/
# test_real_clients.py; kubectl too where it is on PATH).
PYTEST_ARGS ?=
# The library's suite mostly waits (on subprocesses, the emulator, timeouts): four workers
# on two cores. loadgroup: the bad-input corpus stays in one worker (its own pool runs it).
XDIST ?= -n 4 --dist loadgroup
# The suites start thousands of Python processes (the CLI, the host-command stand-ins, each
# on our modules): each compiles our .py files from source when bytecode may not be written,
# as PYTHONDONTWRITEBYTECODE=1 in the caller's environment says (measured: 8 % more CPU for
# tests/integration/test_registry_mirrors.py). __pycache__ is ignored by git, and the .deb is
# built from a copy without ignored files (tools/build-deb.sh).
unexport PYTHONDONTWRITEBYTECODE

# $(call apt_install,PACKAGES): install those of PACKAGES that are not installed yet, from
# the distribution (apt-get update first, only when something is missing).
define apt_install
missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    -o DPkg::Lock::Timeout=600 $$missing; \
	fi
endef

.PHONY: all deps test test-debian test-pypi demo-library bench bad-inputs faults fleet clean

all: test

PROMTOOL_DIR := build/promtool
PROMTOOL := $(PROMTOOL_DIR)/usr/bin/promtool

deps: $(PROMTOOL)
	@$(call apt_install,$(APT_DEPS))

# promtool, for `promtool check metrics` on the metrics textfile (tests/unit/test_health_metrics.py),
# is taken out of a Debian package into build/promtool, never installed: Debian 13 (and Ubuntu
# 25.10) ship it alone as `promtool`; Debian 12 only inside `prometheus` (2.42), whose
# postinst would start a Prometheus server here. apt-get download fetches the first of the two
# the archive has and only ./usr/bin/promtool is extracted. HOST_PACKAGES names prometheus
# (in both Debian 12's and 13's archives) for check-host-packages. Without an archive to
# fetch it from, the tests that need it are skipped, saying why; nothing else is held up.
$(PROMTOOL):
	@rm -rf $(PROMTOOL_DIR) && mkdir -p $(PROMTOOL_DIR) && cd $(PROMTOOL_DIR) && \
	  { [ -n "$$(apt-cache policy promtool prometheus 2>/dev/null | grep Candidate: | grep -v none)" ] || apt-get update -qq; } && \
	  { apt-get download -qq promtool 2>/dev/null || apt-get download -qq prometheus; } && \
	  dpkg-deb --fsys-tarfile *.deb | tar -x ./usr/bin/promtool && rm -f *.deb || \
	  echo "promtool: not downloadable from Debian's archive here; the promtool checks will be skipped"

$(VENV)/.stamp: requirements-pypi.txt | deps
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r requirements-pypi.txt
	touch $@

# The README's test command: the library's suite on Debian's SDK versions, then on current
# PyPI ones, then the Debian package's (which runs on Debian's stack only).
test: test-debian test-pypi test-deb

test-debian: deps
	env PATH=$(SYSPATH) $(PY) -m pytest -q $(XDIST) --ignore=tests/deb $(PYTEST_ARGS)

# What the other stacks (PyPI's, Ubuntu's) do not repeat of Debian's run, each because the
# SDK's version cannot matter to it: the package's tests (Debian's stack only); the bad-input
# corpus, whose cases stop before Azure is reached (its endpoints are a closed loopback
# port); the Ansible lint, which runs Debian's ansible-lint whatever the interpreter; the
# fault matrix's fast subset, whose subject is our recovery on the host (kill -9, a full
# /etc, two runs at once; `make faults` runs the whole matrix): its one SDK part, 429s
# waited out as Retry-After says, is tests/integration/test_fleet.py's on every stack.
NOT_ON_OTHER_STACKS := --ignore=tests/deb --ignore=tests/bad_inputs --ignore=tests/unit/test_examples_ansible.py \
                       --ignore=tests/integration/test_faults.py

test-pypi: $(VENV)/.stamp
	env PATH=$(SYSPATH) $(VENV)/bin/python -m pytest -q $(XDIST) $(NOT_ON_OTHER_STACKS) $(PYTEST_ARGS)

# Debian 13 (trixie): test-debian's selection inside a trixie root on trixie's own packages
# (APT_DEPS from trixie: Python 3.13 and the modules the .deb runs on there, not PyPI pins),
# under systemd-nspawn with the repository bind-mounted (tools/suite-in-root.py says how).
# The root is built once with mmdebstrap and cached in .cache/suite-roots, keyed by its
# package list; debian-archive-keyring: mmdebstrap verifies trixie with it. kubectl: Debian
# packages it from 13 on (tests/integration/test_real_clients.py drives it where it is found).
TRIXIE_DEPS := mmdebstrap systemd-container debian-archive-keyring
TRIXIE_ROOT_PACKAGES := $(APT_DEPS) kubectl
.PHONY: test-trixie
test-trixie:
	@$(call apt_install,$(TRIXIE_DEPS))
	env PATH=$(SYSPATH) $(PY) tools/suite-in-root.py --suite trixie --packages "$(TRIXIE_ROOT_PACKAGES)" \
	  -- -q $(XDIST) --ignore=tests/deb $(PYTEST_ARGS)

# The library alone, without the package or a container: a bootstrap against the emulator
# into a scratch root (build/demo-library) with stand-in host commands, phase by phase.
demo-library: deps
	env PATH=$(SYSPATH) $(PY) -m tests.demo

bench: deps
	env PATH=$(SYSPATH) $(PY) -m tests.bench

# Issue 9's two tables. bad-inputs: every case of tests/bad_inputs (a bad config value, flag,
# file state, environment variable or preseeded answer) run through the CLI on a scratch
# root: the exit code, a message naming the field or file, the root unchanged; `make test`
# runs the same corpus. faults: the fault matrix (kill -9 in every phase, ENOSPC, Azure
# endpoints failing then recovering, concurrent runs) against the emulator; it rewrites
# docs/reliability.md. `make test` runs a fast subset of it.
bad-inputs: deps
	env PATH=$(SYSPATH) $(PY) -m tests.bad_inputs

faults: deps
	env PATH=$(SYSPATH) $(PY) -m tests.faults

# Issue 10: N nodes join one emulated subscription under ARM's documented throttling, then
# unjoin; the table (calls per node, 429s, the fleet ceiling per role preset) is in
# docs/fleet.md. `make test` runs a small one (tests/integration/test_fleet.py).
# SCALE=F divides ARM's figures by F (a small machine cannot send a real fleet's burst).
# JOIN_MODE=agent-pool: every node joins the emulator's FlexNodes pool with the pool's one
# service principal (docs/fleet.md, "An agent pool's fleet").
N ?= 200
SCALE ?= 1
JOIN_MODE ?= arc
fleet: deps
	env PATH=$(SYSPATH) $(PY) -m tests.fleet $(N) --scale $(SCALE) --join-mode $(JOIN_MODE)

clean: demo-clean
	rm -rf $(VENV) .venv-ubuntu-* build *.egg-info .pytest_cache

# ---------------------------------------------------------------------------------------
# The Debian package (issue 3). Each target installs what it needs from Debian's archive.
#   make deb       build/deb/aks-flex-node_<version>_all.deb (dpkg-buildpackage, no network)
#   make lint-deb  lintian --pedantic on it (this machine's lintian): any error or warning fails
#   make test-deb  tests/deb: the package's contents, lintian (Debian 12's here, 13's in a
#                  trixie root), the maintainer-script matrix, debconf runs against a private
#                  debconf database, installs and the upgrade from units in /lib in throwaway
#                  bookworm and trixie roots (mmdebstrap; tarballs cached in build/deb-cache)
DEB_OUT := build/deb
DEB_BUILD_DEPS := debhelper dh-python python3-all python3-setuptools po-debconf lintian fakeroot
DEB_TEST_DEPS := debconf debconf-utils python3-debconf ucf mmdebstrap man-db bash-completion

.PHONY: deb-deps deb lint-deb test-deb

deb-deps:
	@$(call apt_install,$(DEB_BUILD_DEPS) $(DEB_TEST_DEPS))

deb: deb-deps
	tools/build-deb.sh $(DEB_OUT)

# TMPDIR: lintian 2.116 leaves mldbm-elf-* files behind in it.
lint-deb: deb
	@tmp=$$(mktemp -d); TMPDIR=$$tmp lintian --pedantic -E -I --fail-on error,warning \
	  $(DEB_OUT)/aks-flex-node_*.changes; rc=$$?; rm -rf $$tmp; exit $$rc

test-deb: deb-deps deps
	env PATH=$(SYSPATH) AKS_FLEX_NODE_DEB_TESTS=all $(PY) -m pytest -q $(XDIST) tests/deb $(PYTEST_ARGS)

# ---------------------------------------------------------------------------------------
# The APT repository and the booted-container lifecycle tests (issue 4).
#   make repo       build/repo: build/deb/*.deb and the Arc agent stand-in, signed with aptly
#                   (an ed25519 key made once in .cache/repo-key, or REPO_KEY=FILE), plus
#                   aks-flex-node.sources and the keyring a node needs: docs/apt-repository.md
#   make e2e        tests/e2e: the package's lifecycle in booted Debian 12 (bookworm) and 13
#                   (trixie) containers (systemd-nspawn), against the emulator, and a 12 node
#                   upgraded to 13: docs/testing.md. AKS_FLEX_NODE_E2E_RELEASES=trixie (or
#                   bookworm) runs one release's scenarios only
#   make e2e-clean  ends the containers a killed run left (by their recorded pids), unmounts
#                   them, and drops .cache/e2e (the cached base root) and build/repo
.PHONY: repo e2e-deps e2e e2e-clean

REPO_DEPS := aptly gnupg

repo: deb
	@$(call apt_install,$(REPO_DEPS))
	tools/build-arc-agent.sh build/arc-agent
	tools/publish-repo.sh -o build/repo $(DEB_OUT)/aks-flex-node_*_all.deb build/arc-agent/azcmagent_*_all.deb

# debian-archive-keyring: mmdebstrap verifies bookworm with it (an Ubuntu host lacks it).
E2E_DEPS := mmdebstrap systemd-container util-linux zstd aptly gnupg debhelper equivs piuparts \
            debian-archive-keyring iproute2 openssh-client docker-registry skopeo python3-grpcio
# iproute2: the nodes' network namespaces (ip netns). openssh-client: Ansible reaches the
# fleet scenario's nodes over ssh (tests/e2e/test_ansible.py). docker-registry, skopeo and
# python3-grpcio: the private registry, the push of the images built from local files and
# the CRI client of the registry-mirror scenario (tests/e2e/test_registry_mirror.py).

e2e-deps:
	@$(call apt_install,$(E2E_DEPS))

# Two workers: every node but `make demo`'s has a network namespace of its own, so two
# scenarios run at once (tests/e2e/netns.py); each release's base root is built by one of them.
E2E_XDIST ?= -n 2
e2e: repo deps e2e-deps
	env PATH=$(SYSPATH) AKS_FLEX_NODE_E2E_DEB_DIRS=$(DEB_OUT):build/arc-agent \
	  $(PY) -m pytest -q $(E2E_XDIST) -m "e2e and not release_upgrade" tests/e2e $(PYTEST_ARGS)

# The 12 -> 13 release upgrade (tests/e2e/test_release_upgrade.py): a joined bookworm node
# dist-upgraded through Debian's archive, then rebooted. Half an hour on a busy 2-core
# machine, most of it apt's: not in `make e2e` (nor CI); run it when the package or the
# releases change.
.PHONY: e2e-release-upgrade
e2e-release-upgrade: repo deps e2e-deps
	env PATH=$(SYSPATH) AKS_FLEX_NODE_E2E_DEB_DIRS=$(DEB_OUT):build/arc-agent \
	  $(PY) -m pytest -q -m release_upgrade tests/e2e $(PYTEST_ARGS)

e2e-clean:
	env PATH=$(SYSPATH) $(PY) -c 'from tests.e2e import container as c; print("\n".join(c.clean_leftovers(c.CACHE / "run")) or "nothing left running")'
	rm -rf .cache/e2e build/repo build/arc-agent

# ---------------------------------------------------------------------------------------
# autopkgtest (debian/tests: smoke, preseed-validation) of build/deb's package, in a
# throwaway testbed of each of AUTOPKGTEST_SUITES that autopkgtest-virt-unshare unpacks from
# the base tarball tests/deb/roots.py caches (build/deb-cache; built with mmdebstrap the
# first time): never on this machine (no `null` backend). Results in
# build/autopkgtest/SUITE/out (log, summary).
#   -U  the tarball has no apt lists and no apt-utils, which autopkgtest needs to publish
#       the .deb in the testbed: apt-get update, the release's updates and apt-utils come
#       from Debian's archive. The tests themselves reach nothing but loopback.
# The source tree is a copy of the work tree (tracked and unignored files; debian/ out of
# git) marked as built (debian/files): the .deb is given, so autopkgtest neither builds
# nor installs dpkg-dev (tests/deb/test_autopkgtest.py's source_tree makes it).
# The unshare backend maps the testbed's users through /etc/subuid and /etc/subgid: the
# line root:200000:65536 is added to each when it has no root line (and said so).
# `make test-deb` runs the same through tests/deb/test_autopkgtest.py.
AUTOPKGTEST_OUT := build/autopkgtest
AUTOPKGTEST_SUITES ?= bookworm trixie
AUTOPKGTEST_DEPS := autopkgtest mmdebstrap util-linux uidmap

.PHONY: autopkgtest autopkgtest-deps

autopkgtest-deps:
	@$(call apt_install,$(AUTOPKGTEST_DEPS))
	@for f in /etc/subuid /etc/subgid; do \
	  if ! grep -qs '^root:' $$f; then \
	    echo 'root:200000:65536' >> $$f && \
	    echo "autopkgtest-deps: added root:200000:65536 to $$f (autopkgtest-virt-unshare maps the testbed's users there)"; \
	  fi; \
	done

autopkgtest: deb autopkgtest-deps deps
	@set -e; \
	rm -rf $(AUTOPKGTEST_OUT); mkdir -p $(AUTOPKGTEST_OUT)/src; \
	env PATH=$(SYSPATH) AKS_FLEX_NODE_DEB_TESTS=all $(PY) -c \
	  'import pathlib; from tests.deb.test_autopkgtest import source_tree; source_tree(pathlib.Path("$(AUTOPKGTEST_OUT)/src/aks-flex-node"))'; \
	for suite in $(AUTOPKGTEST_SUITES); do \
	  tarball=$$(env PATH=$(SYSPATH) AKS_FLEX_NODE_DEB_TESTS=all $(PY) -c \
	    "from tests.deb.roots import base_tarball; print(base_tarball('$$suite'))"); \
	  echo "+ autopkgtest on $$suite -> $(AUTOPKGTEST_OUT)/$$suite/out"; \
	  env PATH=$(SYSPATH) autopkgtest -U -o $(AUTOPKGTEST_OUT)/$$suite/out $(DEB_OUT)/aks-flex-node_*_all.deb \
	    $(AUTOPKGTEST_OUT)/src/aks-flex-node/ -- unshare --release $$suite --tarball $$tarball; \
	done

# make test-deb runs the autopkgtest too (tests/deb/test_autopkgtest.py): same needs.
test-deb: autopkgtest-deps

# ---------------------------------------------------------------------------------------
# The demo (the README's first command): the package built and published (make repo), a
# Debian 13 (trixie) machine booted with systemd-nspawn (`make demo RELEASE=bookworm`: a
# Debian 12 one), `apt-get install aks-flex-node` preseeded
# against the emulator, the join phase by phase; the node and the emulator are left
# running (tests/e2e/demo.py, all under demo-root/).
#   make demo-shell [CMD='...']  a root shell on the node, or one command
#   make demo-azure              what Azure (the emulator) holds now
#   make demo-clean              power the node off, stop the emulator, remove demo-root
.PHONY: demo demo-shell demo-azure demo-clean

demo: repo deps e2e-deps
	env PATH=$(SYSPATH) $(PY) -m tests.e2e.demo up --release $(or $(RELEASE),trixie)

demo-shell:
	@env PATH=$(SYSPATH) $(PY) -m tests.e2e.demo shell $(if $(CMD),/bin/sh -c "$$CMD")

demo-azure:
	@env PATH=$(SYSPATH) $(PY) -m tests.e2e.demo azure

demo-clean:
	@if [ -d demo-root ]; then env PATH=$(SYSPATH) $(PY) -m tests.e2e.demo down; fi

# ---------------------------------------------------------------------------------------
# Ubuntu's releases (docs/ubuntu.md): the library's suite, as test-pypi runs it
# (NOT_ON_OTHER_STACKS). 22.04 and 24.04: on the release's Python with the release's SDK versions
# pinned from PyPI (tests/requirements/ubuntu-<release>.txt), in .venv-ubuntu-<release>; 26.04:
# in a root of it, on Ubuntu's own packages (below). This measures the library, not the package.
# The interpreter: PYTHON_JAMMY / PYTHON_NOBLE, else pyenv's 3.10.* / 3.12.*, else python3.10 /
# python3.12 on PATH; without one the release is skipped, said plainly, exit 0.
#   make test-ubuntu        the three releases; CI runs it
#   make test-ubuntu-jammy  22.04 (Python 3.10)    make test-ubuntu-noble  24.04 (Python 3.12)
#   make test-ubuntu-resolute  26.04 (Python 3.14)
# Jammy's azure-identity cannot turn MSAL's instance discovery off, so its tests name Entra ID's
# public authority and resolve it to the emulator: each venv gets a .pth file that loads
# tests/sitehook/emulator_routes.py into every Python process (it only acts on the names
# tests/emulator_fixtures.py routes, and only to loopback).
# $(call find_python,X.Y): a working pythonX.Y, or nothing (a pyenv shim for a version not
# selected exits non-zero, so each candidate is run once).
define find_python
$(shell for p in $$(pyenv root 2>/dev/null)/versions/$(1).*/bin/python$(1) \
                 $$HOME/.pyenv/versions/$(1).*/bin/python$(1) $$(command -v python$(1)); do \
          [ -x "$$p" ] && "$$p" -c '' 2>/dev/null && { echo "$$p"; break; }; done)
endef
PYTHON_JAMMY ?= $(call find_python,3.10)
PYTHON_NOBLE ?= $(call find_python,3.12)

.PHONY: test-ubuntu test-ubuntu-jammy test-ubuntu-noble test-ubuntu-resolute

test-ubuntu: test-ubuntu-jammy test-ubuntu-noble test-ubuntu-resolute

test-ubuntu-jammy:
	@$(MAKE) --no-print-directory ubuntu-suite RELEASE=jammy VERSION=22.04 PYTHON_REL=3.10 UPY="$(PYTHON_JAMMY)"

test-ubuntu-noble:
	@$(MAKE) --no-print-directory ubuntu-suite RELEASE=noble VERSION=24.04 PYTHON_REL=3.12 UPY="$(PYTHON_NOBLE)"

.PHONY: ubuntu-suite
ubuntu-suite:
	@if [ -z "$(UPY)" ]; then \
	  echo "test-ubuntu-$(RELEASE): SKIPPED: no Python $(PYTHON_REL) here (Ubuntu $(VERSION)'s); set PYTHON_$$(echo $(RELEASE) | tr a-z A-Z)=/path/to/python$(PYTHON_REL) or install it (pyenv install $(PYTHON_REL))"; \
	  exit 0; \
	fi; \
	set -e; venv=.venv-ubuntu-$(RELEASE); req=tests/requirements/ubuntu-$(RELEASE).txt; \
	if [ ! -f $$venv/.stamp ] || [ $$req -nt $$venv/.stamp ]; then \
	  rm -rf $$venv; "$(UPY)" -m venv $$venv; $$venv/bin/pip install -q -r $$req; touch $$venv/.stamp; \
	fi; \
	site=$$($$venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	printf '%s\nimport emulator_routes\n' "$(CURDIR)/tests/sitehook" > $$site/aks_flex_node_test_routes.pth; \
	echo "test-ubuntu-$(RELEASE): Ubuntu $(VERSION)'s stack on $$($$venv/bin/python -V)"; \
	env PATH=$(SYSPATH) $$venv/bin/python -m pytest -q $(XDIST) $(NOT_ON_OTHER_STACKS) $(PYTEST_ARGS)

# Ubuntu 26.04 (resolute), Python 3.14: no 3.14 is on this machine, but Ubuntu's archive is,
# so the same selection runs in a resolute root on Ubuntu's own packages (python3.14,
# python3-azure, python3-msal, ...: the stack our .deb runs on there), not on PyPI pins:
# tools/ubuntu-root.sh. The root (build/ubuntu-resolute/root, with -updates and -security as
# of its build; its package versions in build/ubuntu-resolute/versions) is made once and
# again when what it is made of changes (the script's package list, mirror, key);
# Every package a target of this Makefile installs on the build and test host, checked against
# Debian 12's and 13's archives (tools/host-packages.py): the README's commands are promised
# on a fresh machine of either. CI runs it.
HOST_PACKAGES = $(APT_DEPS) $(TRIXIE_DEPS) $(DEB_BUILD_DEPS) $(DEB_TEST_DEPS) $(REPO_DEPS) $(E2E_DEPS) \
                $(AUTOPKGTEST_DEPS) mmdebstrap gnupg curl systemd-container prometheus
.PHONY: check-host-packages
check-host-packages:
	env PATH=$(SYSPATH) $(PY) tools/host-packages.py --suite bookworm --suite trixie $(sort $(HOST_PACKAGES))

# `rm -rf build/ubuntu-resolute` takes newer updates.
# Without the archive and without a root already made, the release is skipped, said plainly,
# exit 0.
UBUNTU_MIRROR ?= http://archive.ubuntu.com/ubuntu
UBUNTU_RESOLUTE ?= build/ubuntu-resolute
test-ubuntu-resolute:
	@$(call apt_install,mmdebstrap gnupg curl systemd-container)
	@set -e; export PATH=$(SYSPATH) UBUNTU_MIRROR=$(UBUNTU_MIRROR); \
	if ! tools/ubuntu-root.sh built $(UBUNTU_RESOLUTE); then \
	  if ! curl -fsS -m 30 -o /dev/null $(UBUNTU_MIRROR)/dists/resolute/InRelease; then \
	    echo "test-ubuntu-resolute: SKIPPED: Ubuntu's archive ($(UBUNTU_MIRROR)) is out of reach and no resolute root was made from it before; set UBUNTU_MIRROR to a mirror"; \
	    exit 0; \
	  fi; \
	  tools/ubuntu-root.sh build $(UBUNTU_RESOLUTE); \
	fi; \
	echo "test-ubuntu-resolute: Ubuntu 26.04's own packages:" \
	  $$(grep -E '^(python3\.14|python3-azure|python3-msal|python3-configobj) ' $(UBUNTU_RESOLUTE)/versions | tr '\n' ' '); \
	tools/ubuntu-root.sh run $(UBUNTU_RESOLUTE) -q $(XDIST) $(NOT_ON_OTHER_STACKS) $(PYTEST_ARGS)
