"""The one careful read (host/careful_read.py) and the readers that use it: a secret file, the
HIMDS challenge key, a file the configuration names, the token plugin's cache. None follows a
link swapped in, waits on a FIFO, or reads past its cap."""

import os
import threading

import pytest

from aks_flex_node.azure.auth import read_secret_file
from aks_flex_node.errors import AuthError, ConfigError
from aks_flex_node.host import careful_read
from aks_flex_node.token import TokenCache
from tests.config_fixtures import make_root, secret_file, sp
from tests.config_fixtures import load as load_config

# A read that waited on a FIFO would never come back: the test fails after this instead of
# hanging the suite. No run is expected to come near it (the reads return at once).
HANG = 120


def returns(call):
    """What `call()` returns or raises, run where a hang cannot stop the suite."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), "the read waited (a FIFO opened without O_NONBLOCK?)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture
def files(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cr3t\n")
    secret.chmod(0o600)
    return tmp_path, secret


def test_a_private_regular_file_is_read(files):
    _, secret = files
    assert careful_read.read(str(secret), 64, private=True, owners=careful_read.root_or_us()) == b"s3cr3t\n"


def test_a_symlink_is_not_followed_even_to_a_good_file(files):
    tmp_path, secret = files
    link = tmp_path / "link"
    link.symlink_to(secret)
    with pytest.raises(careful_read.Unsafe) as excinfo:
        careful_read.read(str(link), 64)
    assert excinfo.value.code == "symlink"


def test_a_public_file_may_be_read_through_a_link_a_fifo_never(files):
    """A CA as update-ca-certificates leaves it in /etc/ssl/certs (a link) is read when the
    caller says the file is public (follow=True); what it leads to must still be a regular file."""
    tmp_path, secret = files
    link = tmp_path / "ca-link.pem"
    link.symlink_to(secret)
    assert careful_read.read(str(link), 64, follow=True) == b"s3cr3t\n"
    fifo = tmp_path / "fifo-for-link"
    os.mkfifo(fifo, 0o600)
    (tmp_path / "to-fifo").symlink_to(fifo)
    with pytest.raises(careful_read.Unsafe, match="FIFO") as excinfo:  # what it is
        returns(lambda: careful_read.read(str(tmp_path / "to-fifo"), 64, follow=True))
    assert excinfo.value.code == "not-regular"


def test_a_fifo_is_refused_without_waiting_for_a_writer(files):
    tmp_path, _ = files
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(careful_read.Unsafe, match="FIFO") as excinfo:  # what it is
        returns(lambda: careful_read.read(str(fifo), 64))
    assert excinfo.value.code == "not-regular"


def test_a_directory_a_loose_mode_a_foreign_owner_and_a_big_file(files):
    tmp_path, secret = files
    with pytest.raises(careful_read.Unsafe, match="directory") as excinfo:  # what it is
        careful_read.read(str(tmp_path), 64)
    assert excinfo.value.code == "not-regular"
    secret.chmod(0o640)
    with pytest.raises(careful_read.Unsafe, match="0640") as excinfo:  # the mode found
        careful_read.read(str(secret), 64, private=True)
    assert excinfo.value.code == "loose-mode" and excinfo.value.remedy == f"chmod 600 {secret}"
    assert careful_read.read(str(secret), 64) == b"s3cr3t\n"  # not asked to be private
    with pytest.raises(careful_read.Unsafe, match=f"uid {os.geteuid()}") as excinfo:  # the owner found
        careful_read.read(str(secret), 64, owners=(os.geteuid() + 1,))
    assert excinfo.value.code == "foreign-owner" and excinfo.value.remedy == f"chown root:root {secret}"
    with pytest.raises(careful_read.Unsafe) as excinfo:
        careful_read.read(str(secret), 6)
    # the size found and the limit
    assert excinfo.value.code == "too-large" and "7" in excinfo.value.why and "6" in excinfo.value.why
    with pytest.raises(careful_read.Unsafe) as excinfo:
        careful_read.read(str(tmp_path / "gone"), 6)
    assert excinfo.value.code == "absent" and excinfo.value.errno == 2


def test_a_fifo_as_the_client_secret_file_is_refused_at_once(files):
    """azure/auth.py's read of sp_client_secret_file used to open without O_NONBLOCK: a FIFO
    swapped in after the configuration was checked would hold the join (and its lock)."""
    tmp_path, _ = files
    fifo = tmp_path / "secret-fifo"
    os.mkfifo(fifo, 0o600)
    # the field, the file and what it is
    with pytest.raises(AuthError, match=rf"sp_client_secret_file = '{fifo}'.*FIFO"):
        returns(lambda: read_secret_file(str(fifo), "sp_client_secret_file"))


def test_a_fifo_or_a_foreign_file_as_the_token_cache_is_not_used(files):
    """The kubelet runs the token plugin on every credential refresh: a FIFO at the cache's
    path must not make it wait (the cache's read had no O_NONBLOCK)."""
    tmp_path, _ = files
    fifo = tmp_path / "token-cache"
    os.mkfifo(fifo, 0o600)
    assert returns(lambda: TokenCache(str(fifo)).load("https://example/", 0)) is None
    loose = tmp_path / "loose-cache"
    loose.write_text('{"access_token": "t", "expires_on": 3600, "resource": "r"}')
    loose.chmod(0o644)
    assert TokenCache(str(loose)).load("r", 0) is None
    loose.chmod(0o600)
    assert TokenCache(str(loose)).load("r", 0).access_token == "t"  # the same file, ours: used


def test_a_named_file_that_is_a_symlink_is_refused_when_the_config_is_checked(tmp_path):
    """Found at validation, naming the key: before, the configuration accepted a linked
    certificate that the credential's read then refused (or, for a CA, read as root)."""
    root = make_root(tmp_path)
    real = secret_file(root, "s3cr3t\n", name="real-secret")
    os.symlink("real-secret", root / "etc/aks-flex-node/sp-secret")
    with pytest.raises(ConfigError) as excinfo:
        load_config(root, sp(sp_client_secret_file="/etc/aks-flex-node/sp-secret"))
    [problem] = [p for p in excinfo.value.problems if p.key == "sp_client_secret_file"]
    assert problem.value == "/etc/aks-flex-node/sp-secret"
    assert problem.expected.startswith("a regular file, not a symlink") and problem.expected.endswith("chmod 600")
    assert load_config(root, sp(sp_client_secret_file=real)).sp_client_secret_file == real


def test_a_ca_bundle_may_be_a_link_as_in_etc_ssl_certs(tmp_path):
    """A public file the configuration names (ca_bundle) may be a link, as
    update-ca-certificates makes each CA in /etc/ssl/certs: it is followed."""
    root = make_root(tmp_path)
    pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n"
    secret_file(root, pem, mode=0o644, name="corp-ca.crt")
    os.symlink("corp-ca.crt", root / "etc/aks-flex-node/corp-ca.pem")
    cfg = load_config(root, sp(ca_bundle="/etc/aks-flex-node/corp-ca.pem",
                               sp_client_secret_file=secret_file(root)))
    assert cfg.ca_bundle == "/etc/aks-flex-node/corp-ca.pem"
