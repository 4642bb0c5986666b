"""A hostile or broken value in Azure's answers, through the real CLI (issue 26, defect 7):
ARM's managed cluster GET and listClusterUserCredential answer with one bad field (the
emulator's `set` fault rule). Each bootstrap is refused as a permanent error (exit 1, code
bad-cloud-value, not the temporary 75 an agent retries forever) naming the answer and the
field, showing the value escaped, with nothing on the node changed but the run's own state
and nothing created in Azure."""

import base64
import json
import urllib.parse

import pytest
import yaml

from tests.bad_inputs.node import differences, snapshot
from tests.emulator import constants as C

CLUSTER_GET = {"server": "arm", "method": "GET", "path_regex": r"managedClusters/[^/]+$"}
USER_CREDENTIAL = {"server": "arm", "method": "POST", "path_regex": "listClusterUserCredential$"}
# What a refused run may write: its lock, status and ledger.
RUN_STATE = ("/var/lib/aks-flex-node", "/var/lib/aks-flex-node/*")


def _kubeconfig(emu, server=None, ca=None):
    """The emulator's own user kubeconfig with its server or CA data replaced."""
    status, _headers, body = emu.arm_call("POST", C.CLUSTER_ID + "/listClusterUserCredential", "2024-05-01")
    assert status == 200
    doc = yaml.safe_load(base64.b64decode(body["kubeconfigs"][0]["value"]))
    cluster = doc["clusters"][0]["cluster"]
    if server is not None:
        cluster["server"] = server
    if ca is not None:
        cluster["certificate-authority-data"] = ca
    return base64.b64encode(yaml.safe_dump(doc).encode()).decode()


# Where a cluster's version is read: currentKubernetesVersion where the SDK models it, else the
# version asked for (Ubuntu 22.04's azure-mgmt-containerservice has no current version): the
# hostile value goes in both, and either name is the field.
VERSION = ("properties.currentKubernetesVersion", "properties.kubernetesVersion")


def _version(value):
    return {field: value for field in VERSION}


CASES = {
    "version-with-slash": (CLUSTER_GET, _version("1.30.4/x"), VERSION),
    "version-with-flag": (CLUSTER_GET, _version("1.30.4 --v=9"), VERSION),
    "version-with-newline": (CLUSTER_GET, _version("1.30.4\n[Service]"), VERSION),
    "version-empty": (CLUSTER_GET, _version(""), VERSION),
    "version-absurdly-long": (CLUSTER_GET, _version("1." + "3" * 100000 + ".4"), VERSION),
    "fqdn-with-path": (CLUSTER_GET, {"properties.fqdn": "aks-one.hcp.example.io/evil"}, "properties.fqdn"),
    "fqdn-with-newline": (CLUSTER_GET, {"properties.fqdn": "aks-one.hcp.example.io\nHost: x"}, "properties.fqdn"),
    "cluster-id-dotdot": (CLUSTER_GET, {"id": f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/../x"}, "id"),
    "server-http": (USER_CREDENTIAL, {"server": "http://127.0.0.1:1"}, "clusters[0].cluster.server"),
    "server-newline": (USER_CREDENTIAL, {"server": "https://127.0.0.1:1\n[x]"}, "clusters[0].cluster.server"),
    "ca-not-base64": (USER_CREDENTIAL, {"ca": "%%% not base64"}, "clusters[0].cluster.certificate-authority-data"),
    "ca-not-pem": (USER_CREDENTIAL, {"ca": base64.b64encode(b"hello").decode()},
                   "clusters[0].cluster.certificate-authority-data"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_cloud_value_is_refused_with_the_node_untouched(node, name):
    match, change, field = CASES[name]
    if match is USER_CREDENTIAL:
        change = {"kubeconfigs.0.value": _kubeconfig(node.emu, **change)}
    node.emu.faults([{"match": dict(match, times=1), "set": change}])
    before = snapshot(node.root)
    proc, summary = node.cli_json("bootstrap")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "bad-cloud-value" in json.dumps(summary), said
    fields = field if isinstance(field, tuple) else (field,)
    assert any(f in said for f in fields), said
    assert "ARM managedClusters GET" in said or "listClusterUserCredential" in said, said
    assert "\n[Service]" not in said and "\nHost: x" not in said and "\n[x]" not in said, "raw newline shown"
    assert len(proc.stderr) < 4000, "the value is shown bounded"
    assert differences(before, snapshot(node.root), RUN_STATE) == []
    assert node.emu.state()["machines"] == [], "nothing created in Azure"
    # Preflight's artifact-hosts check asks the mirror's root whether it answers; a download
    # asks for a file under it.
    mirror_root = urllib.parse.urlsplit(node.emu.artifacts).path.rstrip("/")
    downloads = [r["path"] for r in node.emu.requests(server="artifacts") if r["path"].rstrip("/") != mirror_root]
    assert downloads == [], "nothing downloaded"
