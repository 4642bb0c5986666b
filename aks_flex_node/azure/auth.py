"""The operator's Azure credential, and turning Azure SDK failures into our errors.

Three ways in (config `auth_method`): a service principal (secret or certificate read from
a root-only file), the Azure CLI's logged-in account, or a managed identity of the
machine running the tool. Never an interactive login: this runs from maintainer scripts
and systemd, where a prompt would hang (upstream's daemon could start an interactive
`az login`: Azure/AKSFlexNode v0.0.10, pkg/auth/auth.go EnsureAuthenticated).
"""

import contextlib
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional

import azure.identity
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.identity import (
    CertificateCredential,
    ClientSecretCredential,
    CredentialUnavailableError,
    ManagedIdentityCredential,
)

from aks_flex_node.azure import sdk_compat
from aks_flex_node.azure.clients import BACKOFF_FACTOR, CONNECTION_TIMEOUT, RETRY_CONNECT
from aks_flex_node.errors import AuthError, FlexNodeError, TemporaryError
from aks_flex_node.host import careful_read
from aks_flex_node.http_policy import HttpPolicy
from aks_flex_node.paths import real_path

AUTH_METHODS = ("service-principal", "azure-cli", "managed-identity")
# Authority hosts MSAL knows itself; for any other (Azure Stack, a test emulator) it
# would first ask the public cloud's instance-discovery endpoint, which fails offline
# (AzureAD/microsoft-authentication-library-for-python, msal/authority.py).
WELL_KNOWN_AUTHORITY_HOSTS = frozenset(
    {
        "login.microsoftonline.com",
        "login.microsoft.com",
        "login.windows.net",
        "sts.windows.net",
        "login.microsoftonline.us",
        "login.usgovcloudapi.net",
        "login.chinacloudapi.cn",
        "login.partner.microsoftonline.cn",
        "login.microsoftonline.de",
    }
)
MAX_SECRET_FILE_BYTES = 64 * 1024

# What to check for the Entra ID errors an operator actually meets (AADSTS codes are
# documented at https://learn.microsoft.com/entra/identity-platform/reference-error-codes).
AADSTS_HINTS = {
    "7000215": "the client secret is wrong: check the file named by sp_client_secret_file (the secret's value, not its ID)",
    "7000222": "the client secret has expired: create a new one for the app registration",
    "700016": "no application with this sp_client_id in the tenant: check sp_client_id and tenant_id",
    "90002": "the tenant does not exist: check tenant_id",
    "900023": "tenant_id is not a valid tenant ID or domain",
    "700027": "the certificate is not registered on the app registration: upload its public part",
    "7000112": "the application is disabled in the tenant",
    "50034": "the signed-in account does not exist in the tenant",
}


@dataclass(frozen=True)
class AuthSettings:
    """What a credential needs, as plain values (paths already real on this machine)."""

    method: str
    tenant_id: str
    client_id: Optional[str] = None
    client_secret_file: Optional[str] = None
    certificate_file: Optional[str] = None
    managed_identity_client_id: Optional[str] = None
    authority: Optional[str] = None
    ca_bundle: Optional[str] = None
    # The run's HttpPolicy (proxy, no_proxy); None: direct connections.
    policy: Optional[HttpPolicy] = None
    # Only for a secret that never was in a file (an upstream config.json read into
    # memory, config.Config.client_secret()); otherwise it is read from client_secret_file.
    client_secret: Optional[str] = field(default=None, repr=False)

    @classmethod
    def from_config(cls, cfg, root=None):
        """From the loaded config.Config. The secret and certificate files are node paths
        (under the config's root); endpoints.ca_bundle is already a path on this machine."""
        root = str(root if root is not None else getattr(cfg, "root", "/"))
        endpoints = cfg.endpoints
        secret_file = getattr(cfg, "sp_client_secret_file", None) or None
        in_memory_secret = None
        if cfg.auth_method == "service-principal" and not secret_file and hasattr(cfg, "client_secret"):
            in_memory_secret = cfg.client_secret()
        return cls(
            method=cfg.auth_method,
            tenant_id=cfg.tenant_id,
            client_id=getattr(cfg, "sp_client_id", None) or None,
            client_secret_file=_real(root, secret_file),
            certificate_file=_real(root, getattr(cfg, "sp_certificate_file", None) or None),
            managed_identity_client_id=getattr(cfg, "managed_identity_client_id", None) or None,
            authority=endpoints.authority,
            ca_bundle=endpoints.ca_bundle or None,
            policy=HttpPolicy.from_config(cfg),
            client_secret=in_memory_secret,
        )


