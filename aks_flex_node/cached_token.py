"""`aks-flex-node token` answered from its cache, and what token.py shares with that answer:
the cache's format and place (paths.TOKEN_CACHE under the root), the audience, the expiry
margin, the ExecCredential and the versions of it the kubelet may ask for.

The kubelet runs `aks-flex-node token` on every credential refresh and almost always meets
the cache, so cli.main calls answer() before it imports anything else. A hit loads nothing
beyond the standard library's json, os and time (and what they load themselves: json loads
re) and small modules of ours that load nothing more: this one, paths, access_token and
host/careful_read. Anything answer() does not handle exactly as token.py would (a miss, an
entry expired, for another audience or not read safely, a flag other than --root/--config,
a KUBERNETES_EXEC_INFO it refuses) returns None, and cli.main runs token.py, which answers
as it always has: it reads the same cache with read() below, mints on a miss and names
every refusal.
"""

import json
import os
import time

from aks_flex_node import access_token, paths
from aks_flex_node.host import careful_read

# The audience of the tokens we hand out and cache: the AKS AAD server application
# (azure/himds.py AKS_RESOURCE; spelled here so that a cache hit does not import the HIMDS
# client, and tests/unit/test_cached_token.py checks the two agree).
AKS_RESOURCE = "6dae42f8-4368-4678-94ff-3960e28e3630"
# client-go compares the expiry with no skew margin (kubernetes/client-go,
# plugin/pkg/client/auth/exec/exec.go): announce the token as expiring 5 minutes early, and
# only reuse a cached one with more than that left.
EARLY_EXPIRY_SECONDS = 300
EXEC_API_GROUP = "client.authentication.k8s.io"
EXEC_API_VERSIONS = (f"{EXEC_API_GROUP}/v1", f"{EXEC_API_GROUP}/v1beta1")
DEFAULT_EXEC_API_VERSION = f"{EXEC_API_GROUP}/v1beta1"
# The most of the cache file read: a token of access_token.MAX_TOKEN_CHARS and its two
# other fields fit with room.
MAX_BYTES = 65536
ROOT_FLAG, CONFIG_FLAG = "--root", "--config"
# The root when no --root is given (commands/arguments.py ROOT_ENV, spelled here so that a
# hit does not import argparse; the test checks they agree).
ROOT_ENV = "AKS_FLEX_NODE_ROOT"


class BadExecInfo(ValueError):
    """KUBERNETES_EXEC_INFO is not what client-go sends (the message says what it is and
    what was expected): token.py reports it, answer() leaves it to token.py."""


class CachedToken:
    """A token read back from the cache: what exec_credential reads of himds.Token."""

    __slots__ = ("access_token", "expires_on")

    def __init__(self, access_token, expires_on):
        self.access_token, self.expires_on = access_token, expires_on


def cache_path(root):
    """Where the cache is under `root`: paths.Paths(root).real(paths.TOKEN_CACHE) as a str,
    joined here with os.path because paths.real_path builds a pathlib.Path (and pathlib
    imports urllib.parse, fnmatch and more); the test checks the two agree."""
    return os.path.join(os.path.abspath(os.fspath(root or "/")), paths.TOKEN_CACHE.lstrip("/"))


def entry(resource, token):
    """The cache file's bytes for `token` (a himds.Token) of `resource`."""
    return json.dumps({"resource": resource, "access_token": token.access_token,
                       "expires_on": token.expires_on}).encode()


def read(path, resource, now):
    """The cached token for `resource` with more than EARLY_EXPIRY_SECONDS left at `now`, or
    None: a file we did not write (another owner, group or other bits, a link, not a
    regular file, larger than MAX_BYTES) is not trusted, and an entry that is not what
    entry() writes (checked as HIMDS's answer is: access_token.py) is a miss."""
    try:
        raw = careful_read.read(path, MAX_BYTES, private=True, owners=(os.geteuid(),))
    except (careful_read.Unsafe, OSError):  # absent, unsafe, or unreadable (EIO): fetch anew
        return None
    try:
        cached = json.loads(raw)
        token = CachedToken(access_token.access_token(cached["access_token"]),
                            access_token.expiry(access_token.seconds(cached["expires_on"], "expires_on"), now))
    # BadTokenField is a ValueError; json.loads raises RecursionError on deep nesting.
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if cached.get("resource") != resource or token.expires_on - now <= EARLY_EXPIRY_SECONDS:
        return None
    return token


def requested_version(environ):
    """The ExecCredential version the kubelet asked for in KUBERNETES_EXEC_INFO, else
    BadExecInfo.

    client-go sets it to an ExecCredential object with its apiVersion and kind
    (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#input-and-output-formats;
    kubernetes/client-go plugin/pkg/client/auth/exec/exec.go). Anything else means the
    caller is not speaking that protocol: refused, not guessed. Unset (or empty), as from
    a caller older than the variable or a person at a shell, means the default version.
    """
    raw = environ.get("KUBERNETES_EXEC_INFO", "")
    if not raw.strip():
        return DEFAULT_EXEC_API_VERSION
    expected = (f"expected a JSON ExecCredential object such as "
                f'{{"apiVersion": "{EXEC_API_VERSIONS[0]}", "kind": "ExecCredential"}}')
    try:
        info = json.loads(raw)
    except RecursionError:
        raise BadExecInfo(f"KUBERNETES_EXEC_INFO is not JSON (nested too deep): {expected}") from None
    except ValueError as err:
        raise BadExecInfo(f"KUBERNETES_EXEC_INFO is not JSON ({err}): {expected}") from None
    if not isinstance(info, dict):
        raise BadExecInfo(f"KUBERNETES_EXEC_INFO = {raw.strip()[:80]!r}: {expected}")
    version, kind = info.get("apiVersion"), info.get("kind")
    if version not in EXEC_API_VERSIONS:
        raise BadExecInfo(
            f"KUBERNETES_EXEC_INFO apiVersion = {access_token.shown(version)}: expected one of "
            f"{', '.join(EXEC_API_VERSIONS)}")
    if kind != "ExecCredential":
        raise BadExecInfo(f"KUBERNETES_EXEC_INFO kind = {access_token.shown(kind)}: expected 'ExecCredential'")
    return version


def rfc3339(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def exec_credential(token, api_version, now=None):
    """The ExecCredential (a dict) that hands `token` to the kubelet."""
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


def _root(args, environ):
    """The root `args` (the command's words after `token`) name, as token.py's parser reads
    them, or None for anything else: only --root and --config, each at most once, as
    `--flag VALUE` or `--flag=VALUE` with a value that is neither empty nor option-like.
    --config is read only to mint, so a hit does not look at it (nor does token.py's)."""
    given, words = {}, iter(args)
    for word in words:
        flag, equals, value = word.partition("=")
        if flag not in (ROOT_FLAG, CONFIG_FLAG) or flag in given:
            return None
        if not equals:
            value = next(words, "")
        if not value or value.startswith("-"):
            return None
        given[flag] = value
    return given.get(ROOT_FLAG) or environ.get(ROOT_ENV) or "/"


def answer(args, environ, stdout):
    """Print the ExecCredential from the cache and return the exit code 0, or return None
    having printed nothing (token.py then answers). `args`: the words after `token`."""
    root = _root(args, environ)
    if root is None:
        return None
    try:
        api_version = requested_version(environ)
    except BadExecInfo:
        return None
    now = int(time.time())
    token = read(cache_path(root), AKS_RESOURCE, now)
    if token is None:
        return None
    stdout.write(json.dumps(exec_credential(token, api_version, now)) + "\n")
    stdout.flush()
    return 0
