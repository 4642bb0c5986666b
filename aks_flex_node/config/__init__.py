"""The configuration file /etc/aks-flex-node/aks-flex-node.conf: load, check, write.

Schema first, then meaning (as cloud-init's cloudinit/config/schema.py): configobj's `validate` checks
every value against the shipped configspec (aks_flex_node/configspec.ini) with the check
functions of `checks`, then `semantic` checks what needs more than one key or the host
(auth method, cloud, files named by the config, the hostname default). Every problem is
collected and raised at once in one ConfigError.

The modules, each with one concern (callers use this package's names only):
  values      a typed value as one line of text; redaction of secrets and proxy credentials
  model       Config (the checked configuration), artifact URLs
  cluster_ref ClusterRef: the cluster a configuration names
  joinmode    JoinMode: the join modes and what each implies
  checks      configobj check functions and their patterns, one value at a time
  checks_lists the list values' checks: labels, tags, reserved resources, eviction, taints
  checks_net  the network values' checks: addresses, CIDRs, domains, host:port, no_proxy, the API server
  managed_dir the check of a directory aks-flex-node fills and removes (cache_dir)
  spec        the configspec: sections, keys, their order; the Validator of its types
  fileformat  parsing the file and the one-line rules a value must follow
  semantic    checks across keys and against the host; defaults derived from them
  named_files the files the configuration names (secret, certificate, CA bundle) and what they hold
  loader      load(), from_values(), load_upstream_json(), check_text(): parse, validate, check
  writer      write(), render() and render_default()
  importer    `config import`: config.json into our file and a secret file, both or neither
              (imported on its own: it needs the Host)

Cheap to import: configobj and the stdlib only, no Azure SDK.
"""

import sys

from aks_flex_node.config.checks import (
    MACHINE_NAME_EXPECTED,
    MACHINE_NAME_MAX,
    Invalid,
    check_abs_path,
    check_checksum_template,
    check_command,
    check_image_ref,
    check_integer,
    check_k8s_name,
    check_k8s_version,
    check_location,
    check_option,
    check_resource_group,
    check_resource_id,
    check_url,
    check_url_template,
    check_uuid,
    check_version,
    is_machine_name,
)
from aks_flex_node.config.loader import from_values, load, load_upstream_json
from aks_flex_node.config.checks_lists import (
    EVICTION_SIGNALS,
    KUBELET_LABEL_NAMESPACES,
    KUBELET_LABELS,
    RESERVED_RESOURCES,
    TAINT_EFFECTS,
    check_key_value_list,
    check_taint_list,
)
from aks_flex_node.config.checks_net import check_cidr, check_dns_domain, check_host_list, check_host_port, check_ip_address
from aks_flex_node.config.cluster_ref import CLUSTER_ID_EXAMPLE, ClusterRef, parse_cluster_id
from aks_flex_node.config.managed_dir import check_managed_dir
from aks_flex_node.config.model import ARCHES, ARTIFACTS, MIRROR_FILENAMES, Config
from aks_flex_node.config.semantic import MANAGED_LABEL
from aks_flex_node.config.spec import CHECKS, keys, section_of
from aks_flex_node.config.values import REDACTED, redact_url, serialize
from aks_flex_node.config.writer import render_default, write
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.paths import CONFIG as DEFAULT_PATH

__all__ = [
    # reading, writing, the result
    "DEFAULT_PATH", "load", "from_values", "load_upstream_json", "write", "render_default",
    "Config", "ClusterRef", "parse_cluster_id", "ConfigError", "ConfigProblem",
    # keys and values
    "keys", "section_of", "serialize", "redact_url", "REDACTED",
    "ARTIFACTS", "ARCHES", "MIRROR_FILENAMES", "MANAGED_LABEL", "CLUSTER_ID_EXAMPLE",
    # the checks the configspec names, and what they know
    "CHECKS", "Invalid", "is_machine_name", "MACHINE_NAME_MAX", "MACHINE_NAME_EXPECTED",
    "KUBELET_LABEL_NAMESPACES", "KUBELET_LABELS", "RESERVED_RESOURCES", "EVICTION_SIGNALS",
    "TAINT_EFFECTS",
    "check_abs_path", "check_checksum_template", "check_cidr", "check_command", "check_dns_domain",
    "check_host_list", "check_host_port", "check_image_ref", "check_integer", "check_ip_address",
    "check_k8s_name", "check_k8s_version", "check_key_value_list", "check_location", "check_managed_dir",
    "check_option",
    "check_resource_group", "check_resource_id", "check_taint_list", "check_url", "check_url_template",
    "check_uuid", "check_version",
    "main",
]


def main(argv=None):
    """`python3 -m aks_flex_node.config default` prints the default configuration file."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["default"]:
        sys.stderr.write("usage: python3 -m aks_flex_node.config default\n")
        return 2
    sys.stdout.write(render_default())
    return 0
