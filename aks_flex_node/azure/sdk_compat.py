"""What differs between the Azure SDK releases the library runs on, in one place.

The SDKs come from the distribution's python3-azure (one git snapshot of
azure-sdk-for-python) and python3-msal; docs/ubuntu.md lists each release's versions:

  Debian 12     azure-identity 1.13.0b2, authorization 3.0.0, hybridcompute 8.0.0b1, msal 1.21.0
  Ubuntu 24.04  azure-identity 1.14.0b1, authorization 3.1.0b1, hybridcompute 8.0.0, msal 1.26.0
  Ubuntu 22.04  azure-identity 1.7.0, authorization 2.0.0, hybridcompute 7.0.0, msal 1.17.0
  Ubuntu 26.04  azure-identity 1.26.0b3, authorization 5.0.0b1, hybridcompute 9.1.0b2, msal 1.34.0

Each shim asks the installed SDK what it can do (a constructor's parameters, a model's
attribute map), never its version string: the distributions ship unreleased snapshots whose
version labels PyPI never had. The one difference outside the Azure SDK, configobj 5.0.6's
`validate` module, is handled where the config imports it (aks_flex_node/config/checks.py):
the config must not import the Azure SDK.
"""

import inspect

from azure.identity import AzureCliCredential
from azure.profiles import ProfileDefinition


def _init_parameters(klass):
    """The parameter names of every __init__ along `klass`'s MRO."""
    names = set()
    for base in klass.__mro__:
        init = base.__dict__.get("__init__")
        if init is None or base is object:  # object's takes nothing, and its signature is
            continue  # parsed from text by tokenize, whose import and patterns cost 5 ms
        try:
            names.update(inspect.signature(init).parameters)
        except (TypeError, ValueError):
            continue
    return names


# ---- MSAL's instance discovery (azure-identity) ----------------------------------------

def instance_discovery_switch(credential_class):
    """The keyword that turns MSAL's instance discovery off for `credential_class`, or None
    when this azure-identity has none.

    azure-identity's CHANGELOG.md (Azure/azure-sdk-for-python, sdk/identity/azure-identity):
    1.13.0b2 (Debian 12's) takes `instance_discovery=False`, 1.13.0b3 renamed it
    `disable_instance_discovery=True`; 1.7.0 (Ubuntu 22.04's) has neither (its only
    relative, `validate_authority`, existed in the 1.10.0b1 and 1.11.0 betas only) and builds MSAL's application with validate_authority left on
    (azure/identity/_internal/msal_credentials.py, MsalCredential._get_app). Unknown
    keywords are swallowed silently, so the constructors' signatures are asked.
    """
    names = _init_parameters(credential_class)
    if "disable_instance_discovery" in names:
        return {"disable_instance_discovery": True}
    if "instance_discovery" in names:
        return {"instance_discovery": False}
    return None


# ---- AzureCliCredential's tenant (azure-identity) --------------------------------------

class _TenantAzureCliCredential(AzureCliCredential):
    """azure-identity 1.7.0's AzureCliCredential: its constructor takes no arguments, but
    its get_token takes `tenant_id=` and passes it on as `az account get-access-token
    --tenant` (azure/identity/_credentials/azure_cli.py of 1.7.0); `tenant_id=` on the
    constructor came with 1.11.0b3 (azure-identity's CHANGELOG.md: "Added ability to
    specify `tenant_id` for `AzureCliCredential`"). Every token request of this credential
    names the configured tenant, as the constructor's keyword does."""

    def __init__(self, tenant_id):
        super().__init__()
        self._flex_tenant_id = tenant_id

    def get_token(self, *scopes, **kwargs):
        if self._flex_tenant_id:
            kwargs.setdefault("tenant_id", self._flex_tenant_id)
        return super().get_token(*scopes, **kwargs)


def azure_cli_credential(tenant_id):
    """An AzureCliCredential asking `az` for tokens of `tenant_id` ("" = the CLI's default)."""
    if "tenant_id" in _init_parameters(AzureCliCredential):
        return AzureCliCredential(tenant_id=tenant_id or "")
    return _TenantAzureCliCredential(tenant_id or "")


# ---- models whose properties are flattened in some releases and nested in others -------

def model_property(model, name):
    """`name` of an ARM model whether the SDK flattens the resource's `properties` onto the
    model or keeps them under `.properties`:
      hybridcompute Machine: 7.0.0 (Ubuntu 22.04's) and 8.0.0 (Ubuntu 24.04's) nest them,
        8.0.0b1 (Debian 12's) flattens them, 9.x/10.x nest them again;
      authorization RoleAssignment: api 2015-07-01 nests them (the default of authorization
        2.0.0, Ubuntu 22.04's, which role assignments no longer use: authorization_options),
        2018-09-01-preview and later flatten them.
    (Each package's CHANGELOG.md in Azure/azure-sdk-for-python, sdk/hybridcompute and
    sdk/authorization.)"""
    properties = getattr(model, "properties", None)
    if properties is not None and getattr(properties, name, None) is not None:
        return getattr(properties, name)
    return getattr(model, name, None)


# ---- Microsoft.Authorization's api-version for role assignments ----------------------

# The roleAssignments api-versions we speak, newest first: 2022-04-01 (the default of
# authorization 3.x, Debian 12's and Ubuntu 24.04's) and 2020-10-01-preview, the newest in
# authorization 2.0.0 (Ubuntu 22.04's). Both carry principalType, which skips the directory
# lookup that fails for a brand-new identity, and both answer a create with 200 or 201 (their
# specs in Azure/azure-rest-api-specs, specification/authorization/resource-manager; the
# emulator models 2022-04-01's, the same shape). 2.0.0's default for every operation group,
# 2015-07-01, has no principalType, and its SDK takes a create answered 200 (an assignment
# that exists already) for an error.
ROLE_ASSIGNMENT_API_VERSIONS = ("2022-04-01", "2020-10-01-preview")


def authorization_options(client_class):
    """Keyword arguments for `client_class` (AuthorizationManagementClient): a profile that
    pins role assignments to the newest of ROLE_ASSIGNMENT_API_VERSIONS the package has,
    when its own default for them is none of those; {} when it is.

    The package is a multi-API client: its LATEST_PROFILE maps each operation group to an
    api-version (None: the default) and `profile=` overrides it (azure-mgmt-core's
    azure/profiles, ProfileDefinition; MultiApiClientMixin). The models of the version in
    use are the operation group's (`client.role_assignments.models`)."""
    latest = getattr(client_class, "LATEST_PROFILE", None)
    tag = getattr(client_class, "_PROFILE_TAG", None)
    if latest is None or tag is None:
        return {}
    versions = latest.get_profile_dict()[tag]
    if versions.get("role_assignments", versions.get(None)) in ROLE_ASSIGNMENT_API_VERSIONS:
        return {}

    for version in ROLE_ASSIGNMENT_API_VERSIONS:
        try:
            client_class.models(version)
        except ValueError:  # "API version ... is not available"
            continue
        pinned = {**versions, "role_assignments": version}
        return {"profile": ProfileDefinition({tag: pinned}, f"{latest.label} with role_assignments {version}")}
    return {}
