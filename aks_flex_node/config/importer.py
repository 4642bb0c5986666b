"""`aks-flex-node config import`: the upstream agent's config.json into our configuration
file and the service principal's secret into its own file, both or neither.

Everything is checked before anything is written: the flags (where the files go), the
config.json (readable UTF-8 JSON, convertible), and the very text the configuration file
would hold, with load()'s checks. Then the secret is written, then the configuration
(so it never names a secret file that is not there), each atomically, mode 0600, owned by
the user running the import; the result is loaded again as bootstrap will read it. If a
write or that last load fails, both files are put back as they were.
"""

import dataclasses
import os

from aks_flex_node import paths, upstream_config
from aks_flex_node import strictmodes
from aks_flex_node.config.fileformat import locate
from aks_flex_node.config.loader import check_text, load
from aks_flex_node.config.writer import render
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.host import Host, fs

SECRET_KEY = "sp_client_secret_file"


@dataclasses.dataclass
class Imported:
    config_file: str  # where it is on this filesystem
    secret_file: str | None  # the node path written, None when config.json had no secret
    warnings: list


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
    secret = secrets.get("sp_client_secret")
    if secret:
        if any(ch in secret for ch in "\r\n\0"):
            raise ConfigError([ConfigProblem("azure.servicePrincipal.clientSecret", upstream_config.REDACTED,
                                             "a secret on one line")], source=str(source))
        values[SECRET_KEY] = secret_path
    _, text = render(output, values, root)
    check_text(text, output, root, written={SECRET_KEY} if secret else ())

    host = Host(root)
    kept = {target: _snapshot(target)}
    if secret:
        kept[host.path(secret_path)] = _snapshot(host.path(secret_path))
    mine = (os.geteuid(), os.getegid())
    try:
        if secret:
            host.write_file(secret_path, secret.encode("utf-8") + b"\n", 0o600, owner=mine)
        fs.write_file(str(target), text.encode("utf-8"), 0o600, owner=mine)
        load(output, root=root)  # as bootstrap will read it
    except BaseException:
        for path, before in kept.items():
            _restore(path, before)
        raise
    return Imported(str(target), secret_path if secret else None, warnings)


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
