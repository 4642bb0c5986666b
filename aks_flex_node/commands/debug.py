"""`aks-flex-node debug`: the support bundle, one tar.gz (0600) of what a support engineer
asks for first, gathered without changing the node.

Every part is best effort: one that cannot be had becomes a file saying why
(`<part>.unavailable.txt`, or `.absent.txt` for what a node that never joined does not have),
never a failed command; the command fails only when the bundle cannot be written. Every
part's bytes pass the one redactor (bundle_redact.py) before they are added, and each is cut
at PART_LIMIT with a note. Everything the host is asked goes through the host door (files
by the careful read, commands as argv lists with timeouts); the Node is asked for with the
node's own credential; the preflight checks run in this process.

Not uploaded anywhere (nodeadm's `debug` does not either): docs/operations.md, "Support
bundle", says how to attach it to an Azure support request.
"""

import io
import json
import os
import tarfile
import threading
import time
import urllib.parse

from aks_flex_node import __version__, paths
from aks_flex_node.commands.bundle_redact import Redactor, private_key_lines
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import careful_read
from aks_flex_node.host.azcmagent import Azcmagent
from aks_flex_node.host.fs import HostFileError
from aks_flex_node.host.run import CommandError
from aks_flex_node.steps import kubelet_auth
from aks_flex_node.steps.agentpool import recorded_overlay
from aks_flex_node.steps.context import JoinContext
from aks_flex_node.steps.kinds import open_ledger
from aks_flex_node.steps.preflight import checks as preflight
from aks_flex_node.steps.preflight import reachability

PART_LIMIT = 8 * 1024 * 1024  # each part's bytes at most; the rest is cut with a note
SECRET_FILE_LIMIT = 1024 * 1024
JOURNAL_LINES = 500  # the last lines of each unit's journal
# A part still running after this long is given up (and left to die with the process): the
# Azure SDK's retries behind a preflight check or the Node's GET could otherwise hold the
# bundle for many minutes on a node whose network is the problem.
PART_DEADLINE = 120
COMMAND_TIMEOUT = 20  # seconds for each command asked (journalctl, systemctl, --version)
# systemd.exec(5)/systemd.service(5) properties that say how a unit is and why.
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "Result",
                   "ExecMainStatus", "ExecMainStartTimestamp", "NRestarts", "FragmentPath", "DropInPaths")
# Ours, the kubelet's, the container runtime's and the Arc agent's (himdsd: Learn, "Azure
# Connected Machine agent overview", agent components).
UNITS = ("aks-flex-node-agent.service", "kubelet.service", "containerd.service", "himdsd.service")
JOURNAL_UNITS = ("aks-flex-node-agent.service", "kubelet.service", "containerd.service")
# argv after the binary for each component's version, and where the install step puts it
# (steps/kubelet_paths.py, steps/runtime.py, steps/kubernetes.py).
COMPONENTS = (
    ("kubelet", "/usr/local/bin/kubelet", ("--version",)),
    ("containerd", "/usr/local/bin/containerd", ("--version",)),
    ("runc", "/usr/local/bin/runc", ("--version",)),
    ("cni", "/opt/cni/bin/bridge", ("--version",)),
)
HIMDS_KEY_DIR = "/var/opt/azcmagent/tokens"  # the Arc agent's challenge keys (Learn: managed-identity-authentication)
KUBELET_PKI = "/var/lib/kubelet/pki"


class BundleError(FlexNodeError):
    """The bundle itself cannot be written (its path is not a plain file, the disk refuses)."""

    code = "bundle-not-written"


class Absent(Exception):
    """What a node that is not joined (or has no such thing) does not have: not a warning."""


class Gathering:
    """What the parts share: the host, the configuration (or why there is none), the secrets
    found, and the join context made once."""

    def __init__(self, host, load_config):
        self.host = host
        self.config, self.config_error = None, None
        try:
            self.config = load_config()
        except FlexNodeError as err:
            self.config_error = err
        self._ctx = None

    def needs_config(self):
        if self.config is None:
            raise Absent(f"no configuration: {self.config_error.message}")
        return self.config

    def context(self):
        if self._ctx is None:
            self._ctx = JoinContext(self.needs_config(), self.host, open_ledger(self.host))
        return self._ctx

    def read(self, node_path, limit=PART_LIMIT):
        """The bytes of our file at `node_path` by the careful read (no link followed, no FIFO
        waited on, at most `limit`); Absent when it is not there."""
        try:
            return self.host.read_carefully(node_path, limit)
        except careful_read.Unsafe as unsafe:
            if unsafe.code == "absent":
                raise Absent(f"{node_path}: not there") from None
            raise FlexNodeError(f"{node_path} {unsafe.why}", code=unsafe.code) from None

    def system(self, argv, ok_codes=range(256)):
        """A live-system command through the host door; Absent when a root prefix has no
        stand-in for it."""
        result = self.host.run_system(argv, timeout=COMMAND_TIMEOUT, ok_codes=ok_codes)
        if result.skipped:
            raise Absent(f"`{' '.join(argv)}` not run: a root prefix without stand-ins")
        return result


