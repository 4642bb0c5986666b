"""Scenario: cloud-init joins the node on first boot (examples/cloud-init, issue 10).

A container of each release (bookworm's cloud-init 22.4, trixie's 25.1) boots with
cloud-init on and a NoCloud seed made from an example's user-data, with only what differs
in the test substituted: the test repository's URL and key, the emulator's IDs, and a
configuration file with its endpoints and CA. cloud-init adds the repository, gives debconf
the answers, writes the credential and installs the package; the postinst (or
aks-flex-node-agent) joins. No step by hand.

The node has a network namespace of its own (private_network=True): cloud-init configures
the network of the machine it runs on (a fallback DHCP configuration, /etc/network), and in
the host's namespace that machine would be this host. Inside, only loopback exists, with
the emulator's and the mirror's ports forwarded in.

The certificate variant goes on as issue 27's proof, its service principal's certificate
expiring within a day: what the operator sees of the node from outside, with real clients
(Debian's prometheus-node-exporter serving the agent's textfile over HTTP; the Node read
with python3-kubernetes and, on trixie, `kubectl describe node`), first joined with that
credential about to expire, then after a repair that does not stick (tests/e2e/health.py).
"""

import base64
import copy
import datetime
import json
import pathlib

import pytest
import yaml
from debian import deb822

from tests import harness
from tests.e2e import container as ct
from tests.e2e import health
from tests.e2e import node as n
from tests.emulator import constants as C

pytestmark = pytest.mark.e2e

EXAMPLES = ct.REPO / "examples" / "cloud-init"
SEED = "/var/lib/cloud/seed/nocloud"
INSTANCE_ID = "iid-aks-flex-node-e2e"
INSTANCE = f"/var/lib/cloud/instances/{INSTANCE_ID}"
KEYRING = "/etc/apt/keyrings/aks-flex-node-archive-keyring.gpg"
SECRET_FILE = "/etc/aks-flex-node/sp-client-secret"
CERT_FILE = "/etc/aks-flex-node/sp.pem"
# Answers that depend on where the node joins: the emulator's. The rest (join, auth_method,
# role_preset, on_join_failure, ...) are the example's own.
SITE_ANSWERS = {
    "tenant_id": C.TENANT_ID,
    "cluster_resource_id": C.CLUSTER_ID,
    "cloud": "custom",
    "subscription_id": C.SUBSCRIPTION_ID,
    "resource_group": "",
    "location": "",
    "machine_name": n.MACHINE_NAME,
    "tags": "env=e2e",
}


# ---- the example, rendered for the test -----------------------------------------------------

def load_example(name):
    text = (EXAMPLES / name).read_text()
    assert text.startswith("#cloud-config\n"), f"{name}: without #cloud-config, cloud-init does not read it as such"
    return yaml.safe_load(text)


def write_files_entry(user_data, path):
    [entry] = [e for e in user_data["write_files"] if e["path"] == path]
    return entry


def parse_selections(text):
    """{question: (type, value)} of debconf-set-selections lines for aks-flex-node."""
    answers = {}
    for line in text.splitlines():
        owner, question, kind, *value = line.split(None, 3)
        assert owner == "aks-flex-node" and question.startswith("aks-flex-node/"), line
        answers[question.split("/", 1)[1]] = (kind, value[0] if value else "")
    return answers


def render_selections(answers):
    return "".join(f"aks-flex-node aks-flex-node/{q} {kind} {value}".rstrip() + "\n"
                   for q, (kind, value) in answers.items())