def _real(root, node_path):
    return str(real_path(root, node_path)) if node_path else None


def read_secret_file(path, field):
    """The contents of a root-only file; refuse one that others could read or swap
    (host/careful_read.py)."""
    try:
        return careful_read.read(path, MAX_SECRET_FILE_BYTES, private=True, owners=careful_read.root_or_us())
    except careful_read.Unsafe as unsafe:
        raise AuthError(f"{field} = {path!r}: {unsafe.why}", remedy=unsafe.remedy) from None


def _check_cli_config_dir(environ=os.environ):
    """The Azure CLI configuration `az` will use must be our own (root's).

    AzureCliCredential runs `az account get-access-token`, which loads the CLI extensions
    found in AZURE_CONFIG_DIR (default ~/.azure): a user's directory would run that user's
    code as root (the privilege escalation fixed upstream in Azure/AKSFlexNode#144).
    """
    configured = environ.get("AZURE_CONFIG_DIR")
    path = configured or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".azure")
    try:
        owner = os.stat(path).st_uid
    except FileNotFoundError:
        return  # not logged in: get_token reports that, with what to do
    except OSError as err:
        raise AuthError(f"Azure CLI configuration {path}: cannot inspect it ({err.strerror})") from None
    if owner != os.geteuid():
        field = f"AZURE_CONFIG_DIR = {configured!r}" if configured else f"Azure CLI configuration {path!r}"
        raise AuthError(
            f"{field} is owned by uid {owner}: expected this user's own (uid {os.geteuid()}); "
            "another user's CLI extensions would run with our privileges",
            remedy="unset AZURE_CONFIG_DIR (and keep HOME as root's), run `az login` as root, "
            "or use auth_method = service-principal",
        )


def _authority_kwargs(settings, credential_class):
    kwargs = {}
    if settings.authority:
        parts = urllib.parse.urlsplit(settings.authority)
        if parts.scheme != "https" or not parts.hostname:
            # azure-identity refuses http:// and misreads "host:port" (its normalize_authority,
            # azure/identity/_internal/utils.py).
            raise AuthError(f"authority = {settings.authority!r}: expected an https:// URL")
        kwargs["authority"] = settings.authority
        if parts.hostname.lower() not in WELL_KNOWN_AUTHORITY_HOSTS:
            switch = sdk_compat.instance_discovery_switch(credential_class)
            if switch is None:
                raise _discovery_cannot_be_off(settings.authority)
            kwargs.update(switch)
    # Entra unreachable: give up as quickly as the ARM clients do (clients.py), not after
    # azure-core's default backoff.
    kwargs.update(retry_connect=RETRY_CONNECT, retry_backoff_factor=BACKOFF_FACTOR,
                  connection_timeout=CONNECTION_TIMEOUT)
    # The proxy for the authority host as the run's HttpPolicy decides; never the
    # environment's (use_env_settings=False turns requests' trust_env off).
    policy = settings.policy or HttpPolicy()
    kwargs.update(policy.sdk_options(settings.authority or "https://login.microsoftonline.com"))
    kwargs.pop("connection_verify", None)
    if settings.ca_bundle:
        kwargs["connection_verify"] = settings.ca_bundle
    return kwargs


