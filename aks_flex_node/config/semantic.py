"""Checks of meaning: what needs more than one key, or the host, on the values that
passed configobj's validate. Each problem is appended to the list given, none raised, so
the loader reports every one at once (schema first, then meaning, as cloud-init's
cloudinit/config/schema.py). Defaults derived from other keys or from the host are filled
in here.
"""

import os
import re
import socket

from aks_flex_node import clouds, paths
from aks_flex_node import strictmodes
from aks_flex_node.config import joinmode, named_files, spec
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.config.checks import (
    AGENT_POOL_MACHINE_EXPECTED,
    MACHINE_NAME_EXPECTED,
    is_agent_pool_machine_name,
    is_machine_name,
)
from aks_flex_node.config.cluster_ref import parse_cluster_id
from aks_flex_node.config.values import serialize
from aks_flex_node.errors import ConfigProblem

# Always on the node: without it the cluster's cloud-controller-manager deletes a node
# it cannot find among Azure VMs (unmanaged nodes carry it: kubernetes/kubernetes#67984, in
# the Kubernetes 1.12 CHANGELOG; upstream forces it too, Azure/AKSFlexNode#46).
MANAGED_LABEL = "kubernetes.azure.com/managed=false"


# What each join mode needs and what means nothing in it (docs/configuration.md, "Join
# modes"). Keys with a non-empty default (himds_endpoint, azcmagent, role_preset...) are
# not listed as meaningless: the shipped file sets them, whatever the mode.
JOIN_MODES = joinmode.NAMES
_ARC, _POOL, _TOKEN = JoinMode.ARC, JoinMode.AGENT_POOL, JoinMode.BOOTSTRAP_TOKEN
MODE_KEYS = {  # key -> the join modes it means something in
    "agent_pool": (_POOL,),
    "bootstrap_token_file": joinmode.TLS_BOOTSTRAP,
    "api_server": joinmode.TLS_BOOTSTRAP,
    "cluster_ca_file": joinmode.TLS_BOOTSTRAP,
    "arc_resource_group": (_ARC,),
    "arc_location": (_ARC,),
    "arc_tags": (_ARC,),
}
# With agent-pool the [auth] credential is the node's own, held for its whole life (it
# fetches every new bootstrap token): root's Azure CLI login is a person's and expires.
AGENT_POOL_AUTH = ("service-principal", "managed-identity")


