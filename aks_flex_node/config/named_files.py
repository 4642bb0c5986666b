"""The files the configuration names (client secret, certificate, CA bundle): there, a
regular file, changed by nobody but root (strictmodes), and holding what the key says.

Their content is checked when the configuration is, so a bad secret is refused by `config
validate` and before bootstrap changes anything, not at the first token request. Every
problem names the key and the file, never what the file holds.
"""

import errno
import os
import re
import stat

from aks_flex_node import artifact_digests, paths
from aks_flex_node import strictmodes
from aks_flex_node.config.fileformat import file_kind, is_control
from aks_flex_node.errors import ConfigProblem
from aks_flex_node.host import careful_read, observed

# Entra ID generates client secrets of 16 to 64 characters (Microsoft Graph,
# "passwordCredential resource type", secretText:
# https://learn.microsoft.com/graph/api/resources/passwordcredential). 1 KiB leaves room
# for older, hand-set secrets and is still nothing a secret file could grow to by mistake.
SECRET_MAX_BYTES = 1024
# azure/auth.py reads a certificate file of at most 64 KiB (MAX_SECRET_FILE_BYTES); a
# certificate chain and its private key take a few KiB.
CERTIFICATE_MAX_BYTES = 64 * 1024
# Debian's /etc/ssl/certs/ca-certificates.crt, every CA Mozilla trusts, is about 200 KiB.
CA_BUNDLE_MAX_BYTES = 16 * 1024 * 1024
# A cluster CA is one certificate (a rotation puts two in it), under 2 KiB each.
CLUSTER_CA_MAX_BYTES = 1024 * 1024

# A Kubernetes bootstrap token: <token-id>.<token-secret>, 6 and 16 of [a-z0-9]
# (https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/#token-format).
BOOTSTRAP_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
BOOTSTRAP_TOKEN_FORM = "<6 chars>.<16 chars>"
# The token and its newline; a little room for a hand-made file's trailing blanks.
BOOTSTRAP_TOKEN_MAX_BYTES = 256
# artifact_digests_file: a line is under 200 bytes; 1 MiB is thousands of builds.
DIGESTS_MAX_BYTES = 1024 * 1024


def bootstrap_token_problem(text):
    """What is wrong with a bootstrap token, in words that never show it; None if it is one."""
    if BOOTSTRAP_TOKEN.match(text.strip()):
        return None
    return (f"a file holding only a Kubernetes bootstrap token {BOOTSTRAP_TOKEN_FORM} (lowercase letters and "
            f"digits): what it holds is not a bootstrap token of the form {BOOTSTRAP_TOKEN_FORM}")


def check_bootstrap_token_file(key, node_path, root, problems):
    """bootstrap_token_file: private like a client secret, holding one bootstrap token."""
    data = _checked_read(key, node_path, root, problems, BOOTSTRAP_TOKEN_MAX_BYTES, "a bootstrap token")
    if data is None:
        return
    try:
        expected = bootstrap_token_problem(data.decode("utf-8"))
    except UnicodeDecodeError:
        expected = bootstrap_token_problem("")
    if expected:
        problems.append(ConfigProblem(key, node_path, expected))


def read_bootstrap_token(path):
    """The token in the file at `path` (on this filesystem); ValueError naming what is wrong."""
    with open(path, "rb") as handle:
        data = handle.read(BOOTSTRAP_TOKEN_MAX_BYTES + 1)
    text = data.decode("utf-8", errors="replace")
    expected = bootstrap_token_problem(text) if len(data) <= BOOTSTRAP_TOKEN_MAX_BYTES else "at most 256 bytes"
    if expected:
        raise ValueError(expected)
    return text.strip()


def check_digests_file(key, node_path, root, problems):
    """artifact_digests_file: the operator's digests (artifact_digests.py says the form).
    What it says is what we install, so it is held to strictmodes (root's or ours, nobody
    else may change it or its directories, nor a link's target's), read carefully (no FIFO
    waited on, a size cap), and a link to it is followed as for ca_bundle, a public file.
    The parsed table, or None with problems appended."""
    data = _checked_read(key, node_path, root, problems, DIGESTS_MAX_BYTES, "a digest list", private=False)
    if data is None:
        return None
    try:
        return artifact_digests.parse(data.decode("utf-8"), node_path)
    except UnicodeDecodeError:
        problems.append(ConfigProblem(key, node_path, "a UTF-8 text file of digest lines"))
    except artifact_digests.DigestTableError as err:
        problems.append(ConfigProblem(key, node_path, f"digest lines: {err.message}"))
    return None


def check_secret_file(key, node_path, root, problems):
    """sp_client_secret_file: the client secret alone, on one line (a trailing newline is fine)."""
    data = _checked_read(key, node_path, root, problems, SECRET_MAX_BYTES, "a client secret")
    if data is None:
        return
    expected = _secret_problem(data)
    if expected:
        problems.append(ConfigProblem(key, node_path, expected))


