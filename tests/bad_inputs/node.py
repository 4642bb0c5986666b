"""One case of the corpus: a scratch node root, the command run as an operator runs it, and
the verdict.

The root is a Debian-like tree (tests/harness.py prepare_root) with a valid configuration
whose Azure, HIMDS and mirror endpoints are a loopback port nothing listens on: a case
that is not refused before Azure fails fast, and never reaches beyond loopback. The host
commands are the stand-ins of tests/fakes/bin (AKS_FLEX_NODE_HOST_BIN), so nothing a case
runs acts on this machine. The root is snapshotted (every path: type, mode, owner, content
hash or link target) before and after the run.
"""

import base64
import fnmatch
import hashlib
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from tests import harness
from tests.bad_inputs import archive_mirror, cloud_faults
from tests.emulator import constants as C
from tests.emulator_fixtures import FAKES_BIN

SYSPATH = "/usr/sbin:/usr/bin:/sbin:/bin"
CONFIG_PATH = harness.CONFIG_PATH
SECRET_PATH = harness.SECRET_PATH
CA_PATH = harness.CA_PATH
# Words that say the CLI crashed instead of reporting the bad input.
CRASH_MARKERS = ("Traceback (most recent call last)", "internal error")
# Variables of the calling shell that would point the CLI elsewhere than the case says.
_DROPPED_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "HTTPS_PROXY", "https_proxy",
                "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "AZURE_CONFIG_DIR",
                "AZURE_AUTHORITY_HOST", "IDENTITY_ENDPOINT", "IMDS_ENDPOINT", "KUBERNETES_EXEC_INFO",
                "JOURNAL_STREAM", "DPKG_ROOT", "DEBIAN_HAS_FRONTEND", "DEBCONF_REDIR", "DEBCONF_RECONFIGURE")

# The answers a valid noninteractive install preseeds; a postinst case replaces some.
BASE_PRESEED = {
    "join": ["boolean", "true"],
    "on_join_failure": ["select", "fail-install"],
    "tenant_id": ["string", C.TENANT_ID],
    "cluster_resource_id": ["string", C.CLUSTER_ID],
    "auth_method": ["select", "service-principal"],
    "sp_client_id": ["string", C.SP_CLIENT_ID],
    "sp_client_secret": ["password", "s3cr3t-value"],
    "cloud": ["select", "custom"],
}


class _ClosedPort:
    """A loopback port bound and never listened on: connections to it are refused at once,
    and no other process can take it while this one lives."""

    _lock = threading.Lock()
    _socket = None

    @classmethod
    def port(cls):
        with cls._lock:
            if cls._socket is None:
                cls._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                cls._socket.bind(("127.0.0.1", 0))
            return cls._socket.getsockname()[1]


def closed_url(scheme="https", path=""):
    return f"{scheme}://127.0.0.1:{_ClosedPort.port()}{path}"


def base_config(work):
    """The valid configuration every cli case starts from (harness.write_config's keys)."""
    return {
        "subscription_id": C.SUBSCRIPTION_ID,
        "tenant_id": C.TENANT_ID,
        "cloud": "custom",
        "arm_endpoint": closed_url(),
        "authority_host": closed_url(),
        "ca_bundle": CA_PATH,
        "auth_method": "service-principal",
        "sp_client_id": C.SP_CLIENT_ID,
        "sp_client_secret_file": SECRET_PATH,
        "machine_name": harness.MACHINE_NAME,
        "arc_tags": "env=test, owner=ci",
        "himds_endpoint": closed_url("http", "/metadata/identity/oauth2/token"),
        "cluster_resource_id": C.CLUSTER_ID,
        "artifact_mirror": closed_url(),
        "node_labels": "team=edge",
        "node_ready_timeout": "60",
        "exec_plugin_command": os.path.join(work, "aks-flex-node"),
    }


def _ca_pem():
    """A real CA certificate (the system's bundle), else a minimal PEM block: ca_bundle's
    check reads the block's header only, and nothing reaches TLS."""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile and os.path.isfile(cafile):
        with open(cafile, "rb") as f:
            return f.read()
    return b"-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n"