def conf_values(text):
    """key = value lines of a configuration file (sections only group keys)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.strip().startswith(("#", "[")):
            values[key.strip()] = value.strip()
    return values


def render_for_test(example, repo, emulator, mirror, credential):
    """The example's user-data with the test's repository, emulator and credential in it.
    `credential`: {"client_id": ..., path: content} for the credential file(s)."""
    user_data = copy.deepcopy(example)
    keyring = write_files_entry(user_data, KEYRING)
    assert keyring["encoding"] == "b64" and keyring["permissions"] == "0644"
    keyring["content"] = base64.b64encode(repo.keyring.read_bytes()).decode()

    sources = write_files_entry(user_data, n.SOURCES)
    stanza = deb822.Deb822(sources["content"])
    assert stanza["Signed-By"] == KEYRING, "the source must accept our key only"
    stanza["URIs"] = f"file:{n.REPO_MOUNT}"
    sources["content"] = stanza.dump()

    selections = user_data["apt"]["debconf_selections"]
    answers = parse_selections(selections["aks-flex-node"])
    for question, value in SITE_ANSWERS.items():
        answers[question] = (answers[question][0], value)
    if "sp_client_id" in answers:
        answers["sp_client_id"] = ("string", credential["client_id"])
    selections["aks-flex-node"] = render_selections(answers)

    for path, content in credential.items():
        if path != "client_id":
            write_files_entry(user_data, path)["content"] = content

    # The configuration file: the example's keys, if it writes one, and what a node outside
    # Azure's public cloud is told (node.endpoint_settings); the emulator's CA beside it.
    conf = [e for e in user_data["write_files"] if e["path"] == n.CONF]
    values = conf_values(conf[0]["content"]) if conf else {}
    values.update(n.endpoint_settings(emulator, mirror))
    rendered = {"path": n.CONF, "owner": "root:root", "permissions": "0600",
                "content": harness.render_config(values)}
    user_data["write_files"] = [e for e in user_data["write_files"] if e["path"] != n.CONF] + [
        {"path": n.CA, "owner": "root:root", "permissions": "0644",
         "content": pathlib.Path(emulator.ca_bundle).read_text()},
        rendered,
    ]
    return "#cloud-config\n" + yaml.safe_dump(user_data, sort_keys=False, width=1000)


# What an image builder sets: cloud-init's Debian default locale, en_US.UTF-8, needs a
# generated locale (cloudinit/distros/debian.py, apply_locale) that this minimal root lacks;
# C.UTF-8 needs none.
IMAGE_CLOUD_CFG = "locale: C.UTF-8\n"


def seed_before_boot(emulator, user_data):
    """before_boot: cloud-init on, the NoCloud seed (user-data 0600: it holds the secret),
    and the Arc agent stand-in's settings (the machine's own, as in every scenario)."""

    def before_boot(box):
        box.path("/etc/cloud/cloud-init.disabled").unlink()
        box.write("/etc/cloud/cloud.cfg.d/90-e2e-image.cfg", IMAGE_CLOUD_CFG, 0o644)
        box.write(f"{SEED}/user-data", user_data, 0o600)
        box.write(f"{SEED}/meta-data", f"instance-id: {INSTANCE_ID}\n", 0o644)
        n.Node(box, emulator).configure_arc_agent()

    return before_boot


def certificate_pem():
    """A self-signed certificate and its unencrypted key: the emulator checks the client
    assertion's claims, not its signature (tests/emulator/entra.py)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aks-flex-node e2e cloud-init")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode() + key_pem, key_pem.splitlines()[1]


def schema_valid(stdout, path):
    """`cloud-init schema --config-file PATH` said PATH is valid: "Valid cloud-config: PATH"
    (bookworm's 22.4), "Valid schema PATH" (trixie's 25.1), and nothing else."""
    return stdout.strip() in (f"Valid cloud-config: {path}", f"Valid schema {path}")


# ---- the scenario ---------------------------------------------------------------------------