def _secret_problem(data):
    """What is wrong with the bytes of a secret file, in words that never show them."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "a file holding the client secret as UTF-8 text (it holds bytes that are not UTF-8)"
    secret = text.strip()
    if not secret:
        return "a file holding the client secret (it holds only whitespace)"
    if "\n" in secret or "\r" in secret:
        return ("a file holding the client secret alone, on one line (it has "
                f"{len(secret.splitlines())} lines; a trailing newline is fine)")
    if any(is_control(c) for c in secret):
        return "a file holding the client secret in printable characters (it holds a control character)"
    return None


def check_pem_file(key, node_path, root, problems, private, kinds, max_bytes):
    """A PEM file (RFC 7468) with a BEGIN and END line for each of `kinds`; a private key
    must not be encrypted (nothing gives us its passphrase). Its bytes, or None with
    problems appended (a step that copies the file reads it through this check again)."""
    data = _checked_read(key, node_path, root, problems, max_bytes, "a PEM file", private=private)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")  # PEM is ASCII; comments between blocks may be UTF-8
    except UnicodeDecodeError:
        problems.append(ConfigProblem(key, node_path, "a PEM text file (it holds bytes that are not UTF-8)"))
        return None
    missing = [kind for kind in kinds if not _has_block(text, kind)]
    if missing:
        problems.append(ConfigProblem(key, node_path, "a PEM file with " + " and ".join(
            f"a {kind} block" for kind in kinds) + f" (no {' or '.join(missing)} block found: "
            "a -----BEGIN ...----- line and its -----END ...----- line)"))
    elif "PRIVATE KEY" in kinds and ("-----BEGIN ENCRYPTED PRIVATE KEY-----" in text
                                     or "Proc-Type: 4,ENCRYPTED" in text):
        problems.append(ConfigProblem(key, node_path, "a PEM file with an unencrypted private key "
                                                      "(aks-flex-node has no passphrase to give): "
                                                      "openssl pkey -in <file> -out <new file>"))
    else:
        return data
    return None


def has_certificate(text):
    """True when `text` holds a PEM CERTIFICATE block (its BEGIN and END lines)."""
    return _has_block(text, "CERTIFICATE")


def _has_block(text, kind):
    """A BEGIN line of `kind` ("PRIVATE KEY" also matches "RSA PRIVATE KEY") and its END line."""
    for match in re.finditer(rf"^-----BEGIN ((?:[A-Z0-9]+ )*{kind})-----[ \t]*\r?$", text, re.MULTILINE):
        if re.search(rf"^-----END {match.group(1)}-----[ \t]*\r?$", text[match.end():], re.MULTILINE):
            return True
    return False


def _not_a_link(private):
    return ("a regular file, not a symlink (aks-flex-node, as root, follows none to a file it reads): put the "
            "file itself at this path" + (", owned by root, chmod 600" if private else ""))


def _checked_read(key, node_path, root, problems, max_bytes, what, private=True):
    """The bytes of a file named by `key`, or None with its problems appended: there,
    regular and not a link to one (never opened otherwise: a FIFO would block; a link
    swapped in would be read as root), safe (strictmodes), not empty, at most `max_bytes`;
    read by host/careful_read.py, as every file whose bytes we must not be fooled by."""
    path = paths.real_path(root, node_path)
    observed.looked(path)  # the agent's drift probe's record (host/observed.py)
    try:
        # A secret's path itself, not followed; a public file (a CA) may be a link to one.
        st = os.stat(path, follow_symlinks=not private)
    except FileNotFoundError:
        problems.append(ConfigProblem(key, node_path, f"an existing file ({path} does not exist)"))
        return None
    except OSError as err:
        problems.append(ConfigProblem(key, node_path, f"a file aks-flex-node can read ({err.strerror})"))
        return None
    if stat.S_ISLNK(st.st_mode):
        problems.append(ConfigProblem(key, node_path, _not_a_link(private)))
        return None
    if not stat.S_ISREG(st.st_mode):
        problems.append(ConfigProblem(key, node_path, f"a regular file (it is {file_kind(st)})"))
        return None
    # Owned by root, nobody else may change it or its directories; a private one nobody
    # else may read.
    problems += strictmodes.problems(key, node_path, path, root, private=private)
    if st.st_size == 0:
        problems.append(ConfigProblem(key, node_path, "a file that is not empty"))
        return None
    if st.st_size > max_bytes:
        problems.append(ConfigProblem(key, node_path, f"{what} of at most {max_bytes} bytes "
                                                      f"(the file has {st.st_size})"))
        return None
    try:
        # Should it have become a FIFO or a link since the stat, the read neither waits nor follows.
        data = careful_read.read(str(path), max_bytes, follow=not private)
    except careful_read.Unsafe as unsafe:
        if unsafe.errno == errno.ELOOP:
            expected = _not_a_link(private)
        elif unsafe.errno is not None:
            expected = f"a file aks-flex-node can read ({os.strerror(unsafe.errno)})"
        elif unsafe.why.startswith("expected a regular file"):
            expected = "a regular file"
        else:  # grown since the stat
            expected = f"{what} of at most {max_bytes} bytes"
        problems.append(ConfigProblem(key, node_path, expected))
        return None
    return data