# ---- setting up ---------------------------------------------------------------------------


def _subst(text, root, work):
    return (text.replace("{root}", root).replace("{work}", work).replace("{repo}", harness.REPO)
            .replace("{closed}", str(_ClosedPort.port())))


def _real(spec_path, root, work):
    if spec_path.startswith(("{work}", "{repo}")):
        return _subst(spec_path, root, work)
    return os.path.join(root, spec_path.lstrip("/"))


def _remove(path):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def edited_json(spec):
    """A JSON file of the repository with the case's changes: json_set {dotted.path: value}
    (objects made on the way), json_del [dotted.path]."""
    with open(os.path.join(harness.REPO, spec["json_from"]), encoding="utf-8") as f:
        doc = json.load(f)
    for dotted, value in spec.get("json_set", {}).items():
        *parents, last = dotted.split(".")
        node = doc
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    for dotted in spec.get("json_del", []):
        *parents, last = dotted.split(".")
        node = doc
        for part in parents:
            node = node[part]
        del node[last]
    return doc


def _file_bytes(spec, root, work):
    if "text" in spec:
        return _subst(spec["text"], root, work).encode("utf-8")
    if "b64" in spec:
        return base64.b64decode(spec["b64"])
    if "json" in spec:
        return json.dumps(spec["json"]).encode("utf-8")
    if "json_from" in spec:
        return json.dumps(edited_json(spec), indent=2).encode("utf-8")
    if "copy_of" in spec:
        with open(_real(spec["copy_of"], root, work), "rb") as f:
            return f.read()
    return None


def put_file(spec, root, work):
    """Put one `files` entry in place (see corpus.py)."""
    path = _real(spec["path"], root, work)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = _file_bytes(spec, root, work)  # before the path goes: copy_of may name itself
    _remove(path)
    if spec.get("absent"):
        return
    if spec.get("dir"):
        os.mkdir(path)
    elif spec.get("fifo"):
        os.mkfifo(path)
    elif "symlink" in spec:
        os.symlink(_subst(spec["symlink"], root, work), path)
    else:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(data)
    if "mode" in spec and not os.path.islink(path):
        os.chmod(path, int(spec["mode"], 8))
    if "uid" in spec or "gid" in spec:
        os.lchown(path, spec.get("uid", -1), spec.get("gid", -1))


def prepare_node(case, work):
    """The scratch root of a cli or maintscript case: a Debian-like tree, the base
    configuration with the case's changes, the secret and CA files, then the case's files."""
    root = os.path.join(work, "root")
    harness.prepare_root(root)
    harness.exec_plugin_wrapper(work)
    conf_dir = os.path.join(root, "etc/aks-flex-node")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(root, CA_PATH.lstrip("/")), "wb") as f:
        f.write(_ca_pem())
    secret = os.path.join(root, SECRET_PATH.lstrip("/"))
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(C.SP_CLIENT_SECRET + "\n")
    values = base_config(work)
    mirror_files = []
    if case.archive is not None:  # served by a mirror of its own (archive_mirror.py)
        mirror_config, mirror_files = archive_mirror.serve(case, work)
        values.update(mirror_config)
    if case.faults:  # Azure is an emulator of its own, answering with the case's faults
        fault_config, fault_files = cloud_faults.serve(case, work)
        values.update(fault_config)
        mirror_files = mirror_files + fault_files
    for key, value in case.config.items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = _subst(value, root, work)
    text = case.config_text if case.config_text is not None else \
        case.config_prepend + harness.render_config(values) + case.config_append
    config = os.path.join(root, CONFIG_PATH.lstrip("/"))
    with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(_subst(text, root, work).encode("utf-8"))
    os.chmod(config, 0o600)
    for spec in mirror_files + list(case.files):
        put_file(spec, root, work)
    return root


