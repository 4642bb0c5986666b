"""The endpoints of the Azure clouds aks-flex-node knows by name, and of a custom one.

Stdlib only: the config module builds CloudEndpoints without importing the Azure SDK, and
the azure package passes them on (base_url, authority, credential_scopes, connection_verify).
"""

import dataclasses

PUBLIC = "AzurePublicCloud"
US_GOVERNMENT = "AzureUSGovernment"
CHINA = "AzureChinaCloud"
CUSTOM = "custom"
NAMES = (PUBLIC, US_GOVERNMENT, CHINA, CUSTOM)


@dataclasses.dataclass(frozen=True)
class CloudEndpoints:
    """Where to reach Azure Resource Manager and Entra ID for one cloud.

    `arm` and `authority` are https URLs without a trailing slash; `arm_scope` is the scope
    to ask Entra ID for when calling ARM; `ca_bundle` is the CA file to trust as a path on
    this filesystem (already joined with the root), or None for the system's CAs.
    """

    name: str
    arm: str
    authority: str
    arm_scope: str
    ca_bundle: str = None


# ARM endpoints and scopes as azure-mgmt-core 1.6.0 lists them (azure/mgmt/core/tools.py
# get_arm_endpoints): note that US Government's scope is management.core.usgovcloudapi.net,
# not the ARM host. Authority hosts as azure-identity lists them (AzureAuthorityHosts).
_NAMED = {
    PUBLIC: CloudEndpoints(
        PUBLIC,
        "https://management.azure.com",
        "https://login.microsoftonline.com",
        "https://management.azure.com/.default",
    ),
    US_GOVERNMENT: CloudEndpoints(
        US_GOVERNMENT,
        "https://management.usgovcloudapi.net",
        "https://login.microsoftonline.us",
        "https://management.core.usgovcloudapi.net/.default",
    ),
    CHINA: CloudEndpoints(
        CHINA,
        "https://management.chinacloudapi.cn",
        "https://login.chinacloudapi.cn",
        "https://management.chinacloudapi.cn/.default",
    ),
}


def endpoints(cloud, arm_endpoint="", authority_host="", ca_bundle=None):
    """The endpoints of `cloud`: a named cloud's fixed ones, or for `custom` the given URLs.

    A custom cloud's ARM scope is the public ARM application's, which the mgmt SDKs ask
    for by default whatever their base_url (their credential_scopes default): a private ARM front end
    (the test emulator, a proxying gateway) is reached at its own URL but accepts tokens
    for the ARM application.
    """
    if cloud == CUSTOM:
        if not arm_endpoint or not authority_host:
            raise ValueError("cloud 'custom' needs arm_endpoint and authority_host")
        arm = arm_endpoint.rstrip("/")
        return CloudEndpoints(CUSTOM, arm, authority_host.rstrip("/"),
                              _NAMED[PUBLIC].arm_scope, ca_bundle)
    try:
        named = _NAMED[cloud]
    except KeyError:
        raise ValueError(f"cloud {cloud!r}: expected one of {', '.join(NAMES)}") from None
    return dataclasses.replace(named, ca_bundle=ca_bundle)
