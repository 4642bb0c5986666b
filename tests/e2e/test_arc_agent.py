"""The Arc agent stand-in package on its own: himdsd's challenge flow on 127.0.0.1:40342,
and azcmagent's connection, as the package's clients meet them."""

import json

import pytest

pytestmark = pytest.mark.e2e

URL = "http://127.0.0.1:40342/metadata/identity/oauth2/token?api-version=2020-06-01&resource=https://management.azure.com"

# One request from inside the node: status, the WWW-Authenticate realm, the body.
PROBE = r"""
import json, sys, urllib.request, urllib.error
headers = json.loads(sys.argv[2])
req = urllib.request.Request(sys.argv[1], headers=headers)
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        out = {"status": r.status, "realm": "", "body": r.read().decode()}
except urllib.error.HTTPError as e:
    out = {"status": e.code, "realm": e.headers.get("WWW-Authenticate", ""), "body": e.read().decode()}
print(json.dumps(out))
"""


def probe(node, headers, url=URL):
    proc = node.c.run(["python3", "-c", PROBE, url, json.dumps(headers)])
    return json.loads(proc.stdout)


def test_himdsd_runs_the_challenge_flow_and_relays_the_emulator(node):
    node.apt_get("install", "azcmagent")
    assert node.c.is_active("himdsd") == "active" and node.c.is_enabled("himdsd") == "enabled"

    assert probe(node, {})["status"] == 400  # no Metadata header
    challenge = probe(node, {"Metadata": "true"})
    assert challenge["status"] == 401
    scheme, _, path = challenge["realm"].partition("=")
    assert scheme == "Basic realm" and path.startswith("/var/opt/azcmagent/tokens/") and path.endswith(".key")
    assert node.mode(path) == 0o600
    key = node.c.read(path).decode()

    # The key opens one request; the machine is not connected, so the emulator's answer
    # (no Arc identity on this host) comes back as it is.
    answer = probe(node, {"Metadata": "true", "Authorization": f"Basic {key}"})
    assert answer["status"] == 404 and "not connected" in answer["body"]
    assert node.c.read(path) is None  # used up, and gone
    again = probe(node, {"Metadata": "true", "Authorization": f"Basic {key}"})
    assert again["status"] == 401 and "invalid_client" in again["body"]


def test_azcmagent_without_its_settings_says_what_is_missing(node):
    node.apt_get("install", "azcmagent")
    node.c.run(["rm", "/etc/default/azcmagent-standin"])
    shown = node.c.run(["azcmagent", "show", "-j"], check=False)
    assert shown.returncode == 2
    assert "/etc/default/azcmagent-standin is missing" in shown.stderr
    assert "AZCMAGENT_STANDIN_ARM" in shown.stderr
