"""Operator credentials against the emulator's Entra ID, with the installed azure-identity."""

import dataclasses
import datetime
import os
import re

import pytest
from azure.identity import AzureCliCredential, CertificateCredential, ClientSecretCredential
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from aks_flex_node.azure import auth, sdk_compat
from aks_flex_node.errors import AuthError, ExitCode, TemporaryError
from tests.emulator import constants as C
from tests.emulator_fixtures import PUBLIC_AUTHORITY_HOST, routes_hook
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import NO_DISCOVERY_SWITCH, settings_for, write_secret


def token_requests(emulator):
    return emulator.requests(server="entra", method="POST", path_contains="/oauth2/v2.0/token")


def test_secret_file_credential_gets_an_arm_token(fresh_emulator, endpoints, secret_file):
    token = auth.arm_token(auth.credential(settings_for(endpoints, secret_file)), C.ARM_SCOPE)
    assert token.startswith(C.TOKEN_PREFIX)
    # Offline with a custom authority: instance discovery was switched off with the
    # keyword this azure-identity knows, or MSAL would have gone to the public cloud.
    assert len(token_requests(fresh_emulator)) == 1


def test_instance_discovery_keyword_matches_the_installed_azure_identity():
    import azure.identity

    expected = {"1.13.0b2": {"instance_discovery": False}, "1.7.0": None}.get(
        azure.identity.__version__, {"disable_instance_discovery": True})
    assert sdk_compat.instance_discovery_switch(ClientSecretCredential) == expected
    assert sdk_compat.instance_discovery_switch(CertificateCredential) == expected


@pytest.mark.skipif(not NO_DISCOVERY_SWITCH, reason="this azure-identity can turn instance discovery off")
def test_custom_authority_without_a_discovery_switch_is_refused_before_any_request(fresh_emulator, endpoints,
                                                                                   secret_file):
    """azure-identity 1.7.0 (Ubuntu 22.04): MSAL would ask login.microsoftonline.com about the
    emulator's host and get invalid_instance; refused with what to do, nothing sent."""
    custom = dataclasses.replace(endpoints, authority=fresh_emulator.entra)
    with pytest.raises(AuthError) as caught:
        auth.credential(settings_for(custom, secret_file))
    assert caught.value.code == "instance-discovery"
    assert f"authority = {custom.authority!r}" in caught.value.message
    assert "1.13.0" in caught.value.remedy  # the azure-identity that can turn it off
    assert fresh_emulator.requests(server="entra") == []


@pytest.mark.parametrize("host", ["login.microsoftonline.com", "login.microsoft.com", "login.microsoftonline.us"])
def test_entra_hosts_are_accepted_on_every_azure_identity(endpoints, secret_file, host):
    """Entra ID's own hosts: MSAL needs no switch for them (instance discovery, where it
    runs, answers for them), so every azure-identity builds the credential."""
    settings = auth.AuthSettings(**{**settings_for(endpoints, secret_file).__dict__, "authority": f"https://{host}"})
    assert isinstance(auth.credential(settings), ClientSecretCredential)


def test_azure_cli_credential_asks_az_for_the_configured_tenant(fresh_emulator, endpoints, fake_az):
    """AzureCliCredential(tenant_id=) came with azure-identity 1.11.0b3; on 1.7.0 the tenant
    goes to each get_token (sdk_compat): either way `az` is asked with --tenant."""
    fake_az.login()
    token = auth.arm_token(auth.credential(auth.AuthSettings(method="azure-cli", tenant_id=C.TENANT_ID)),
                           C.ARM_SCOPE)
    assert token.startswith(C.TOKEN_PREFIX)
    (argv,) = fake_az.calls()
    assert argv[:2] == ["account", "get-access-token"]
    assert argv[argv.index("--tenant") + 1] == C.TENANT_ID
    assert argv[argv.index("--resource") + 1] == C.ARM_SCOPE[: -len("/.default")]


