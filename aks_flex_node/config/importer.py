"""`aks-flex-node config import`: the upstream agent's config.json into our configuration
file and what it holds apart into files of their own: the service principal's secret, a
bootstrap token (both 0600) and the cluster's CA (0644); all or none.

Everything is checked before anything is written: the flags (where the files go), the
config.json (readable UTF-8 JSON, convertible), and the very text the configuration file
would hold, with load()'s checks. Then the files it names are written, then the
configuration (so it never names a file that is not there), each atomically, owned by the
user running the import; the result is loaded again as bootstrap will read it. If a write
or that last load fails, every file is put back as it was.

The token and the CA go next to the secret file (--secret-file's directory, by default
/etc/aks-flex-node): bootstrap-token and cluster-ca.crt.
"""

import dataclasses
import os

from aks_flex_node import paths
from aks_flex_node.config import upstream as upstream_config
from aks_flex_node import strictmodes
from aks_flex_node.config.fileformat import locate
from aks_flex_node.config.loader import check_text, load
from aks_flex_node.config.writer import render
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.host import Host, fs

SECRET_KEY = "sp_client_secret_file"
# What config.json may hold apart: upstream_config's secret -> (key naming its file, file
# name next to the secret file (None: the --secret-file path), mode, what it is).
APART = {
    "sp_client_secret": (SECRET_KEY, None, 0o600, "azure.servicePrincipal.clientSecret"),
    "bootstrap_token": ("bootstrap_token_file", "bootstrap-token", 0o600, "azure.bootstrapToken.token"),
    # A CA certificate is public: 0644, as kubeadm's /etc/kubernetes/pki/ca.crt.
    "cluster_ca": ("cluster_ca_file", "cluster-ca.crt", 0o644, "node.kubelet.caCertData"),
}


@dataclasses.dataclass
class Imported:
    config_file: str  # where it is on this filesystem
    secret_file: str | None  # the node path written, None when config.json had no secret
    warnings: list
    files: dict = dataclasses.field(default_factory=dict)  # key -> node path of every file written but the config


def import_upstream(source, output=None, secret_file=None, root="/", warn=None):
    """Convert config.json `source` (a path on this filesystem) into the configuration file
    `output` (as for load(); default paths.CONFIG) and its secret into node path
    `secret_file` (default paths.SECRET). Each conversion warning goes to `warn` as soon as
    it is known, even when a later check fails. Raises ConfigError, having written nothing."""
    target, secret_path = _targets(output, secret_file, root)
    values, secrets, warnings = upstream_config.load_file(source)
    for warning in warnings:
        if warn:
            warn(warning)
    files = {}  # key -> (node path, content, mode)
    for name, (key, file_name, mode, origin) in APART.items():
        content = secrets.get(name)
        if not content:
            continue
        if name != "cluster_ca" and any(ch in content for ch in "\r\n\0"):
            raise ConfigError([ConfigProblem(origin, upstream_config.REDACTED, "a secret on one line")],
                              source=str(source))
        node_path = secret_path if file_name is None else os.path.join(os.path.dirname(secret_path), file_name)
        data = content.encode("utf-8")
        files[key] = (node_path, data if data.endswith(b"\n") else data + b"\n", mode)
        values[key] = node_path
    _check_places(files, target, root, source)
    _, text = render(output, values, root)
    check_text(text, output, root, written=set(files))

    host = Host(root)
    kept = {target: _snapshot(target)}
    for node_path, _, _ in files.values():
        kept[host.path(node_path)] = _snapshot(host.path(node_path))
    mine = (os.geteuid(), os.getegid())
    try:
        for node_path, data, mode in files.values():
            host.write_file(node_path, data, mode, owner=mine)
        fs.write_file(str(target), text.encode("utf-8"), 0o600, owner=mine)
        load(output, root=root)  # as bootstrap will read it
    except BaseException:
        for path, before in kept.items():
            _restore(path, before)
        raise
    return Imported(str(target), files[SECRET_KEY][0] if SECRET_KEY in files else None, warnings,
                    files={key: node_path for key, (node_path, _, _) in files.items()})


def _targets(output, secret_file, root):
    """(the configuration file, the secret's node path), or a ConfigError naming the flag."""
    problems = []
    key = "--output" if output else "config file"
    try:
        target = locate(output, root)
    except ValueError as err:
        raise ConfigError([ConfigProblem("--output", output, f"a path for the configuration file ({err})")]) from None
    if target.is_dir():
        problems.append(ConfigProblem(key, str(target), "a file, not a directory"))
    elif output and not target.parent.is_dir():
        problems.append(ConfigProblem(key, output, f"a file in an existing directory ({target.parent} is not one)"))
    problems += strictmodes.directory_problems(key, str(target), target.parent, root)

    secret_path = secret_file or paths.SECRET
    flag = "--secret-file"
    expected = f"an absolute path on the node, such as {paths.SECRET}"
    if not secret_path.startswith("/"):
        problems.append(ConfigProblem(flag, secret_path, expected))
        raise ConfigError(problems)
    try:
        real_secret = paths.real_path(root, os.path.normpath(secret_path))
    except ValueError as err:
        problems.append(ConfigProblem(flag, secret_path, f"{expected} ({err})"))
        raise ConfigError(problems) from None
    if os.path.abspath(real_secret) == os.path.abspath(target):
        problems.append(ConfigProblem(flag, secret_path, "another file than the configuration file"))
    elif real_secret.is_dir():
        problems.append(ConfigProblem(flag, secret_path, "a file, not a directory"))
    elif secret_file and not real_secret.parent.is_dir():
        problems.append(ConfigProblem(flag, secret_path, f"a file in an existing directory "
                                                         f"({real_secret.parent} is not one)"))
    problems += strictmodes.directory_problems(flag, secret_path, real_secret.parent, root)
    if problems:
        raise ConfigError(problems)
    return target, os.path.normpath(secret_path)


def _check_places(files, target, root, source):
    """The token's and the CA's files (next to the secret's) are files of their own."""
    problems, seen = [], {os.path.abspath(target): "the configuration file"}
    for key, (node_path, _, _) in files.items():
        real = os.path.abspath(paths.real_path(root, node_path))
        if real in seen:
            problems.append(ConfigProblem(key, node_path, f"another file than {seen[real]}: choose another "
                                                          "--secret-file (the token and the CA go next to it)"))
        elif os.path.isdir(real):
            problems.append(ConfigProblem(key, node_path, "a file, not a directory"))
        seen[real] = key
    if problems:
        raise ConfigError(problems, source=str(source))


def _snapshot(path):
    """(content, mode, (uid, gid)) of the file at `path`, None when there is none."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            return f.read(), st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except FileNotFoundError:
        return None


def _restore(path, before):
    if before is None:
        fs.remove(str(path))
    else:
        content, mode, owner = before
        fs.write_file(str(path), content, mode, owner)
