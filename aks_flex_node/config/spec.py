"""The configspec (aks_flex_node/configspec.ini): its sections, keys and their order, and
the Validator that checks a value against the type the configspec names for it.

The spec is the one list of keys: the file's layout, the default file and the order in
which problems are reported all follow it. Keys are unique across sections.
"""

import functools
import importlib.resources

import configobj

from aks_flex_node.config import checks, checks_lists, checks_net, checks_registry
from aks_flex_node.config.checks import Invalid
from aks_flex_node.config.managed_dir import check_managed_dir

# The configspec's type names and the functions that check them (`checks`, `managed_dir`).
CHECKS = {
    "uuid": checks.check_uuid,
    "option": checks.check_option,
    "integer": checks.check_integer,
    "url": checks.check_url,
    "mirror": checks.check_mirror,
    "abs_path": checks.check_abs_path,
    "managed_dir": check_managed_dir,
    "command": checks.check_command,
    "k8s_name": checks.check_k8s_name,
    "resource_group": checks.check_resource_group,
    "location": checks.check_location,
    "resource_id": checks.check_resource_id,
    "version": checks.check_version,
    "k8s_version": checks.check_k8s_version,
    "upgrade_window": checks.check_upgrade_window,
    "image_ref": checks.check_image_ref,
    "url_template": checks.check_url_template,
    "checksum_template": checks.check_checksum_template,
    "key_value_list": checks_lists.check_key_value_list,
    "taint_list": checks_lists.check_taint_list,
    "ip_address": checks_net.check_ip_address,
    "cidr": checks_net.check_cidr,
    "dns_domain": checks_net.check_dns_domain,
    "host_port": checks_net.check_host_port,
    "host_list": checks_net.check_host_list,
    "role_preset": checks.check_role_preset,
    "agent_pool": checks.check_agent_pool,
    "api_server": checks_net.check_api_server,
    "registry_mirrors": checks_registry.check_registry_mirrors,
}


def validator():
    """configobj's Validator with the checks registered under their configspec names,
    each behind its type's length bound (checks.MAX_LENGTH)."""
    return checks.validator({name: _bounded(check, checks.MAX_LENGTH[name]) for name, check in CHECKS.items()})


def _bounded(check, limit):
    @functools.wraps(check)
    def bounded(value, *args, **kwargs):
        if isinstance(value, str) and len(value) > limit:
            raise checks.TooLong(value, limit)
        return check(value, *args, **kwargs)
    return bounded


@functools.lru_cache(maxsize=None)
def configspec():
    text = importlib.resources.files("aks_flex_node").joinpath("configspec.ini").read_text("utf-8")
    return configobj.ConfigObj(text.splitlines(), _inspec=True, list_values=False, interpolation=False)


@functools.lru_cache(maxsize=None)
def sections():
    """{section: (keys in file order)}, in file order."""
    parsed = configspec()
    return {name: tuple(parsed[name].scalars) for name in parsed.sections}


@functools.lru_cache(maxsize=None)
def key_sections():
    """{key: its section}, in file order."""
    return {key: section for section, section_keys in sections().items() for key in section_keys}


def keys():
    """Every configuration key, in file order."""
    return tuple(key_sections())


def section_of(key):
    """The section a key belongs to; KeyError for an unknown key."""
    return key_sections()[key]


@functools.lru_cache(maxsize=None)
def _key_orders():
    return {key: i for i, key in enumerate(keys())}


def key_order(key):
    """A key's position in the file; -1 for what is not a key (a line, a section)."""
    return _key_orders().get(key, -1)


def required_expected(key):
    """What a required key expects, in the words of its own check (fed a value it refuses)."""
    try:
        validator().check(configspec()[section_of(key)][key], "\0")
    except Invalid as err:
        return f"{err.expected} ({key} is required)"
    return f"a value ({key} is required)"