def test_well_known_authority_keeps_instance_discovery(endpoints, secret_file):
    settings = settings_for(endpoints, secret_file)
    public = auth.AuthSettings(**{**settings.__dict__, "authority": "https://login.microsoftonline.com"})
    kwargs = auth._authority_kwargs(public, ClientSecretCredential)
    assert kwargs["authority"] == "https://login.microsoftonline.com"
    assert "instance_discovery" not in kwargs and "disable_instance_discovery" not in kwargs
    assert kwargs["connection_verify"] == endpoints.ca_bundle


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_secret_file_readable_by_others_is_refused_before_any_request(fresh_emulator, endpoints, tmp_path, mode):
    loose = write_secret(tmp_path / "loose-secret", C.SP_CLIENT_SECRET, mode)
    with pytest.raises(AuthError) as caught:
        auth.credential(settings_for(endpoints, loose))
    message = caught.value.message
    assert "sp_client_secret_file" in message and str(loose) in message
    assert f"mode {mode:04o}" in message and "expected 0600" in message
    assert C.SP_CLIENT_SECRET not in message
    assert token_requests(fresh_emulator) == []


def test_symlinked_secret_file_is_refused(endpoints, tmp_path, secret_file):
    link = tmp_path / "link"
    link.symlink_to(secret_file)
    with pytest.raises(AuthError, match="is a symlink"):
        auth.credential(settings_for(endpoints, link))


@pytest.mark.parametrize("content, expected", [("", "exactly one line"), ("a\nb", "exactly one line")])
def test_secret_file_content_is_checked(endpoints, tmp_path, content, expected):
    path = tmp_path / "s"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(AuthError, match=expected):
        auth.credential(settings_for(endpoints, path))


def test_missing_secret_file_names_the_field(endpoints, tmp_path):
    with pytest.raises(AuthError, match=r"sp_client_secret_file = '.*/nope'"):
        auth.credential(settings_for(endpoints, tmp_path / "nope"))


def test_wrong_secret_is_an_auth_error_with_the_aadsts_code(endpoints, tmp_path):
    wrong = write_secret(tmp_path / "wrong", "not-the-secret")
    cred = auth.credential(settings_for(endpoints, wrong))
    with pytest.raises(AuthError) as caught:
        auth.arm_token(cred, C.ARM_SCOPE)
    err = caught.value
    assert err.exit_code == ExitCode.AUTH
    assert "AADSTS7000215" in err.message
    assert "sp_client_secret_file" in err.remedy
    assert "not-the-secret" not in err.message


def test_unknown_application_names_what_to_check(endpoints, secret_file):
    cred = auth.credential(settings_for(endpoints, secret_file, client_id="11111111-2222-3333-4444-555555555555"))
    with pytest.raises(AuthError) as caught:
        auth.arm_token(cred, C.ARM_SCOPE)
    assert "AADSTS700016" in caught.value.message
    assert "sp_client_id" in caught.value.remedy


def test_unreachable_authority_is_temporary(fresh_emulator, endpoints, secret_file, monkeypatch):
    # A port nothing listens on: the credential's own retries, then exit 75.
    settings = settings_for(endpoints, secret_file)
    dead = auth.AuthSettings(**{**settings.__dict__, "authority": "https://127.0.0.1:9"})
    if NO_DISCOVERY_SWITCH:  # only Entra ID's hosts are taken: the public one's name leads nowhere
        monkeypatch.setenv(routes_hook().VARIABLE, f"{PUBLIC_AUTHORITY_HOST}=127.0.0.1:9")
        dead = settings
    with pytest.raises(TemporaryError) as caught:
        auth.arm_token(auth.credential(dead), C.ARM_SCOPE)
    assert caught.value.exit_code == ExitCode.TEMPFAIL


def test_http_authority_is_refused(endpoints, secret_file):
    settings = settings_for(endpoints, secret_file)
    plain = auth.AuthSettings(**{**settings.__dict__, "authority": "http://127.0.0.1:9"})
    with pytest.raises(AuthError, match=r"authority = 'http://127\.0\.0\.1:9'"):
        auth.credential(plain)