def check_meaning(values, failed, root, held, problems, written=()):
    """Checks across keys and against the host, on the values that passed validate.
    `held`: secrets held in memory instead of their files (from an upstream config.json:
    sp_client_secret, bootstrap_token, cluster_ca). `written`: keys naming files the
    caller is about to write (not checked on disk)."""
    ok = lambda *names: not any(n in failed for n in names)  # noqa: E731
    held = held or {}

    failed |= _check_join_mode(values, ok, held, problems)  # a refused key's file is not read

    if ok("cluster_resource_id"):
        cluster = parse_cluster_id(values["cluster_resource_id"])
        # The Arc machine may live in another subscription than the cluster; by default
        # it goes next to the cluster (as upstream's azure.arc.resourceGroup default,
        # Azure/AKSFlexNode v0.0.10 pkg/config/config.go).
        if ok("subscription_id") and not values["subscription_id"]:
            values["subscription_id"] = cluster.subscription_id
        if ok("arc_resource_group") and not values["arc_resource_group"]:
            values["arc_resource_group"] = cluster.resource_group

    machine_name_given = bool(values.get("machine_name"))
    if ok("machine_name") and not values["machine_name"]:
        hostname = _hostname(root)
        if is_machine_name(hostname.lower()):
            values["machine_name"] = hostname.lower()  # Azure/AKSFlexNode#184, #189: lowercase default
        else:
            failed.add("machine_name")
            problems.append(ConfigProblem(
                "machine_name", f"{hostname} (this host's name)",
                f"{MACHINE_NAME_EXPECTED}: the hostname is not one, so set machine_name in [arc]"))

    if ok("machine_name", "join_mode") and JoinMode(values["join_mode"]) is _POOL and values["machine_name"] \
            and not is_agent_pool_machine_name(values["machine_name"]):
        failed.add("machine_name")
        given = values["machine_name"] if machine_name_given else f"{values['machine_name']} (this host's name)"
        problems.append(ConfigProblem("machine_name", given, AGENT_POOL_MACHINE_EXPECTED + (
            "" if machine_name_given else ": the hostname is not one, so set machine_name in [arc]")))

    if ok("cloud"):
        if values["cloud"] == clouds.CUSTOM:
            for key in ("arm_endpoint", "authority_host"):
                if ok(key) and not values[key]:
                    problems.append(ConfigProblem(key, "", f"an https URL: {key} is required with cloud = custom"))
        else:
            for key in ("arm_endpoint", "authority_host"):
                if ok(key) and values[key]:
                    problems.append(ConfigProblem(key, values[key], f"no value with cloud = {values['cloud']} "
                                                  "(its endpoints are known); set cloud = custom to use your own"))

    _check_auth(values, ok, held.get("sp_client_secret"), problems)

    if ok("ca_bundle") and values["ca_bundle"]:
        named_files.check_pem_file("ca_bundle", values["ca_bundle"], root, problems, private=False,
                                   kinds=("CERTIFICATE",), max_bytes=named_files.CA_BUNDLE_MAX_BYTES)
    if ok("sp_client_secret_file") and values["sp_client_secret_file"] and "sp_client_secret_file" not in written:
        named_files.check_secret_file("sp_client_secret_file", values["sp_client_secret_file"], root, problems)
    if ok("bootstrap_token_file") and values["bootstrap_token_file"] and "bootstrap_token_file" not in written:
        named_files.check_bootstrap_token_file("bootstrap_token_file", values["bootstrap_token_file"], root, problems)
    if ok("cluster_ca_file") and values["cluster_ca_file"] and "cluster_ca_file" not in written:
        named_files.check_pem_file("cluster_ca_file", values["cluster_ca_file"], root, problems, private=False,
                                   kinds=("CERTIFICATE",), max_bytes=named_files.CLUSTER_CA_MAX_BYTES)
    if ok("artifact_digests_file") and values["artifact_digests_file"]:
        named_files.check_digests_file("artifact_digests_file", values["artifact_digests_file"], root, problems)
    if ok("registry_ca_file") and values["registry_ca_file"]:
        if ok("registry_mirrors") and not values["registry_mirrors"]:
            problems.append(ConfigProblem("registry_ca_file", values["registry_ca_file"],
                                          "no value without registry_mirrors: it is the CA of the mirrors"))
        else:
            named_files.check_pem_file("registry_ca_file", values["registry_ca_file"], root, problems, private=False,
                                       kinds=("CERTIFICATE",), max_bytes=named_files.CA_BUNDLE_MAX_BYTES)
    if ok("sp_certificate_file") and values["sp_certificate_file"] and "sp_certificate_file" not in written:
        named_files.check_pem_file("sp_certificate_file", values["sp_certificate_file"], root, problems,
                                   private=True, kinds=("CERTIFICATE", "PRIVATE KEY"),
                                   max_bytes=named_files.CERTIFICATE_MAX_BYTES)

    # Commands run as root: when they are there already, nobody else may change them
    # (as sshd_config(5) asks of AuthorizedKeysCommand). Absent ones are installed later.
    for key in ("azcmagent", "exec_plugin_command"):
        if ok(key) and values[key].startswith("/"):
            problems.extend(strictmodes.problems(key, values[key], paths.real_path(root, values[key]), root))

    if ok("cache_dir"):
        _check_cache_dir(values["cache_dir"], root, problems)

    if ok("node_labels"):
        labels = values["node_labels"]
        name = MANAGED_LABEL.partition("=")[0]
        if any(label.partition("=")[0] == name and label != MANAGED_LABEL for label in labels):
            problems.append(ConfigProblem("node_labels", serialize("node_labels", labels),
                                          f"{MANAGED_LABEL} or no {name} label: it is always false, "
                                          "or the cloud controller deletes the node"))
        elif MANAGED_LABEL not in labels:
            labels.append(MANAGED_LABEL)


def _check_join_mode(values, ok, held, problems):
    """The keys each join mode requires, refuses (they would mean nothing: as sp_* keys
    with another auth_method, or endpoints with a known cloud) and the credential it takes.
    Returns the keys refused."""
    refused = set()
    if not ok("join_mode"):
        return refused
    mode = JoinMode(values["join_mode"])
    for key, modes in MODE_KEYS.items():
        if mode not in modes and ok(key) and values.get(key):
            refused.add(key)
            problems.append(ConfigProblem(key, serialize(key, values[key]),
                                          f"no value with join_mode = {mode}: it is used with join_mode = "
                                          f"{joinmode.spelled(modes)} only"))
    if mode is _POOL and ok("agent_pool") and not values["agent_pool"]:
        problems.append(ConfigProblem("agent_pool", "", "the name of the cluster's FlexNodes agent pool this node "
                                                        "joins (agent_pool is required with join_mode = agent-pool)"))
    if mode is _TOKEN:
        needs = {
            "bootstrap_token_file": (held.get("bootstrap_token"), "a file (owned by root, mode 0600) holding the "
                                     f"bootstrap token {named_files.BOOTSTRAP_TOKEN_FORM}"),
            "api_server": (None, "the API server's https URL or host[:port]"),
            "cluster_ca_file": (held.get("cluster_ca"), "a PEM file of the cluster's CA certificate"),
        }
        for key, (in_memory, what) in needs.items():
            if ok(key) and not values[key] and not in_memory:
                problems.append(ConfigProblem(key, "", f"{what} ({key} is required with join_mode = bootstrap-token)"))
    if not ok("auth_method"):
        return refused
    method = values["auth_method"]
    hint = "; sp_client_id is set, so service-principal?" if ok("sp_client_id") and values.get("sp_client_id") else ""
    if mode is _ARC and not method:
        problems.append(ConfigProblem("auth_method", "", spec.required_expected("auth_method") + hint))
    elif mode is _POOL and method not in AGENT_POOL_AUTH:
        problems.append(ConfigProblem(
            "auth_method", method,
            f"{' or '.join(AGENT_POOL_AUTH)} with join_mode = agent-pool: the node must keep its own credential, "
            "which fetches every new bootstrap token (root's Azure CLI login is a person's, and expires)"
            + (" (auth_method is required)" if not method else "") + hint))
    return refused


