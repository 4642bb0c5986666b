"""`aks-flex-node token`: the kubelet's exec credential plugin.

kubelet runs this (through its kubeconfig's `exec:` user) whenever its cached credential
expires. It prints one ExecCredential with a token for the AKS audience from the local
Arc HIMDS. It stays light on purpose: stdlib + configobj (without `validate`), no Azure
SDK, so a token refresh costs milliseconds, not the seconds an SDK import takes.

Errors go to stderr (kubelet logs them); the token goes to stdout only, once.
"""

import argparse
import datetime
import json
import os
import stat
import sys
import time

from aks_flex_node import paths
from aks_flex_node.azure import himds
from aks_flex_node.errors import ExitCode, FlexNodeError
from aks_flex_node.host import fs

# client-go compares the expiry with no skew margin (kubernetes/client-go,
# plugin/pkg/client/auth/exec/exec.go): announce the
# token as expiring 5 minutes early, and only reuse a cached one with more than that left.
EARLY_EXPIRY_SECONDS = 300
EXEC_API_GROUP = "client.authentication.k8s.io"
EXEC_API_VERSIONS = (f"{EXEC_API_GROUP}/v1", f"{EXEC_API_GROUP}/v1beta1")
DEFAULT_EXEC_API_VERSION = f"{EXEC_API_GROUP}/v1beta1"


class TokenCommandError(FlexNodeError):
    code = "token"


def read_settings(config_path, required):
    """The few keys this command needs: himds_endpoint, himds_key_dir.

    Keys are unique across sections (docs/design.md), so search every section. A missing
    default config file means defaults: the plugin must work on a node configured by
    hand. Types are checked here, without configobj's validate.
    """
    settings = {"himds_endpoint": himds.DEFAULT_ENDPOINT, "himds_key_dir": himds.DEFAULT_KEY_DIR}
    if not os.path.exists(config_path):
        if required:
            raise TokenCommandError(f"--config {config_path!r}: the file does not exist")
        return settings
    import configobj  # deferred: only needed when there is a file to read

    try:
        parsed = configobj.ConfigObj(config_path, encoding="utf-8", file_error=True, interpolation=False)
    except (configobj.ConfigObjError, OSError) as err:
        raise TokenCommandError(f"cannot read {config_path}: {err}") from None

    def find(section, key):
        if key in section.scalars:
            return section[key]
        for name in section.sections:
            found = find(section[name], key)
            if found is not None:
                return found
        return None

    for key in settings:
        value = find(parsed, key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise TokenCommandError(f"{key} = {value!r} in {config_path}: expected a single value")
        settings[key] = value
    if not settings["himds_key_dir"].startswith("/"):
        raise TokenCommandError(
            f"himds_key_dir = {settings['himds_key_dir']!r} in {config_path}: expected an absolute path"
        )
    return settings


def exec_api_version(environ):
    """The ExecCredential version kubelet asked for in KUBERNETES_EXEC_INFO
    (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins)."""
    raw = environ.get("KUBERNETES_EXEC_INFO", "")
    if not raw.strip():
        return DEFAULT_EXEC_API_VERSION
    try:
        info = json.loads(raw)
        version = info.get("apiVersion") if isinstance(info, dict) else None
    except ValueError:
        raise TokenCommandError("KUBERNETES_EXEC_INFO: expected a JSON ExecCredential object") from None
    if not version:
        return DEFAULT_EXEC_API_VERSION
    if version not in EXEC_API_VERSIONS:
        raise TokenCommandError(
            f"KUBERNETES_EXEC_INFO apiVersion = {version!r}: expected one of {', '.join(EXEC_API_VERSIONS)}"
        )
    return version


def rfc3339(epoch):
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exec_credential(token, api_version, now=None):
    now = int(time.time()) if now is None else now
    # Announce the expiry 5 min early; a token already that close to its end is announced
    # with its real expiry so kubelet does not treat it as expired on arrival.
    announced = token.expires_on - EARLY_EXPIRY_SECONDS
    if announced <= now:
        announced = token.expires_on
    return {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "status": {"token": token.access_token, "expirationTimestamp": rfc3339(announced)},
    }


class TokenCache:
    """One token in a 0600 JSON file in a root-only directory.

    A file we did not write (other owner, group/other-readable) is ignored, not trusted.
    """

    def __init__(self, path):
        self.path = path

    def load(self, resource, now):
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory or a device: not our cache
            os.close(fd)
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.geteuid() or info.st_mode & 0o077:
                return None
            try:
                entry = json.loads(handle.read(65536))
                token = himds.Token(str(entry["access_token"]), int(entry["expires_on"]))
            except (OSError, ValueError, KeyError, TypeError):  # not ours to use: fetch anew
                return None
        if entry.get("resource") != resource or token.expires_on - now <= EARLY_EXPIRY_SECONDS:
            return None
        return token

    def store(self, resource, token):
        directory = os.path.dirname(self.path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            # Someone else could swap the file under us: do without a cache.
            return False
        body = json.dumps({"resource": resource, "access_token": token.access_token,
                           "expires_on": token.expires_on}).encode()
        fs.write_file(self.path, body, 0o600)  # atomic; the temp file is 0600 from the start
        return True


def _parser():
    parser = argparse.ArgumentParser(
        prog="aks-flex-node token",
        description="Print a kubelet ExecCredential with a token from the local Azure Arc HIMDS.",
    )
    parser.add_argument("--root", help="root directory of the node's filesystem (default: $AKS_FLEX_NODE_ROOT or /)")
    parser.add_argument("--config", help=f"configuration file (default: {paths.CONFIG} under the root)")
    return parser


def get_token(root, config_path=None, now=None):
    """The token to hand out: the cached one while it lasts, else a new one from HIMDS.
    The configuration is read only for a new token: a cache hit costs no configobj import."""
    now = int(time.time()) if now is None else now
    node = paths.Paths(root)
    cache = TokenCache(str(node.real(paths.TOKEN_CACHE)))
    token = cache.load(himds.AKS_RESOURCE, now)
    if token is None:
        settings = read_settings(config_path or str(node.real(paths.CONFIG)),
                                 required=config_path is not None)
        token = himds.get_token(
            settings["himds_endpoint"],
            himds.AKS_RESOURCE,
            settings["himds_key_dir"],
            root=root,
        )
        try:
            cache.store(himds.AKS_RESOURCE, token)
        except (OSError, FlexNodeError) as err:
            # A read-only or full disk must not stop the kubelet from getting its token: the
            # cache only saves a HIMDS round trip (host.fs reports a failed write as HostFileError).
            why = getattr(err, "message", None) or err.strerror or str(err)
            print(f"aks-flex-node token: warning: cannot cache the token in {cache.path}: {why}", file=sys.stderr)
    return token


def main(argv=None, environ=None, stdout=None, stderr=None):
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = _parser().parse_args(argv)
    root = args.root or environ.get("AKS_FLEX_NODE_ROOT") or "/"
    try:
        api_version = exec_api_version(environ)
        token = get_token(root, args.config)
    except FlexNodeError as err:
        print(f"aks-flex-node token: {err.message}", file=stderr)
        if err.remedy:
            print(f"aks-flex-node token: {err.remedy}", file=stderr)
        # 75 tells an operator running it by hand "try again"; kubelet only sees non-zero.
        return int(ExitCode.TEMPFAIL if err.exit_code == ExitCode.TEMPFAIL else ExitCode.FAILED)
    stdout.write(json.dumps(exec_credential(token, api_version)) + "\n")
    stdout.flush()
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