def _discovery_cannot_be_off(authority):
    """A custom authority on an azure-identity that cannot turn instance discovery off
    (1.7.0, Ubuntu 22.04's: sdk_compat.instance_discovery_switch). MSAL would ask
    login.microsoftonline.com's /common/discovery/instance about the host first and refuse
    the answer `invalid_instance` that Entra ID gives for a host it does not know (msal
    1.17.0's msal/authority.py, Authority.__init__); off the public internet it cannot ask
    at all. Refused here, before any request, instead of after a round trip."""
    version = getattr(azure.identity, "__version__", "?")
    return AuthError(
        f"authority = {authority!r}: this azure-identity ({version}) cannot turn off MSAL's instance "
        "discovery, which accepts only Entra ID's own hosts: expected the authority of the public, "
        "US Government or China cloud",
        remedy="use a cloud whose authority is an Entra ID host, or install azure-identity 1.13.0 or newer "
        "(Debian 12's and Ubuntu 24.04's python3-azure have it)",
        code="instance-discovery")


def credential(settings, root=None):
    """A TokenCredential for the operator. `settings` is an AuthSettings or the Config."""
    if not isinstance(settings, AuthSettings):
        settings = AuthSettings.from_config(settings, root)
    if not settings.method:
        # join_mode = bootstrap-token needs no [auth] (its join asks Azure nothing); what
        # still asks for a credential here (a Machine left by an earlier agent-pool join,
        # say) cannot be done without one.
        raise AuthError(
            "auth_method = '': no Azure credential is configured (join_mode = bootstrap-token needs none to "
            "join), and this needs one",
            remedy=f"set auth_method in [auth] to one of {', '.join(AUTH_METHODS)} with its keys, or do this "
            "step from a machine with an operator credential",
            code="no-credential")
    if settings.method not in AUTH_METHODS:
        raise AuthError(f"auth_method = {settings.method!r}: expected one of {', '.join(AUTH_METHODS)}")

    if settings.method == "service-principal":
        if not settings.client_id:
            raise AuthError("sp_client_id = '': expected the application (client) ID of the service principal")
        if settings.certificate_file:
            pem = read_secret_file(settings.certificate_file, "sp_certificate_file")
            if b"PRIVATE KEY-----" not in pem or b"BEGIN CERTIFICATE" not in pem:
                raise AuthError(
                    f"sp_certificate_file = {settings.certificate_file!r}: expected a PEM file with "
                    "the certificate and its unencrypted private key"
                )
            return CertificateCredential(
                settings.tenant_id,
                settings.client_id,
                certificate_data=pem,
                **_authority_kwargs(settings, CertificateCredential),
            )
        if settings.client_secret and not settings.client_secret_file:
            return ClientSecretCredential(
                settings.tenant_id,
                settings.client_id,
                settings.client_secret,
                **_authority_kwargs(settings, ClientSecretCredential),
            )
        if not settings.client_secret_file:
            raise AuthError(
                "sp_client_secret_file = '': expected the path of a 0600 file holding the client secret "
                "(or sp_certificate_file)"
            )
        raw = read_secret_file(settings.client_secret_file, "sp_client_secret_file")
        try:
            secret = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise AuthError(f"sp_client_secret_file = {settings.client_secret_file!r}: expected UTF-8 text") from None
        if not secret or "\n" in secret:
            raise AuthError(
                f"sp_client_secret_file = {settings.client_secret_file!r}: expected exactly one line, the secret"
            )
        return ClientSecretCredential(
            settings.tenant_id,
            settings.client_id,
            secret,
            **_authority_kwargs(settings, ClientSecretCredential),
        )

    if settings.method == "azure-cli":
        _check_cli_config_dir()
        return sdk_compat.azure_cli_credential(settings.tenant_id)

    kwargs = {}
    if settings.managed_identity_client_id:
        kwargs["client_id"] = settings.managed_identity_client_id
    return ManagedIdentityCredential(**kwargs)


# ---- errors ---------------------------------------------------------------------------

_AADSTS = re.compile(r"AADSTS(\d+)")