def _pem_certificate_with_key():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aks-flex-node test SP")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ) + cert.public_bytes(serialization.Encoding.PEM)


def test_certificate_credential_gets_a_token(fresh_emulator, endpoints, tmp_path):
    pem = tmp_path / "sp.pem"
    pem.write_bytes(_pem_certificate_with_key())
    pem.chmod(0o600)
    settings = auth.AuthSettings(
        method="service-principal", tenant_id=C.TENANT_ID, client_id=C.CERT_SP_CLIENT_ID,
        certificate_file=str(pem), authority=endpoints.authority, ca_bundle=endpoints.ca_bundle,
    )
    assert auth.arm_token(auth.credential(settings), C.ARM_SCOPE).startswith(C.TOKEN_PREFIX)
    assert token_requests(fresh_emulator)[-1]["detail"]["client_id"] == C.CERT_SP_CLIENT_ID


def test_certificate_file_readable_by_group_is_refused(endpoints, tmp_path):
    pem = tmp_path / "sp.pem"
    pem.write_bytes(_pem_certificate_with_key())
    pem.chmod(0o640)
    settings = auth.AuthSettings(
        method="service-principal", tenant_id=C.TENANT_ID, client_id=C.CERT_SP_CLIENT_ID,
        certificate_file=str(pem), authority=endpoints.authority,
    )
    with pytest.raises(AuthError, match="sp_certificate_file = .*0640"):
        auth.credential(settings)


def test_certificate_without_key_is_refused(endpoints, tmp_path):
    pem = tmp_path / "cert-only.pem"
    pem.write_bytes(_pem_certificate_with_key().split(b"-----END PRIVATE KEY-----\n")[1])
    pem.chmod(0o600)
    settings = auth.AuthSettings(
        method="service-principal", tenant_id=C.TENANT_ID, client_id=C.CERT_SP_CLIENT_ID,
        certificate_file=str(pem), authority=endpoints.authority,
    )
    with pytest.raises(AuthError, match=re.escape(f"sp_certificate_file = {str(pem)!r}")):
        auth.credential(settings)