# ---- what we know is secret --------------------------------------------------------

def _quietly(read):
    try:
        return read()
    except (FlexNodeError, careful_read.Unsafe, OSError, ValueError, Absent):
        return None


def _proxy_secrets(url):
    if not url or "@" not in url:
        return []
    parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    userinfo = parts.netloc.rpartition("@")[0]
    return [s for s in (parts.password, userinfo, urllib.parse.unquote(userinfo)) if s]


def known_secrets(gathering):
    """Every secret this node keeps, by value, wherever the product keeps it: the client
    secret, the bootstrap token (config and the bootstrap kubeconfig), the HIMDS challenge
    keys, proxy credentials (config and environment), and the body of every private key
    (the service principal's certificate, the kubelet's client key)."""
    host, cfg, found = gathering.host, gathering.config, []
    key_files = [f"{KUBELET_PKI}/{name}" for name in _quietly(lambda: host.listdir(KUBELET_PKI)) or ()]
    if cfg is not None:
        found += [_quietly(cfg.client_secret), _quietly(cfg.bootstrap_token)]
        raw = cfg.as_dict(redact=False)
        for key in ("https_proxy", "http_proxy"):
            found += _proxy_secrets(raw.get(key) if isinstance(raw.get(key), str) else None)
        if raw.get("sp_certificate_file"):
            key_files.append(raw["sp_certificate_file"])
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        found += _proxy_secrets(host.env.get(name))
    found.append(_quietly(lambda: kubelet_auth.bootstrap_token_of(host)))
    for name in _quietly(lambda: host.listdir(HIMDS_KEY_DIR)) or ():
        key = _quietly(lambda: host.read_carefully(f"{HIMDS_KEY_DIR}/{name}", SECRET_FILE_LIMIT))
        found.append(key.decode("utf-8", "replace") if key else None)
    for path in key_files:
        pem = _quietly(lambda: host.read_carefully(path, SECRET_FILE_LIMIT))
        if pem:
            found += private_key_lines(pem.decode("utf-8", "replace"))
    return [s for s in found if s]


# ---- the parts -------------------------------------------------------------------

def part_config(g):
    if g.config is None:
        raise g.config_error  # the one warning for it: the parts that need it say "absent"
    cfg = g.config
    effective = recorded_overlay(cfg, g.host)
    doc = {"source": str(effective.source), "values": effective.as_dict(redact=True)}
    if effective.origins:
        doc["origins"] = effective.origins
    return doc


def part_status(g):
    return g.read(paths.STATUS)


def part_ledger(g):
    return g.read(paths.LEDGER)


def part_preflight(g):
    results = preflight.run_checks(g.context())
    return {"checks": [r.to_dict() for r in results], "ok": not any(r.status == "error" for r in results)}


def _version_of(g, binary, args):
    if g.host.kind(binary) is None:
        return {"absent": f"{binary} is not there"}
    try:
        result = g.host.run_installed(binary, args, timeout=COMMAND_TIMEOUT, ok_codes=range(256))
    except CommandError as err:
        return {"failed": err.message}
    text = (result.stdout.strip() or result.stderr.strip())[:2000]
    return {"path": binary, "output": text, "exit_code": result.returncode}


def part_versions(g):
    doc = {"aks-flex-node": __version__}
    for name, binary, args in COMPONENTS:
        doc[name] = _version_of(g, binary, args)
    try:
        shown = g.host.run(["azcmagent", "version"], timeout=COMMAND_TIMEOUT)
        doc["azcmagent"] = {"output": shown.stdout.strip()[:2000]}
    except CommandError as err:
        doc["azcmagent"] = {"failed": err.message}
    return doc


def part_units(g):
    result = g.system(["systemctl", "show", "--no-pager", "--property=" + ",".join(UNIT_PROPERTIES), *UNITS])
    return result.stdout + (f"\n(systemctl exited {result.returncode}: {result.stderr.strip()})"
                            if result.returncode else "")


def part_journal(unit):
    def part(g):
        result = g.system(["journalctl", "-u", unit, "-n", str(JOURNAL_LINES), "--no-pager", "-o", "short-iso"])
        return result.stdout + (f"\n(journalctl exited {result.returncode}: {result.stderr.strip()})"
                                if result.returncode else "")
    return part


def part_azcmagent(g):
    shown = Azcmagent(g.host).show()
    if shown is None:
        raise Absent("`azcmagent show -j` printed nothing")
    return shown


def part_node(g):
    ctx = g.context()
    auth = kubelet_auth.for_mode(ctx.mode)
    try:
        server, ca_pem = kubelet_auth.api_server_of(g.host, auth)
    except FlexNodeError as err:
        raise Absent(f"the API server is not known on this node: {err.message}") from None
    node = auth.client_of(ctx, server, ca_pem).get_node(ctx.config.machine_name)
    if node is None:
        raise Absent(f"the API server has no Node {ctx.config.machine_name!r}")
    return node


