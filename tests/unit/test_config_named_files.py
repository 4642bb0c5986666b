"""What the files the configuration names hold is checked with the configuration (the
bad-input corpus, files/secret-*): a client secret file that is blank, not UTF-8, too big
or of several lines, and a PEM file without its blocks or with an encrypted key, are
refused at load, naming the key and the file and never the content."""

import os

import pytest

from aks_flex_node import config
from aks_flex_node.config import named_files
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import SP_ID, make_root, sp, write_conf

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def problems(root, sections):
    write_conf(root, sections)
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root))
    return excinfo.value.problems


def the_problem(root, sections, key, path):
    found = problems(root, sections)
    assert [(p.key, p.value) for p in found] == [(key, path)], [str(p) for p in found]
    return found[0]


def bytes_file(root, data, name="sp-secret", mode=0o600):
    path = root / "etc/aks-flex-node" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return "/etc/aks-flex-node/" + name


# ---- sp_client_secret_file ------------------------------------------------------------------


@pytest.mark.parametrize("content, expected", [
    (b"\n", "only whitespace"),
    (b"  \t\r\n\n", "only whitespace"),
    (b"\xff\xfe\x00s3cr3t\n", "not UTF-8"),
    (b"s3cr3t\nsecond-line\n", "alone, on one line (it has 2 lines"),
    (b"s3cr3t\r\nsecond\r\n", "alone, on one line"),
    (b"s3c\x00r3t\n", "a control character"),
    (b"s" * (named_files.SECRET_MAX_BYTES + 1), f"at most {named_files.SECRET_MAX_BYTES} bytes"),
])
def test_a_bad_secret_file_is_refused_at_load_naming_the_key_and_file(root, content, expected):
    path = bytes_file(root, content)
    problem = the_problem(root, sp(sp_client_secret_file=path), "sp_client_secret_file", path)
    assert expected in problem.expected
    secret_text = content.strip().decode("utf-8", "replace")
    assert secret_text[:6] not in str(problem) or not secret_text.strip()  # never the content


@pytest.mark.parametrize("content", [b"s3cr3t", b"s3cr3t\n", b"  s3cr3t  \n", "sécret~._-\n".encode(),
                                     b"s" * named_files.SECRET_MAX_BYTES])
def test_a_secret_of_one_line_with_a_trailing_newline_or_none_loads(root, content):
    path = bytes_file(root, content)
    write_conf(root, sp(sp_client_secret_file=path))
    cfg = config.load(root=str(root))
    assert cfg.client_secret() == content.decode("utf-8").strip()


def test_a_big_secret_file_is_not_read_whole(root):
    """Its size is refused from its stat: a runaway file is never read into memory."""
    path = root / "etc/aks-flex-node/sp-secret"
    path.parent.mkdir(parents=True)
    with open(path, "wb") as handle:
        handle.truncate(64 * 1024 * 1024 * 1024)  # sparse: 64 GiB that take no disk
    path.chmod(0o600)
    problem = the_problem(root, sp(sp_client_secret_file="/etc/aks-flex-node/sp-secret"),
                          "sp_client_secret_file", "/etc/aks-flex-node/sp-secret")
    assert f"(the file has {64 * 1024 ** 3})" in problem.expected


def test_a_secret_fifo_is_refused_without_being_opened(root):
    fifo = root / "etc/aks-flex-node/sp-secret"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo, 0o600)
    problem = the_problem(root, sp(sp_client_secret_file="/etc/aks-flex-node/sp-secret"),
                          "sp_client_secret_file", "/etc/aks-flex-node/sp-secret")
    assert problem.expected == "a regular file (it is a named pipe (FIFO))"


def test_a_secret_file_being_written_by_import_is_not_read(root):
    """config import checks the text it is about to write before the secret file exists."""
    from aks_flex_node.config import loader

    sections = sp(sp_client_secret_file="/etc/aks-flex-node/sp-secret")
    from tests.config_fixtures import conf_text

    cfg = loader.check_text(conf_text(sections), root=str(root), written=("sp_client_secret_file",))
    assert cfg.sp_client_id == SP_ID


def test_the_bad_content_and_a_bad_mode_are_reported_together(root):
    path = bytes_file(root, b"\n", mode=0o644)
    found = problems(root, sp(sp_client_secret_file=path))
    assert [p.key for p in found] == ["sp_client_secret_file"] * 2
    assert "chmod 600" in found[0].expected and "only whitespace" in found[1].expected


# ---- sp_certificate_file and ca_bundle ------------------------------------------------------


def cert_values(path):
    return sp(sp_certificate_file=path)


@pytest.mark.parametrize("content, expected", [
    (CERT.encode() + b"\xff" + KEY.encode(), "not UTF-8"),
    (CERT.encode(), "no PRIVATE KEY block found"),
    (b"-----BEGIN CERTIFICATE-----\nMIIB\n" + KEY.encode(), "no CERTIFICATE block found"),  # no END line
    (b"not a certificate\n", "no CERTIFICATE or PRIVATE KEY block found"),
    (CERT.encode() + b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIE\n-----END ENCRYPTED PRIVATE KEY-----\n",
     "an unencrypted private key"),
    (CERT.encode() + b"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nMIIE\n"
     b"-----END RSA PRIVATE KEY-----\n", "an unencrypted private key"),
    (b"x" * (named_files.CERTIFICATE_MAX_BYTES + 1), f"at most {named_files.CERTIFICATE_MAX_BYTES} bytes"),
])
def test_a_bad_certificate_file_is_refused(root, content, expected):
    path = bytes_file(root, content, name="sp.pem")
    problem = the_problem(root, cert_values(path), "sp_certificate_file", path)
    assert expected in problem.expected


@pytest.mark.parametrize("content", [
    CERT + KEY, KEY + CERT,
    CERT + "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n",
    "Bag Attributes\n    friendlyName: nœud\n" + CERT + KEY,  # openssl pkcs12 output, UTF-8 comment
    CERT.replace("\n", "\r\n") + KEY.replace("\n", "\r\n"),
])
def test_a_certificate_and_its_unencrypted_key_load(root, content):
    path = bytes_file(root, content.encode(), name="sp.pem")
    write_conf(root, cert_values(path))
    assert config.load(root=str(root)).sp_certificate_file == path


def test_a_ca_bundle_is_a_pem_file_of_certificates(root):
    path = bytes_file(root, b"\xff\xd8\xff\xe0 a JPEG", name="ca.pem", mode=0o644)
    from tests.config_fixtures import with_values

    problem = the_problem(root, with_values(ca_bundle=path), "ca_bundle", path)
    assert "not UTF-8" in problem.expected
    bytes_file(root, ("# NetLock Arany (Class Gold) Főtanúsítvány\n" + CERT * 2).encode(), name="ca.pem",
               mode=0o644)
    write_conf(root, with_values(ca_bundle=path))
    assert config.load(root=str(root)).ca_bundle == path
