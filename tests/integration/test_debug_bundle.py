"""`aks-flex-node debug` (issue 27 item 4): a support bundle (tar.gz, 0600) that holds what
support asks for, holds no secret we know of (nor its base64), changes nothing on the node
but the bundle itself, works on a node that never joined, and refuses a link at its path."""

import base64
import hashlib
import json
import os
import secrets
import stat
import tarfile

import pytest

from tests import harness
from tests.emulator import constants as C

STATE_DIR = "/var/lib/aks-flex-node"
PARTS = ("config.json", "status.json", "ledger.json", "preflight.json", "versions.json", "units.txt",
         "journal/aks-flex-node-agent.service.txt", "journal/kubelet.service.txt",
         "journal/containerd.service.txt", "azcmagent-show.json", "node.json", "reachability.json")


def snapshot(root):
    """Every path under `root` with what it is: a file's digest and mode, a link's target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    what = (hashlib.sha256(f.read()).hexdigest(), stat.S_IMODE(st.st_mode))
            elif stat.S_ISLNK(st.st_mode):
                what = ("link", os.readlink(path))
            else:
                what = ("dir" if stat.S_ISDIR(st.st_mode) else "other", stat.S_IMODE(st.st_mode))
            out["/" + os.path.relpath(path, root)] = what
    return out


def members(path):
    """{member name below the bundle's top directory: bytes}."""
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def write(node, node_path, data, mode=0o600):
    path = node.path(node_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def pem(kind, body):
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"


def random_body():
    """A PEM body: base64 lines of 64 characters (RFC 7468), random so that it is unique."""
    text = base64.b64encode(secrets.token_bytes(144)).decode()
    return "\n".join(text[i:i + 64] for i in range(0, len(text), 64))


def test_an_unjoined_node_gets_a_bundle_and_nothing_else_changes(node):
    before = snapshot(node.root)
    proc, doc = node.cli_json("debug")
    assert proc.returncode == 0, proc.stderr
    path = doc["path"]
    assert path.startswith(STATE_DIR + "/debug-") and path.endswith(".tar.gz")
    assert stat.S_IMODE(os.lstat(node.path(path)).st_mode) == 0o600

    after = snapshot(node.root)
    new = set(after) - set(before)
    assert new <= {path, STATE_DIR} and path in new
    assert {k: v for k, v in after.items() if k in before} == before  # nothing else touched

    found = members(node.path(path))
    index = json.loads(found["bundle.json"])
    status = {part["part"]: part["status"] for part in index["parts"]}
    assert set(status) == set(PARTS)
    # Never joined: no status, no ledger, no Node; and the config and versions are there.
    assert status["status.json"] == status["ledger.json"] == status["node.json"] == "absent"
    assert status["config.json"] == status["versions.json"] == "ok"
    assert "status.json.absent.txt" in found and "config.json" in found
    assert json.loads(found["versions.json"])["kubelet"].get("absent")
    assert doc["warnings"] == index["warnings"] == sum(p["status"] == "failed" for p in index["parts"])


def test_a_bundle_at_a_path_given_prints_it(node):
    proc, doc = node.cli_json("debug", "--output", "/nowhere/support.tar.gz")
    assert proc.returncode == 1 and doc["error"] == "bundle-output-no-directory"
    assert not os.path.exists(node.path("/nowhere"))
    proc = node.cli("debug", "--output", "/tmp/support.tar.gz")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "/tmp/support.tar.gz"
    assert stat.S_IMODE(os.lstat(node.path("/tmp/support.tar.gz")).st_mode) == 0o600


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_link_or_directory_at_the_output_path_is_refused(node, kind, tmp_path):
    outside = tmp_path / "victim"
    outside.write_bytes(b"untouched")
    target = node.path("/tmp/bundle.tar.gz")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if kind == "symlink":
        os.symlink(outside, target)
    else:
        os.mkdir(target)
    before = snapshot(node.root)
    proc, doc = node.cli_json("debug", "--output", "/tmp/bundle.tar.gz")
    assert proc.returncode == 1
    assert doc["error"] == "bundle-output-not-regular"
    assert outside.read_bytes() == b"untouched"
    assert snapshot(node.root) == before


def plant_secrets(node, auth):
    """Every secret we know, where the product keeps it, and again in the journal and in
    status.json where a careless message could have put it. Returns the secrets."""
    planted = {
        "bootstrap token": f"{secrets.token_hex(3)}.{secrets.token_hex(8)}",
        "HIMDS challenge key": secrets.token_hex(32),
        "proxy password": "Pr0xy-" + secrets.token_hex(8),
        "kubelet client key": random_body(),
        "API server bearer token": "eyJhbGciOiJSUzI1NiJ9." + secrets.token_urlsafe(24) + "." + secrets.token_urlsafe(32),
    }
    extra = {"https_proxy": f"http://edge:{planted['proxy password']}@127.0.0.1:9"}
    if auth == "certificate":
        planted["SP certificate key"] = random_body()
        write(node, "/etc/aks-flex-node/sp.pem", pem("CERTIFICATE", "MIIB") + pem("PRIVATE KEY", planted["SP certificate key"]))
        extra.update(sp_client_secret_file="", sp_certificate_file="/etc/aks-flex-node/sp.pem")
    else:
        planted["SP client secret"] = C.SP_CLIENT_SECRET  # harness.write_config puts it in its file
    harness.write_config(node.root, node.emu, node.wrapper, extra=extra)
    # The kubelet's bootstrap kubeconfig (steps/kubelet_auth.py writes it as JSON) and its key.
    write(node, "/var/lib/kubelet/bootstrap-kubeconfig",
          json.dumps({"users": [{"name": "kubelet-bootstrap", "user": {"token": planted["bootstrap token"]}}]}))
    write(node, "/var/lib/kubelet/pki/kubelet-client-2026-11-27.pem",
          pem("CERTIFICATE", "MIIB") + pem("EC PRIVATE KEY", planted["kubelet client key"]))
    # The Arc agent's challenge key, in a directory of this test's own (not the emulator's).
    tokens = node.path("/var/opt/azcmagent/tokens")
    os.unlink(tokens)
    write(node, "/var/opt/azcmagent/tokens/challenge.key", planted["HIMDS challenge key"])

    said = "\n".join(f"{name}: {value}" for name, value in planted.items() if "key" not in name)
    b64 = "\n".join(base64.b64encode(v.encode()).decode() for v in planted.values())
    journal = os.path.join(node.state_dir, "units")
    os.makedirs(journal, exist_ok=True)
    with open(os.path.join(journal, "aks-flex-node-agent.service.log"), "w") as f:
        f.write(f"MARKER agent line\n{said}\n{b64}\nconnecting via {extra['https_proxy']}\n")
    with open(os.path.join(journal, "kubelet.service.log"), "w") as f:
        f.write(f"MARKER kubelet line\nAuthorization: Bearer {planted['API server bearer token']}\n"
                f"{pem('EC PRIVATE KEY', planted['kubelet client key'])}"
                f"{pem('PRIVATE KEY', planted.get('SP certificate key', random_body()))}"
                f"key {planted['HIMDS challenge key']} token {planted['bootstrap token']}\n")
    write(node, f"{STATE_DIR}/status.json", json.dumps({
        "state": "failed", "error": {"message": f"{said}\n{b64}", "code": "failed"}}))
    return planted


def forms(secret):
    """The secret and its base64 (standard and URL-safe, padded or not), and for a PEM body
    each of its lines."""
    out = {secret}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(secret.encode()).decode()
        out |= {text, text.rstrip("=")}
    out |= {line for line in secret.splitlines() if len(line) >= 16}
    return out


@pytest.mark.parametrize("auth", ["client-secret", "certificate"])
def test_no_secret_we_know_is_in_the_bundle(node, auth):
    planted = plant_secrets(node, auth)
    proc, doc = node.cli_json("debug", "--output", "/tmp/bundle.tar.gz")
    assert proc.returncode == 0, proc.stderr
    with open(node.path("/tmp/bundle.tar.gz"), "rb") as f:
        raw = f.read()
    found = members(node.path("/tmp/bundle.tar.gz"))
    everything = b"\n".join(found.values()) + raw
    for name, secret in planted.items():
        for form in forms(secret):
            assert form.encode() not in everything, f"the {name} ({form[:12]}...) is in the bundle"
    # The parts that held them are in the bundle (redacted), not left out.
    assert b"MARKER agent line" in found["journal/aks-flex-node-agent.service.txt"]
    assert b"MARKER kubelet line" in found["journal/kubelet.service.txt"]
    assert b"PRIVATE KEY removed" in found["journal/kubelet.service.txt"]
    assert b'"state": "failed"' in found["status.json"]
    assert "***@127.0.0.1:9" in json.loads(found["config.json"])["values"]["https_proxy"]


def test_a_joined_node_bundle_holds_its_node_versions_units_and_journal(node):
    node.cli("bootstrap", check=True)
    before = snapshot(node.root)
    proc, doc = node.cli_json("debug", "--output", "/tmp/joined.tar.gz")
    assert proc.returncode == 0, proc.stderr
    after = snapshot(node.root)
    assert set(after) - set(before) == {"/tmp/joined.tar.gz"}
    changed = sorted(path for path in before if after.get(path) != before[path])
    assert changed == [], changed
    found = members(node.path("/tmp/joined.tar.gz"))
    status = {part["part"]: part["status"] for part in json.loads(found["bundle.json"])["parts"]}
    for part in ("status.json", "ledger.json", "node.json", "azcmagent-show.json", "units.txt",
                 "versions.json", "reachability.json", "journal/kubelet.service.txt"):
        assert status[part] == "ok", (part, found.get(f"{part}.unavailable.txt") or found.get(f"{part}.absent.txt"))
    assert json.loads(found["node.json"])["metadata"]["name"] == harness.MACHINE_NAME
    assert json.loads(found["azcmagent-show.json"])["status"] == "Connected"
    assert json.loads(found["versions.json"])["kubelet"]["exit_code"] == 0
    assert b"ActiveState=active" in found["units.txt"]
    reach = json.loads(found["reachability.json"])["endpoints"]
    assert reach["arm"]["reachable"] and reach["api_server"]["reachable"]
    everything = b"\n".join(found.values())
    assert C.SP_CLIENT_SECRET.encode() not in everything


def test_a_part_over_its_cap_is_cut_with_a_note(node):
    journal = os.path.join(node.state_dir, "units")
    os.makedirs(journal, exist_ok=True)
    with open(os.path.join(journal, "kubelet.service.log"), "w") as f:
        f.write(("x" * 20_000 + "\n") * 500)  # 10 MB in the last 500 lines
    proc, doc = node.cli_json("debug", "--output", "/tmp/big.tar.gz")
    assert proc.returncode == 0, proc.stderr
    entry = next(p for p in doc["parts"] if p["part"] == "journal/kubelet.service.txt")
    assert entry["cut"] and entry["bytes"] < 8 * 1024 * 1024 + 200
    assert members(node.path("/tmp/big.tar.gz"))["journal/kubelet.service.txt"].rstrip().endswith(b"are kept]")


def test_a_configuration_that_does_not_load_is_a_part_that_says_why(node):
    with open(node.path(harness.CONFIG_PATH)) as f:
        text = f.read()
    with open(node.path(harness.CONFIG_PATH), "w") as f:
        f.write(text.replace("]\n", "]\nmax_pods = 9000\n", 1))
    proc, doc = node.cli_json("debug", "--output", "/tmp/badconf.tar.gz")
    assert proc.returncode == 0, proc.stderr
    status = {part["part"]: part for part in doc["parts"]}
    assert status["config.json"]["status"] == "failed" and status["config.json"]["code"] == "config"
    assert status["units.txt"]["status"] == "ok" and status["preflight.json"]["status"] == "absent"
    assert doc["warnings"] >= 1
    found = members(node.path("/tmp/badconf.tar.gz"))
    assert b"max_pods" in found["config.json.unavailable.txt"]