def _check_auth(values, ok, client_secret, problems):
    if not ok("auth_method"):
        return
    method = values["auth_method"]
    if not method:
        # Required and reported by _check_join_mode, or not needed (bootstrap-token),
        # where a method's keys still mean nothing without it.
        if ok("join_mode") and JoinMode(values["join_mode"]) is _TOKEN:
            for key in ("sp_client_id", "sp_client_secret_file", "sp_certificate_file", "managed_identity_client_id"):
                if ok(key) and values[key]:
                    problems.append(ConfigProblem(key, values[key], "no value without an auth_method: set "
                                                                    "auth_method to the method it belongs to"))
        return
    sp_keys = ("sp_client_id", "sp_client_secret_file", "sp_certificate_file")
    if method == "service-principal":
        if ok("sp_client_id") and not values["sp_client_id"]:
            problems.append(ConfigProblem("sp_client_id", "", "the service principal's application (client) ID, "
                                                              "required with auth_method = service-principal"))
        secret, cert = values.get("sp_client_secret_file"), values.get("sp_certificate_file")
        if ok("sp_client_secret_file", "sp_certificate_file"):
            if secret and cert:
                problems.append(ConfigProblem("sp_certificate_file", cert,
                                              "only one of sp_client_secret_file and sp_certificate_file"))
            elif not secret and not cert and not client_secret:
                problems.append(ConfigProblem(
                    "sp_client_secret_file", "",
                    "a file (owned by root, mode 0600) holding the client secret, or sp_certificate_file: "
                    "one is required with auth_method = service-principal"))
    else:
        for key in sp_keys:
            if ok(key) and values[key]:
                problems.append(ConfigProblem(
                    key, values[key],
                    f"no value with auth_method = {method}: it is used with service-principal only"))
    if method != "managed-identity" and ok("managed_identity_client_id") and values["managed_identity_client_id"]:
        problems.append(ConfigProblem(
            "managed_identity_client_id", values["managed_identity_client_id"],
            f"no value with auth_method = {method}: it is used with managed-identity only"))


def _check_cache_dir(node_path, root, problems):
    """An existing cache_dir must be one aks-flex-node made (unbootstrap removes it): the
    default, or a directory holding our CACHEDIR.TAG. configspec's managed_dir check has
    refused the system's locations already."""
    if node_path == paths.DEFAULT_CACHE_DIR:
        return
    path = paths.real_path(root, node_path)
    if not os.path.lexists(path):
        return  # aks-flex-node creates it, with its tag
    if not path.is_dir():
        problems.append(ConfigProblem("cache_dir", node_path, "a directory (it exists and is not one)"))
        return
    try:
        with open(path / paths.CACHE_TAG_NAME, "rb") as handle:
            tag = handle.read(4096)
    except OSError:
        tag = b""
    if not paths.is_own_cache_tag(tag) and not _nothing_but_a_killed_tag_write(path):
        problems.append(ConfigProblem(
            "cache_dir", node_path,
            f"a directory aks-flex-node creates itself (unbootstrap removes it): {node_path} exists and "
            f"has no {paths.CACHE_TAG_NAME} of aks-flex-node's; name a directory that does not exist yet"))


def _nothing_but_a_killed_tag_write(path):
    """True when the directory holds nothing but the temp file of a CACHEDIR.TAG write a
    kill cut short (host/fs.py names it .<name>.<pid>.<random>.tmp): the state a run killed
    while tagging the cache it had just made leaves. Nothing in it can be lost, and the
    next run, whose ledger records the directory, writes the tag."""
    temp = re.compile(re.escape(f".{paths.CACHE_TAG_NAME}.") + r"\d+\.\w+\.tmp")
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return bool(names) and all(temp.fullmatch(name) for name in names)


def _hostname(root):
    """This host's name: the kernel's, as the kubelet sees it; under another root (tests,
    image builds) that root's /etc/hostname, if it has one."""
    if str(root or "/") != "/":
        path = paths.real_path(root, "/etc/hostname")
        try:
            for line in path.read_text("utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    return line
        except OSError:
            pass
    return socket.gethostname()
