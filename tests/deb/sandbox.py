"""Run the package's maintainer scripts from the work tree, the way dpkg does, but on a
throwaway root: nothing touches this machine's /etc, /var or debconf database.

- The scripts are copied to INFO/aks-flex-node.{config,templates,postinst,prerm,postrm},
  like /var/lib/dpkg/info: debconf's frontend then loads the templates and runs the config
  script before the postinst, as it does under dpkg.
- DPKG_ROOT points the scripts, the library and ucf (--state-dir) at ROOT.
- A private debconf database: debconf honours DPKG_ROOT too, for its configuration file
  and for the database files it names, so ROOT/etc/debconf.conf (DEBCONF_SYSTEMRC) puts
  them in ROOT/var/cache/debconf, split like Debian's (passwords in their own 0600 file).
- The library runs for real, from the work tree (PYTHONPATH); the live-system commands it
  runs come from a stand-in directory (AKS_FLEX_NODE_HOST_BIN): tests/fakes/bin plus
  tests/deb/fakes (deb-systemd-invoke, which records what the postinst starts).
- #DEBHELPER# becomes dh_installdebconf's own postrm snippet (db_purge) in the postrm and
  nothing elsewhere: the systemd and py3compile snippets would act on this machine; they
  run in the throwaway bookworm root tests instead.
"""

import json
import os
import subprocess
from pathlib import Path

from aks_flex_node import config, paths
from tests.deb import debtools

FAKES = Path(__file__).resolve().parent / "fakes"
LIB_FAKES = debtools.REPO / "tests" / "fakes" / "bin"
DEBCONF_PURGE_SNIPPET = "/usr/share/debhelper/autoscripts/postrm-debconf"

DEBCONF_CONF = """\
Config: configdb
Templates: templatedb

Name: config
Driver: File
Mode: 644
Reject-Type: password
Filename: /var/cache/debconf/config.dat

Name: passwords
Driver: File
Mode: 600
Backup: false
Required: false
Accept-Type: password
Filename: /var/cache/debconf/passwords.dat

Name: configdb
Driver: Stack
Stack: config, passwords

Name: templatedb
Driver: File
Mode: 644
Filename: /var/cache/debconf/templates.dat
"""

CONF = config.DEFAULT_PATH
SECRET = paths.SECRET
STATE = paths.STATE_DIR
PENDING = paths.PENDING
LEDGER = paths.LEDGER
STATUS = paths.STATUS
COMPLETE = paths.COMPLETE_MARKER


