"""Images from a mirror: containerd's per-registry hosts.toml, from registry_mirrors.

containerd's config.toml (steps/runtime.py) sets the CRI registry's `config_path` to
/etc/containerd/certs.d; for each registry named in registry_mirrors this step writes
<config_path>/<registry>/hosts.toml, the registry host namespace containerd reads
(containerd docs/hosts.md, "Registry Host Namespace"), and beside it the CA of
registry_ca_file when one is set. Not the deprecated `mirrors` section of config.toml
(containerd RELEASES.md, "Deprecated config properties": registry `mirrors` and `configs`,
removed in 2.2).

The mirror is the namespace's `server` and its one [host]: containerd tries the hosts first
and the server last, falling back to the registry itself only when no server is given
(docs/hosts.md, "server field" and "Setup Default Mirror for All Registries"), so a pull
never goes around the mirror to the registry. The [host] table is not decoration:
containerd 1.6 and 1.7 refuse a hosts.toml that has none ("failed to decode hosts.toml",
error "invalid `host` tree": their getSortedHosts in remotes/docker/config/hosts.go) and
then pull from the registry itself, as the e2e scenario saw with Debian 13's containerd
1.7.24 (tests/e2e/test_registry_mirror.py). Its capabilities are pull and resolve: a mirror
we trust to resolve tags (docs/hosts.md's "Private Mirror"), never to be pushed to.

No restart is owed: containerd reads the namespace's hosts.toml at each pull (core/remotes/
docker/config/hosts.go: ConfigureHosts calls loadHostDir for every host it resolves), and
docs/hosts.md says "Updates under this directory do not require restarting the containerd
daemon". A hosts.toml containerd cannot decode is logged and ignored (loadHostDir falls back
to the Docker certificate layout, and so to the registry itself): what we write is TOML any
parser reads back (tests/unit/test_registry_mirrors.py reads it with tomllib).

The files are tracked (steps/tracked.py): a hosts.toml an operator had at that path is kept
and put back by undo; a mirror the config no longer names loses its files (and the
directories we made for them) at the next bootstrap.
"""

from aks_flex_node.config import named_files
from aks_flex_node.config.checks_registry import mirror_pairs
from aks_flex_node.engine.step import INSTALL, Plan, Step
from aks_flex_node.errors import ConfigError
from aks_flex_node.steps import tracked
from aks_flex_node.steps.kinds import DIR_KINDS, Kind

# containerd's config_path (steps/runtime.py containerd_config writes it).
CERTS_DIR = "/etc/containerd/certs.d"
HOSTS_FILE = "hosts.toml"
# A name of ours, beside hosts.toml: no operator's ca.crt is in the way, and nothing of
# Docker's certificate layout (*.crt read when there is no hosts.toml) is implied.
CA_FILE = "aks-flex-node-ca.crt"
CAPABILITIES = ("pull", "resolve")

# TOML 1.0.0, "String": a basic string escapes the quotation mark, the backslash and the
# control characters (U+0000 to U+001F, U+007F); these have short forms.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text):
    """`text` as a TOML basic string, quotes included."""
    out = []
    for char in text:
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def namespace_dir(namespace):
    """The directory containerd reads `namespace`'s hosts.toml from (host:port as written:
    containerd on Unix also looks for host_port_, which we never write)."""
    return f"{CERTS_DIR}/{namespace}"


def hosts_toml(mirror, ca_path=None):
    """The hosts.toml sending every pull of a registry to `mirror` alone (its CA `ca_path`):
    the mirror as a [host] and as the server, each with the same settings."""
    settings = ["capabilities = [" + ", ".join(toml_string(c) for c in CAPABILITIES) + "]"]
    if ca_path:
        settings.append(f"ca = {toml_string(ca_path)}")
    lines = [
        "# Written by aks-flex-node from registry_mirrors in its config; changes are overwritten",
        "# at the next bootstrap. The mirror is the only server asked (containerd docs/hosts.md).",
        f"server = {toml_string(mirror)}",
        *settings,
        "",
        f"[host.{toml_string(mirror)}]",
        *(f"  {line}" for line in settings),
    ]
    return ("\n".join(lines) + "\n").encode()


def registry_ca(config):
    """The bytes of registry_ca_file, checked again as the configuration was (it may have
    changed since); None when none is set. ConfigError naming the key when it is bad now."""
    node_path = config.registry_ca_file
    if not node_path:
        return None
    problems = []
    data = named_files.check_pem_file("registry_ca_file", node_path, str(config.root), problems, private=False,
                                      kinds=("CERTIFICATE",), max_bytes=named_files.CA_BUNDLE_MAX_BYTES)
    if problems:
        raise ConfigError(problems, source=config.source)
    return data


def wanted_files(config):
    """{node path: content} of every file registry_mirrors asks for, each namespace's CA
    before its hosts.toml (a hosts.toml never names a CA that is not there yet)."""
    ca = registry_ca(config)
    files = {}
    for namespace, mirror in mirror_pairs(config.registry_mirrors):
        directory = namespace_dir(namespace)
        ca_path = f"{directory}/{CA_FILE}" if ca is not None else None
        if ca_path:
            files[ca_path] = ca
        files[f"{directory}/{HOSTS_FILE}"] = hosts_toml(mirror, ca_path)
    return files


class RegistryMirrorsStep(tracked.OwnsPaths, Step):
    name = "registry-mirrors"
    help = "write containerd's hosts.toml for each registry in registry_mirrors, and the mirrors' CA"
    branch = INSTALL
    # containerd-config makes /etc/containerd and names certs.d as containerd's config_path.
    needs = ("containerd-config",)

    def check(self, ctx):
        plan = Plan()
        files = wanted_files(ctx.config)
        for path, content in files.items():
            why = "the mirrors' CA (registry_ca_file)" if path.endswith(CA_FILE) else \
                "containerd's mirror of a registry (registry_mirrors)"
            tracked.plan_file(ctx, plan, self.name, path, content, 0o644, why=why)
        self._plan_stale(ctx, plan, files)
        if not plan.actions:
            plan.noop_reason = ("no registry mirror configured" if not files
                                else "every registry's hosts.toml and CA as wanted")
        return plan

    def _plan_stale(self, ctx, plan, files):
        """Undo what an earlier run wrote for a registry (or a CA) the config no longer
        names, then the directories we made for it once nothing else is in them."""
        ours = ctx.ledger.entries(step=self.name)
        stale = [e for e in ours if e["kind"] == Kind.FILE and e["id"] not in files]
        for entry in stale:
            for action in tracked.plan_undo_paths(ctx, [entry]).actions:
                plan.add(action.what, "registry_mirrors or registry_ca_file no longer names it", action.run)
        going = {e["id"] for e in stale}
        # Deepest first: a namespace's directory before certs.d.
        for entry in sorted((e for e in ours if e["kind"] in DIR_KINDS), key=lambda e: -e["id"].count("/")):
            directory = entry["id"]
            if any(path.startswith(directory + "/") for path in files):
                continue
            names = ctx.host.listdir(directory)
            if names is None or not all(f"{directory}/{name}" in going for name in names):
                continue  # gone already, or holding what is not ours (kept)
            going.add(directory)
            for action in tracked.plan_undo_paths(ctx, [entry]).actions:
                plan.add(action.what, "it held only the files of a mirror the config no longer names",
                         action.run)