def auth_error_from(err, action):
    """AuthError for a ClientAuthenticationError (Entra ID refused us, or ARM's 401)."""
    text = getattr(err, "message", None) or str(err)
    if isinstance(err, CredentialUnavailableError):
        if "az login" in text:
            return AuthError(
                f"{action}: the Azure CLI has no logged-in account for this user",
                remedy="run `az login` as root once, in a terminal, or use auth_method = service-principal",
                code="az-not-logged-in",
            )
        if "not found on path" in text:
            return AuthError(
                f"{action}: auth_method = azure-cli, but the Azure CLI (az) is not installed",
                remedy="install azure-cli, or use auth_method = service-principal",
                code="az-not-installed",
            )
        return AuthError(f"{action}: no credential available: {text}")
    match = _AADSTS.search(text)
    if match:
        hint = AADSTS_HINTS.get(match.group(1), "check tenant_id, sp_client_id and the credential")
        # From "AADSTS<code>: ..." to the end of that line: the rest is trace IDs.
        detail = text[match.start():].splitlines()[0]
        return AuthError(f"{action}: Entra ID refused the credential: {detail[:300]}", remedy=hint)
    return AuthError(
        f"{action}: authentication failed: {text.strip().splitlines()[0][:300] if text.strip() else type(err).__name__}",
        remedy="check tenant_id, the authority of the configured cloud and the credential",
    )


def arm_code(err):
    """The ARM error code of an HttpResponseError ("AuthorizationFailed"), if any."""
    error = getattr(err, "error", None)
    code = getattr(error, "code", None)
    if code:
        return str(code)
    response = getattr(err, "response", None)
    try:
        return str(response.json()["error"]["code"])
    except Exception:  # any shape at all: this is best effort
        return None


def arm_message(err):
    error = getattr(err, "error", None)
    message = getattr(error, "message", None)
    if message:
        return str(message)
    text = getattr(err, "message", None) or str(err)
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


def _connection_failure(err):
    """The ServiceRequestError/ServiceResponseError behind `err`, if any: azure-identity
    reports "cannot connect to the authority" as a ClientAuthenticationError caused by one."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (ServiceRequestError, ServiceResponseError)):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def translate(err, action):
    """Our error for an exception out of the Azure SDK, or None if it is not one of theirs."""
    if isinstance(err, FlexNodeError):
        return err
    unreachable = _connection_failure(err)
    if unreachable is not None and not isinstance(err, CredentialUnavailableError):
        text = str(unreachable).strip()
        return TemporaryError(
            f"{action}: cannot reach Azure: {text.splitlines()[0][:300] if text else type(unreachable).__name__}",
            remedy="check the network, DNS, the CA bundle and https_proxy/no_proxy; then run the command again",
        )
    if isinstance(err, ClientAuthenticationError):
        return auth_error_from(err, action)
    if isinstance(err, HttpResponseError):
        status = getattr(err, "status_code", None)
        code = arm_code(err)
        message = arm_message(err)
        if status == 403:
            return AuthError(
                f"{action}: permission denied ({code or 403}): {message}",
                remedy="grant the operator identity the role this needs (docs/roles.md)",
                code="forbidden",
            )
        if status in (408, 429) or (status or 0) >= 500:
            return TemporaryError(f"{action}: Azure answered {status} ({code}): {message}")
        return FlexNodeError(f"{action}: Azure answered {status} ({code}): {message}")
    return None


@contextlib.contextmanager
def azure_errors(action):
    """Run a block of SDK calls; turn their failures into AuthError/TemporaryError/FlexNodeError."""
    try:
        yield
    except (ClientAuthenticationError, ServiceRequestError, ServiceResponseError, HttpResponseError) as err:
        raise translate(err, action) from err


def arm_token(cred, scope):
    """An access token string for `scope` (e.g. for `azcmagent connect`). Never log it."""
    with azure_errors("getting an access token for " + scope):
        return cred.get_token(scope).token