class Sandbox:
    def __init__(self, base, scripts_from=debtools.DEBIAN):
        self.base = Path(base)
        self.root = self.base / "root"
        self.info = self.base / "info"
        self.db = self.root / "var/cache/debconf"
        self.hostbin = self.base / "hostbin"
        self.fake_state = self.base / "fake-state"
        for d in (self.root / "etc", self.root / "var/lib/ucf", self.info, self.db, self.hostbin,
                  self.fake_state):
            d.mkdir(parents=True, exist_ok=True)
        # ucfr refuses to work without a registry file; a fresh system has an empty one.
        for name in ("registry", "hashfile"):
            (self.root / "var/lib/ucf" / name).touch()
        (self.root / "etc/hostname").write_text("flex-node-1\n")
        self._register_ucf()
        (self.root / "etc/debconf.conf").write_text(DEBCONF_CONF)
        for directory in (LIB_FAKES, FAKES):
            if directory.is_dir():
                for tool in directory.iterdir():
                    if os.access(tool, os.X_OK) and not tool.name.startswith("."):
                        link = self.hostbin / tool.name
                        if link.exists() or link.is_symlink():
                            link.unlink()
                        link.symlink_to(tool)
        self.install_scripts(scripts_from)

    # ---- the package's scripts -----------------------------------------------------------

    def install_scripts(self, debian_dir):
        debian_dir = Path(debian_dir)
        purge = Path(DEBCONF_PURGE_SNIPPET).read_text() if Path(DEBCONF_PURGE_SNIPPET).exists() else ""
        # As dh_installdebconf ships them: po2debconf merges the translations and turns
        # _Description/__Choices into the fields debconf reads.
        templates = subprocess.run(["po2debconf", str(debian_dir / "templates")], check=True,
                                   capture_output=True, text=True, env=debtools.system_env()).stdout
        (self.info / "aks-flex-node.templates").write_text(templates)
        for name in ("config", "postinst", "prerm", "postrm"):
            text = (debian_dir / name).read_text()
            text = text.replace("#DEBHELPER#", purge if name == "postrm" else "")
            target = self.info / f"aks-flex-node.{name}"
            target.write_text(text)
            target.chmod(0o755)

    def _register_ucf(self):
        """ucf --debconf-ok loads its own templates through dpkg-query, which reads the
        dpkg database under DPKG_ROOT: give the root ucf's entry, as installed here."""
        admin = self.root / "var/lib/dpkg"
        (admin / "info").mkdir(parents=True, exist_ok=True)
        status = subprocess.run(["dpkg-query", "-s", "ucf"], capture_output=True, text=True,
                                env=debtools.system_env()).stdout
        (admin / "status").write_text(status + ("\n" if status else ""))
        templates = Path("/var/lib/dpkg/info/ucf.templates")
        if templates.exists():
            (admin / "info/ucf.templates").write_bytes(templates.read_bytes())

    def env(self, **extra):
        env = debtools.system_env(
            DEBCONF_SYSTEMRC="/etc/debconf.conf",  # under DPKG_ROOT
            DEBIAN_FRONTEND="noninteractive",
            DPKG_ROOT=str(self.root),
            DPKG_MAINTSCRIPT_PACKAGE="aks-flex-node",
            PYTHONPATH=str(debtools.REPO),
            AKS_FLEX_NODE_HOST_BIN=str(self.hostbin),
            FAKE_STATE_DIR=str(self.fake_state),
            FAKE_ROOT=str(self.root),
            AKS_FLEX_NODE_JOIN_TIMEOUT="120",
            AKS_FLEX_NODE_UNJOIN_TIMEOUT="60",
        )
        for key in ("DEBCONF_RECONFIGURE", "DEBCONF_DB_OVERRIDE", "DEBCONF_DB_REPLACE"):
            env.pop(key, None)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def run(self, script, *args, env=None, timeout=300, input=None):
        """Run INFO/aks-flex-node.SCRIPT ARGS like dpkg; a CompletedProcess (text)."""
        argv = [str(self.info / f"aks-flex-node.{script}"), *args]
        extra = dict(env or {})
        extra.setdefault("DPKG_MAINTSCRIPT_NAME", script)
        return subprocess.run(argv, env=self.env(**extra), capture_output=True, text=True,
                              timeout=timeout, cwd=str(self.base), input=input)

    # ---- debconf -------------------------------------------------------------------------

    def preseed(self, selections):
        """debconf-set-selections into the private database; {question: (type, value)}."""
        lines = "".join(f"aks-flex-node aks-flex-node/{q} {t} {v}\n" for q, (t, v) in selections.items())
        subprocess.run(["debconf-set-selections"], input=lines, text=True, check=True,
                       env=self.env(), capture_output=True, timeout=60)

    def debconf(self, *commands):
        """Replies of debconf-communicate to commands, one line each (e.g. "GET aks-flex-node/join")."""
        result = subprocess.run(["debconf-communicate", "aks-flex-node"],
                                input="".join(c + "\n" for c in commands), text=True,
                                capture_output=True, env=self.env(), timeout=60)
        return result.stdout.splitlines()

    def get(self, question):
        code, _, value = self.debconf(f"GET aks-flex-node/{question}")[0].partition(" ")
        return value if code == "0" else None

    def db_files(self):
        return sorted(p for p in self.db.iterdir() if p.name.endswith((".dat", ".dat-old")))

    # ---- the root ------------------------------------------------------------------------

    def path(self, node_path):
        return self.root / node_path.lstrip("/")

    def conf_value(self, key):
        return debtools.conf_value(self.path(CONF).read_text(), key)

    def set_conf_value(self, key, value):
        path = self.path(CONF)
        lines = []
        for line in path.read_text().splitlines():
            name, sep, _rest = line.partition("=")
            lines.append(f"{key} = {value}" if sep and name.strip() == key else line)
        path.write_text("\n".join(lines) + "\n")

    def status(self):
        path = self.path(STATUS)
        return json.loads(path.read_text()) if path.exists() else None

    def write_joined_ledger(self, cluster_resource_id, machine_name="flex-node-1"):
        """The state a joined node has: a ledger naming the cluster (no entries to undo)."""
        path = self.path(LEDGER)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(json.dumps({"version": 1, "entries": [], "joined": {
            "cluster_resource_id": cluster_resource_id, "machine_name": machine_name}}))
        path.chmod(0o600)

    def invoked(self):
        """What the postinst asked deb-systemd-invoke to do: [argv, ...]."""
        path = self.fake_state / "deb-systemd-invoke.log"
        if not path.exists():
            return []
        return [line.split() for line in path.read_text().splitlines()]

    def ucf_registry(self):
        return (self.root / "var/lib/ucf/registry").read_text()

    def ucf_hashfile(self):
        return (self.root / "var/lib/ucf/hashfile").read_text()