VARIANTS = {
    "secret": "user-data.yaml",
    "certificate": "user-data-certificate.yaml",
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cloud_init_first_boot_joins_the_node(variant, release, boot_node, repo, mirror, fresh_emulator, debs,
                                              tmp_path):
    emu = fresh_emulator
    example = load_example(VARIANTS[variant])
    if variant == "secret":
        credential = {"client_id": C.SP_CLIENT_ID, SECRET_FILE: C.SP_CLIENT_SECRET}
        sensitive, kept_at = C.SP_CLIENT_SECRET, SECRET_FILE
    else:
        pem, key_line = certificate_pem()
        credential = {"client_id": C.CERT_SP_CLIENT_ID, CERT_FILE: pem}
        sensitive, kept_at = key_line, CERT_FILE
    user_data = render_for_test(example, repo, emu, mirror, credential)

    node = boot_node(repo, private_network=True, add_repository=False,
                     before_boot=seed_before_boot(emu, user_data))
    box = node.c

    # cloud-init: done, from our seed, without an error or a warning.
    status = box.run(["cloud-init", "status", "--wait", "--long"], check=False, timeout=900)
    assert status.returncode == 0 and "status: done" in status.stdout, status.stdout + status.stderr
    assert "DataSourceNoCloud" in status.stdout, status.stdout
    result = json.loads(box.run(["cat", "/run/cloud-init/result.json"]).stdout)
    assert result["v1"]["errors"] == [], result
    log = (box.read("/var/log/cloud-init.log") or b"").decode(errors="replace")
    assert log, "no /var/log/cloud-init.log"
    bad = [line for line in log.splitlines() if "WARNING" in line or "Traceback" in line or "[ERROR]" in line]
    assert not bad, "\n".join(bad[:20])
    # What cloud-init ran is the user-data cloud-init's own schema check accepts.
    schema = box.run(["cloud-init", "schema", "--config-file", f"{SEED}/user-data"], check=False)
    assert (schema.returncode, schema.stderr) == (0, "") and schema_valid(schema.stdout, f"{SEED}/user-data"), schema

    # The repository came from cloud-init: the example's deb822 source and the key it names.
    assert box.read(KEYRING) == repo.keyring.read_bytes()
    assert deb822.Deb822(box.read(n.SOURCES).decode())["Signed-By"] == KEYRING
    # The package, from that repository, with the Arc agent stand-in it recommends.
    assert node.dpkg_status() == f"install ok installed|{debs.version()}"
    assert node.dpkg_status("azcmagent").startswith("install ok installed|")

    # The join, left to the postinst and the agent: succeeded, the node Ready.
    joined = n.wait_for_state(node, timeout=300)
    assert joined["state"] == "succeeded", joined
    [machine] = n.arc_machines(emu)
    assert machine["resource_group"].lower() == C.CLUSTER_RG.lower()
    registered = n.cluster_nodes(emu)[n.MACHINE_NAME]
    assert n.is_ready(registered), registered["status"]
    # ... signed in with the example's credential.
    token_clients = {r["detail"].get("client_id")
                     for r in emu.requests(server="entra", method="POST", path_contains="/oauth2/v2.0/token")}
    assert credential["client_id"] in token_clients, token_clients
    # The agent, in its unit's sandbox, signs in with it too: restarted, its first pass is a
    # full one, which asks Azure, and it succeeds.
    def sign_ins():
        return [r for r in emu.requests(server="entra", method="POST", path_contains="/oauth2/v2.0/token")
                if r["detail"].get("client_id") == credential["client_id"]]

    signed_in = len(sign_ins())
    passed = n.restarted_agent_pass(node)
    assert passed["state"] == "succeeded", passed
    assert len(sign_ins()) > signed_in

    # The credential: where the package keeps it, named by the configuration, out of debconf.
    assert node.mode(kept_at) == 0o600
    key = "sp_client_secret_file" if variant == "secret" else "sp_certificate_file"
    assert node.conf_value(key) == kept_at
    assert node.debconf_get("sp_client_secret") in ("", None)
    # Every file holding it is root's and private (0600, or 0400 for cloud-init's cache):
    # the package's file, the seed and cloud-init's copies of the user-data; no log.
    holders = n.files_holding(box, sensitive)
    assert {path: (mode & 0o077, uid) for path, (mode, uid) in holders.items()} == {
        path: (0, 0) for path in holders}, holders
    expected = {kept_at, f"{SEED}/user-data", f"{INSTANCE}/user-data.txt", f"{INSTANCE}/user-data.txt.i",
                f"{INSTANCE}/cloud-config.txt", f"{INSTANCE}/obj.pkl"}
    if release != "bookworm":
        # trixie's cloud-init (25.1; not bookworm's 22.4) also keeps the merged configuration,
        # user-data included, in /run/cloud-init/combined-cloud-config.json: root's, 0600
        # (checked above), on a tmpfs.
        expected.add("/run/cloud-init/combined-cloud-config.json")
    assert set(holders) == expected, holders
    assert holders[f"{INSTANCE}/obj.pkl"][0] == 0o400
    journal = box.run(["journalctl", "--no-pager", "-o", "cat"], timeout=120).stdout
    assert journal and sensitive not in journal
    # Why the secret is not a debconf_selections answer: cloud-init logs those
    # (cc_apt_configure, "handling apt config") in a log others than root may read (0644
    # here on a first boot; 0640, group adm, upstream since 23.1.2).
    assert C.CLUSTER_ID in log
    assert node.mode("/var/log/cloud-init.log") & 0o044

    if variant == "certificate":
        seen_from_outside(node, release, pem, tmp_path)


def not_after(pem):
    """The certificate's expiry, in Unix seconds."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem.encode())
    expiry = getattr(cert, "not_valid_after_utc", None)  # cryptography >= 42; Debian 12 has 38
    if expiry is None:
        expiry = cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    return int(expiry.timestamp())


def seen_from_outside(node, release, pem, tmp_path):
    """Issue 27, done when: conditions, events and metrics visible from real clients, with an
    expiring credential (this variant's certificate expires within a day: within the week
    health/conditions.py WARN_BEFORE gives one nobody on the node renews) and a failing repair."""
    emu, name = node.emulator, n.MACHINE_NAME
    kubeconfig = health.admin_kubeconfig(emu)
    (tmp_path / "admin.kubeconfig").write_bytes(kubeconfig)

    # Debian's node exporter, started at boot, serves our textfile's series over HTTP.
    assert node.c.is_active(health.NODE_EXPORTER) == "active", node.journal(health.NODE_EXPORTER)
    joined = health.scrape(node)
    assert joined.values("node_exporter_build_info")  # the real exporter answered
    # Its textfile collector read our file and found nothing wrong in it.
    assert joined.one("node_textfile_scrape_error") == 0
    assert joined.one("aks_flex_node_build_info") == 1
    assert joined.one("aks_flex_node_joined") == 1
    assert joined.one("aks_flex_node_last_run_success", operation="bootstrap") == 1
    outcomes = {(s["phase"], s["outcome"]) for s in joined.labels("aks_flex_node_phase_outcome")}
    assert "kubelet" in {p for p, _ in outcomes} and not {o for _, o in outcomes} & {"failed", "blocked"}, outcomes
    assert joined.one("aks_flex_node_credential_expiry_timestamp_seconds",
                      credential="service-principal-certificate") == not_after(pem)
    assert joined.one("aks_flex_node_credential_renewable", credential="service-principal-certificate") == 0

    conditions, events = health.read_with_python_client(tmp_path / "admin.kubeconfig", name)
    assert conditions["Ready"][0] == "True", conditions
    assert conditions["FlexNodeCredentialExpiring"] == ("True", "CredentialExpiresSoon"), conditions
    assert conditions["FlexNodePassFailed"] == ("False", "PassSucceeded"), conditions
    assert ("NodeJoined", "Normal", "aks-flex-node") in events, events
    assert ("CredentialExpiring", "Warning", "aks-flex-node") in events, events

    # A repair that does not stick: every kubelet start fails and edits its configuration
    # again. The agent's next pass repairs the file and fails to restart the kubelet; the one
    # after finds the same repair needed again.
    health.break_kubelet_start(node)
    node.c.run(["systemctl", "restart", "aks-flex-node-agent"])
    health.wait_for_condition(node, name, "FlexNodeRepairDidNotStick")
    # Stopped (after the pass under way), so that what is read next stays as that pass left it;
    # each later pass fails the same way, so the condition would stay True all the same.
    node.c.run(["systemctl", "stop", "aks-flex-node-agent"])

    failed = health.scrape(node)
    assert failed.one("node_textfile_scrape_error") == 0
    assert failed.one("aks_flex_node_last_run_success", operation="bootstrap") == 0
    outcomes = {(s["phase"], s["outcome"]) for s in failed.labels("aks_flex_node_phase_outcome")}
    assert {p for p, o in outcomes if o == "failed"} & {"kubelet", "services"}, outcomes
    assert failed.one("aks_flex_node_repairs_total", kind="kubelet") >= 1
    assert failed.one("aks_flex_node_credential_expiry_timestamp_seconds",
                      credential="service-principal-certificate") == not_after(pem)

    conditions, events = health.read_with_python_client(tmp_path / "admin.kubeconfig", name)
    assert conditions["FlexNodeRepairDidNotStick"] == ("True", "RepairDidNotStick"), conditions
    assert conditions["FlexNodePassFailed"][0] == "True", conditions
    assert conditions["FlexNodeCredentialExpiring"] == ("True", "CredentialExpiresSoon"), conditions
    assert ("RepairDidNotStick", "Warning", "aks-flex-node") in events, events

    if health.has_kubectl(release):
        described = health.kubectl_describe_node(node, kubeconfig, name)
        for word in ("FlexNodeRepairDidNotStick", "RepairDidNotStick", "FlexNodePassFailed",
                     "FlexNodeCredentialExpiring", "CredentialExpiresSoon"):
            assert word in described, described
        shown_events = described.split("Events:", 1)[1]
        for reason in ("NodeJoined", "RepairDidNotStick"):
            assert reason in shown_events, shown_events
        assert "aks-flex-node" in shown_events, shown_events


# ---- every example passes cloud-init's schema check -----------------------------------------

def test_every_example_passes_cloud_init_schema(booted):
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert {p.name for p in examples} >= {"user-data.yaml", "user-data-certificate.yaml",
                                          "user-data-managed-identity.yaml"}
    for example in examples:
        booted.copy_in(example, f"/root/examples/{example.name}", 0o600)
        check = booted.run(["cloud-init", "schema", "--config-file", f"/root/examples/{example.name}"],
                           check=False)
        assert (check.returncode, check.stderr) == (0, "") and schema_valid(
            check.stdout, f"/root/examples/{example.name}"), (example.name, check)