def cli_env(case, root, work):
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV and not k.startswith("AKS_FLEX_NODE_")
           and not k.startswith("FAKE_")}
    home = os.path.join(work, "home")
    os.makedirs(home, exist_ok=True)
    env.update({
        "PATH": f"{FAKES_BIN}{os.pathsep}{SYSPATH}",
        "PYTHONPATH": harness.REPO,
        "LC_ALL": "C.UTF-8",
        "HOME": home,  # root's ~/.azure is not the case's
        "AKS_FLEX_NODE_HOST_BIN": str(FAKES_BIN),
        "FAKE_STATE_DIR": os.path.join(work, "fake-state"),
        "FAKE_ROOT": root,
        "FAKE_AZURE_ARM": closed_url(),
        "FAKE_SYSTEMD_LAUNCH": "none.service",  # the stand-in systemctl launches nothing
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    })
    env.update(cloud_faults.stand_in_env(work))  # a case with an emulator: azcmagent reaches it
    os.makedirs(env["FAKE_STATE_DIR"], exist_ok=True)
    _apply_env(env, case, root, work)
    return env


def _apply_env(env, case, root, work):
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = _subst(value, root, work)


# ---- the snapshot ---------------------------------------------------------------------------


def snapshot(root):
    """{node path: (type, mode, uid, gid, content sha256 or link target)} of everything
    under root, the root included."""
    out = {}

    def entry(path):
        st = os.lstat(path)
        node = "/" + os.path.relpath(path, root) if path != root else "/"
        if stat.S_ISLNK(st.st_mode):
            what = ("link", os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            what = ("file", digest.hexdigest()[:16])
        elif stat.S_ISDIR(st.st_mode):
            what = ("dir", "")
        else:
            what = ("other", stat.S_IFMT(st.st_mode))
        out[node] = (
            what[0], f"{stat.S_IMODE(st.st_mode):04o}", st.st_uid, st.st_gid, what[1])

    if not os.path.lexists(root):
        return out
    entry(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            entry(os.path.join(dirpath, name))
    return out


def differences(before, after, allowed=()):
    """What changed between two snapshots, as readable lines; paths matching an `allowed`
    glob are left out."""
    def ok(path):
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in allowed)

    lines = []
    for path in sorted(set(before) | set(after)):
        if ok(path):
            continue
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None:
            lines.append(f"created {path} ({new[0]} {new[1]})")
        elif new is None:
            lines.append(f"removed {path}")
        else:
            what = [name for name, a, b in zip(("type", "mode", "uid", "gid", "content"), old, new) if a != b]
            lines.append(f"changed {path} ({', '.join(what)}: {old[1]}->{new[1]})"
                         if what == ["mode"] else f"changed {path} ({', '.join(what)})")
    return lines


# ---- running ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    case: object
    exit: int = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    unclear: list = field(default_factory=list)  # why the error is not a clear one
    changed: list = field(default_factory=list)  # what changed under the root

    @property
    def clear(self):
        return not self.unclear

    @property
    def unchanged(self):
        return not self.changed

    @property
    def passed(self):
        return self.clear and self.unchanged

    def problems(self):
        return self.unclear + [f"root changed: {line}" for line in self.changed]

    def explain(self):
        argv = " ".join(self.case.argv)
        lines = [f"{self.case.id} ({self.case.run}: {argv})"] + [f"  - {p}" for p in self.problems()]
        output = (self.stderr.strip() or self.stdout.strip())[-1200:]
        if output:
            lines.append("  output: " + output.replace("\n", "\n          "))
        return "\n".join(lines)


def _decode(data):
    return (data or b"").decode("utf-8", "replace")


def _judge(case, outcome, before, after, root, work):
    text = outcome.stdout + outcome.stderr
    if outcome.exit not in case.exit:
        outcome.unclear.append(f"exit {outcome.exit}, expected {' or '.join(map(str, case.exit))}")
    for marker in CRASH_MARKERS:
        if marker in text:
            outcome.unclear.append(f"the output says {marker!r}")
    for mention in case.mentions:
        options = mention if isinstance(mention, tuple) else (mention,)
        options = tuple(_subst(m, root, work) for m in options)
        if not any(m in text for m in options):
            outcome.unclear.append("the message does not name " + " or ".join(repr(m) for m in options))
    for secret in case.hidden:
        if _subst(secret, root, work) in text:
            outcome.unclear.append(f"the output shows {secret!r}")
    if not text.strip():
        outcome.unclear.append("no message at all")
    if case.max_seconds is not None and outcome.seconds > case.max_seconds:
        outcome.unclear.append(f"took {outcome.seconds:.1f} s, expected at most {case.max_seconds:g} s")
    outcome.changed = differences(before, after, case.changes)


def _execute(argv, env, cwd, timeout, outcome):
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        outcome.exit, outcome.stdout, outcome.stderr = proc.returncode, _decode(proc.stdout), _decode(proc.stderr)
    except subprocess.TimeoutExpired as err:
        outcome.exit = "timeout"
        outcome.stdout, outcome.stderr = _decode(err.stdout), _decode(err.stderr)
        outcome.unclear.append(f"still running after {timeout:g} s (killed)")
    outcome.seconds = time.monotonic() - started


def run_cli(case, work):
    root = prepare_node(case, work)
    env = cli_env(case, root, work)
    args = [_subst(a, root, work) for a in case.argv]
    if case.run == "maintscript":
        argv = [sys.executable, "-m", "aks_flex_node.maintainer.maintscript", *args]
        if "DPKG_ROOT" not in case.env:
            env["DPKG_ROOT"] = root
    else:
        argv = [sys.executable, "-m", "aks_flex_node", *args]
        if case.root_flag:
            argv += ["--root", root]
    outcome = Outcome(case)
    before = snapshot(root)
    try:
        _execute(argv, env, work, case.timeout, outcome)
    finally:
        cloud_faults.release(work)
    _judge(case, outcome, before, snapshot(root), root, work)
    return outcome


def debconf_tools_missing():
    from tests.deb import debtools

    needed = ("debconf-set-selections", "debconf-communicate", "po2debconf", "ucf", "ucfr")
    return [t for t in needed if not shutil.which(t, path=debtools.SYSPATH)]


def run_postinst(case, work):
    """The package's config script and postinst (configure, a first install) under debconf,
    as dpkg runs them, on the sandbox's throwaway root and database (tests/deb/sandbox.py)."""
    from tests.deb import sandbox as sb_mod

    sb = sb_mod.Sandbox(work)
    root = str(sb.root)
    # Only what points the join at loopback, as an admin would add it by hand: the config
    # script copies every value the file sets into debconf (the file wins), so a fuller
    # file would override the very answers a case preseeds.
    conf = os.path.join(root, CONFIG_PATH.lstrip("/"))
    os.makedirs(os.path.dirname(conf), exist_ok=True)
    with open(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(f"[azure]\ncloud = custom\narm_endpoint = {closed_url()}\nauthority_host = {closed_url()}\n")
    for spec in case.files:
        put_file(spec, root, work)
    answers = {**BASE_PRESEED, **case.preseed}
    sb.preseed({q: tuple(v) for q, v in answers.items() if v is not None})
    env = {"FAKE_AZURE_ARM": closed_url(), "FAKE_SYSTEMD_LAUNCH": "none.service"}
    outcome = Outcome(case)
    before = snapshot(root)
    started = time.monotonic()
    extra = dict(env)
    for key, value in case.env.items():
        extra[key] = "" if value is None else _subst(value, root, work)
    try:
        proc = sb.run("postinst", "configure", "", env=extra, timeout=case.timeout)
        outcome.exit, outcome.stdout, outcome.stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        outcome.exit = "timeout"
        outcome.stdout, outcome.stderr = _decode(err.stdout), _decode(err.stderr)
        outcome.unclear.append(f"still running after {case.timeout:g} s (killed)")
    outcome.seconds = time.monotonic() - started
    _judge(case, outcome, before, snapshot(root), root, work)
    return outcome


def run_case(case, work):
    """Run one case in the empty directory `work`; its Outcome."""
    if case.run == "postinst":
        return run_postinst(case, work)
    return run_cli(case, work)