def part_reachability(g):
    ctx = g.context()
    cfg, policy = ctx.config, ctx.http_policy
    endpoints = {"arm": cfg.endpoints.arm, "entra": cfg.endpoints.authority}
    if cfg.is_set("artifact_mirror") and cfg.artifact_mirror:
        endpoints["artifact_mirror"] = cfg.artifact_mirror
    try:
        endpoints["api_server"] = kubelet_auth.api_server_of(g.host, kubelet_auth.for_mode(ctx.mode))[0]
    except FlexNodeError:
        pass  # not joined: no API server known
    doc = {"proxy": policy.shown_proxy or None, "endpoints": {}}
    for name, url in endpoints.items():
        failure = reachability.reachable(url, policy)
        doc["endpoints"][name] = {"url": url, "via_proxy": bool(policy.proxy_for(url)),
                                  "reachable": failure is None,
                                  **({"why": failure.why} if failure else {})}
    return doc


PARTS = (
    ("config.json", part_config),
    ("status.json", part_status),
    ("ledger.json", part_ledger),
    ("preflight.json", part_preflight),
    ("versions.json", part_versions),
    ("units.txt", part_units),
    *((f"journal/{unit}.txt", part_journal(unit)) for unit in JOURNAL_UNITS),
    ("azcmagent-show.json", part_azcmagent),
    ("node.json", part_node),
    ("reachability.json", part_reachability),
)


# ---- the bundle ------------------------------------------------------------------

def _as_bytes(value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")


def _cut(data, limit=PART_LIMIT):
    if len(data) <= limit:
        return data, False
    return data[:limit] + f"\n[cut: the part is {len(data)} bytes; the first {limit} are kept]\n".encode(), True


class _Overran(FlexNodeError):
    code = "part-overran"


def _within_deadline(part, g, deadline):
    """part(g), or _Overran when it has not finished within `deadline` seconds."""
    outcome = {}

    def run():
        try:
            outcome["value"] = part(g)
        except BaseException as err:  # handed to the caller below, whatever it is
            outcome["error"] = err

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        raise _Overran(f"did not finish within {deadline} s: given up")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def gather(host, load_config, parts=PARTS, deadline=PART_DEADLINE):
    """[(member name, bytes)] and the manifest: every part run, redacted and capped."""
    g = Gathering(host, load_config)
    redactor = Redactor(known_secrets(g))
    members, manifest = [], []
    for name, part in parts:
        entry = {"part": name}
        try:
            data = _as_bytes(_within_deadline(part, g, deadline))
            entry["status"] = "ok"
        except Absent as why:
            name, entry["status"], data = f"{name}.absent.txt", "absent", f"{why}\n".encode()
        except Exception as err:  # best effort: a part that fails is a file saying why
            why = err.message if isinstance(err, FlexNodeError) else f"{type(err).__name__}: {err}"
            entry["code"] = getattr(err, "code", type(err).__name__)
            name, entry["status"], data = f"{name}.unavailable.txt", "failed", f"{why}\n".encode()
            entry["why"] = redactor.text(why)
        data, cut = _cut(redactor.bytes(data))
        entry.update(member=name, bytes=len(data), **({"cut": True} if cut else {}))
        members.append((name, data))
        manifest.append(entry)
    return members, manifest, redactor


def _tar_gz(members, top, stamp):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o600, stamp
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def default_output(now):
    return f"{paths.STATE_DIR}/debug-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}.tar.gz"


def write_bundle(host, load_config, output=None, now=None):
    """Gather every part and write the bundle at node path `output` (default: under the state
    directory); returns (the node path written, the manifest). BundleError when it cannot
    be written: a symlink or anything but a regular file at `output` is refused, never
    followed or replaced."""
    now = time.time() if now is None else now
    output = os.path.normpath(output) if output else default_output(now)
    if not output.startswith("/"):
        raise BundleError(f"--output {output!r}: expected an absolute path", code="bundle-output-relative")
    found = host.kind(output)
    if found not in (None, "file"):
        raise BundleError(f"--output {output!r}: there is a {found} there: expected a regular file or nothing",
                          remedy="name another path", code="bundle-output-not-regular")
    own_dir = output.startswith(paths.STATE_DIR + "/")
    if not own_dir and not host.is_dir(os.path.dirname(output)):
        raise BundleError(f"--output {output!r}: {os.path.dirname(output)} is not a directory",
                          remedy="name a path in an existing directory", code="bundle-output-no-directory")
    members, manifest, redactor = gather(host, load_config)
    warnings = [e for e in manifest if e["status"] == "failed"]
    index = {"aks-flex-node": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
             "parts": manifest, "warnings": len(warnings)}
    members.insert(0, ("bundle.json", redactor.bytes(_as_bytes(index))))
    top = os.path.basename(output).split(".")[0] or "aks-flex-node-debug"
    data = _tar_gz(members, top, int(now))
    try:
        if own_dir and host.kind(paths.STATE_DIR) is None:
            host.ensure_dir(paths.STATE_DIR, 0o700)
        host.write_file(output, data, mode=0o600)
    except (HostFileError, OSError) as err:
        raise BundleError(f"cannot write the bundle {output}: {getattr(err, 'message', err)}",
                          remedy="free space there, or name another path with --output") from None
    return output, index