@pytest.fixture
def az_dir(tmp_path, monkeypatch):
    """A directory first on PATH for a stand-in `az` (the Azure CLI is a host command)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}:/usr/sbin:/usr/bin:/sbin:/bin")
    return directory


def test_azure_cli_not_logged_in_says_to_run_az_login_as_root(az_dir):
    az = az_dir / "az"
    az.write_text("#!/bin/sh\necho \"ERROR: Please run 'az login' to setup account.\" >&2\nexit 1\n")
    az.chmod(0o755)
    cred = auth.credential(auth.AuthSettings(method="azure-cli", tenant_id=C.TENANT_ID))
    with pytest.raises(AuthError) as caught:
        auth.arm_token(cred, C.ARM_SCOPE)
    assert caught.value.code == "az-not-logged-in"
    assert "az login" in caught.value.remedy and "root" in caught.value.remedy
    assert "service-principal" in caught.value.remedy


def test_azure_cli_token_is_used_when_logged_in(az_dir):
    # What `az account get-access-token --output json` prints.
    az = az_dir / "az"
    az.write_text(
        "#!/bin/sh\n"
        "cat <<EOF\n"
        '{"accessToken": "emuat.from-cli", "expiresOn": "2099-01-01 00:00:00.000000", '
        '"expires_on": 4070908800, "subscription": "s", "tenant": "t", "tokenType": "Bearer"}\n'
        "EOF\n"
    )
    az.chmod(0o755)
    cred = auth.credential(auth.AuthSettings(method="azure-cli", tenant_id=C.TENANT_ID))
    assert auth.arm_token(cred, C.ARM_SCOPE) == "emuat.from-cli"


def test_azure_cli_missing_says_to_install_it(az_dir):
    cred = auth.credential(auth.AuthSettings(method="azure-cli", tenant_id=C.TENANT_ID))
    with pytest.raises(AuthError) as caught:
        auth.arm_token(cred, C.ARM_SCOPE)
    assert caught.value.code == "az-not-installed"


def test_unknown_auth_method_names_the_field():
    with pytest.raises(AuthError, match="auth_method = 'password'.*service-principal"):
        auth.credential(auth.AuthSettings(method="password", tenant_id=C.TENANT_ID))


def test_no_auth_method_says_none_is_configured_and_what_to_set():
    """bootstrap-token mode has no [auth]: a step that still needs Azure gets a plain answer,
    not "'' is not one of the methods"."""
    with pytest.raises(AuthError) as caught:
        auth.credential(auth.AuthSettings(method="", tenant_id=""))
    assert caught.value.code == "no-credential"
    assert "auth_method = ''" in caught.value.message and "join_mode = bootstrap-token" in caught.value.message
    assert "auth_method" in caught.value.remedy and "[auth]" in caught.value.remedy  # where to set it
    assert caught.value.exit_code == ExitCode.AUTH


def test_managed_identity_client_id_is_passed(monkeypatch):
    cred = auth.credential(auth.AuthSettings(method="managed-identity", tenant_id=C.TENANT_ID,
                                             managed_identity_client_id="aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"))
    assert type(cred).__name__ == "ManagedIdentityCredential"


def test_settings_from_a_loaded_config(fresh_emulator, tmp_path, no_proxy):
    """The adapter reads the secret file under the config's root and the endpoints it resolved."""
    from aks_flex_node import config

    root = tmp_path / "root"
    (root / "etc/aks-flex-node").mkdir(parents=True)
    write_secret(root / "etc/aks-flex-node/sp-secret", C.SP_CLIENT_SECRET)
    ca = root / "etc/aks-flex-node/ca.pem"
    ca.write_bytes(open(fresh_emulator.ca_bundle, "rb").read())
    cfg = config.from_values(
        {
            "tenant_id": C.TENANT_ID,
            "cloud": "custom",
            "arm_endpoint": fresh_emulator.arm,
            "authority_host": fresh_emulator.authority,
            "ca_bundle": "/etc/aks-flex-node/ca.pem",
            "auth_method": "service-principal",
            "sp_client_id": C.SP_CLIENT_ID,
            "sp_client_secret_file": "/etc/aks-flex-node/sp-secret",
            "cluster_resource_id": C.CLUSTER_ID,
            "machine_name": "flex-node-1",
        },
        root=str(root),
    )
    settings = auth.AuthSettings.from_config(cfg)
    assert settings.client_secret_file == str(root / "etc/aks-flex-node/sp-secret")
    assert settings.ca_bundle == str(ca)
    assert settings.authority == fresh_emulator.authority
    assert C.SP_CLIENT_SECRET not in repr(settings)
    assert auth.arm_token(auth.credential(cfg), C.ARM_SCOPE).startswith(C.TOKEN_PREFIX)


def test_in_memory_secret_from_an_upstream_config(endpoints):
    """A secret read from an upstream config.json never touches a file: it is used as is."""
    settings = auth.AuthSettings(method="service-principal", tenant_id=C.TENANT_ID, client_id=C.SP_CLIENT_ID,
                                 client_secret=C.SP_CLIENT_SECRET, authority=endpoints.authority,
                                 ca_bundle=endpoints.ca_bundle)
    assert C.SP_CLIENT_SECRET not in repr(settings)
    assert auth.arm_token(auth.credential(settings), C.ARM_SCOPE).startswith(C.TOKEN_PREFIX)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_azure_cli_config_of_another_user_is_refused(az_dir, tmp_path, monkeypatch):
    foreign = tmp_path / "user-azure"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)  # nobody's: as with sudo keeping a user's AZURE_CONFIG_DIR
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(foreign))
    with pytest.raises(AuthError, match=f"AZURE_CONFIG_DIR = '{foreign}'.*uid 65534"):
        auth.credential(auth.AuthSettings(method="azure-cli", tenant_id=C.TENANT_ID))
    os.chown(foreign, os.geteuid(), os.getegid())
    assert isinstance(auth.credential(auth.AuthSettings(method="azure-cli", tenant_id=C.TENANT_ID)), AzureCliCredential)
