"""`aks-flex-node token`: the kubelet's exec credential plugin.

kubelet runs this (through its kubeconfig's `exec:` user) whenever its cached credential
expires. It prints one ExecCredential with a token for the AKS audience from the local
Arc HIMDS. It stays light on purpose: stdlib + configobj (without `validate`), no Azure
SDK, so a token refresh costs milliseconds, not the seconds an SDK import takes.

Errors go to stderr (kubelet logs them); the token goes to stdout only, once.

A cache hit is what the kubelet meets almost every time: cli.main answers it with
cached_token.py before this module is imported, loading nothing beyond json, os and time.
This module is the rest: a miss, a flag, a refusal to name. It reads the same cache the same
way (cached_token.read), so a hit here prints what the cached answer would. The HIMDS client
(urllib.request, ssl), configobj, the StrictModes check and the atomic writer come in only
when a new token is needed (`python3 -X importtime -m aks_flex_node token` shows it).
"""

import argparse
import json
import os
import stat
import sys
import time

from aks_flex_node import cached_token, output, paths
from aks_flex_node.cached_token import AKS_RESOURCE, exec_credential
from aks_flex_node.errors import ExitCode, FlexNodeError

# The kubelet waits for this command on a token refresh: HIMDS retries (429, 5xx, no
# answer; azure/himds.py) stop after this many seconds, so the worst case stays near 20 s
# (a request under way at the deadline may add up to himds.MIN_REQUEST_TIME).
HIMDS_BUDGET = 20.0


class TokenCommandError(FlexNodeError):
    code = "token"


def read_settings(config_path, required, root="/"):
    """The few keys this command needs: himds_endpoint, himds_key_dir.

    Keys are unique across sections (docs/design.md), so search every section. A missing
    default config file means defaults: the plugin must work on a node configured by
    hand. Types are checked here, without configobj's validate. The file is read only if
    nobody but root can change it (StrictModes, as every other command reads it): it
    names where the HIMDS challenge key is sent and read from.
    """
    from aks_flex_node import strictmodes
    from aks_flex_node.azure import himds

    settings = {"himds_endpoint": himds.DEFAULT_ENDPOINT, "himds_key_dir": himds.DEFAULT_KEY_DIR}
    if not os.path.exists(config_path):
        if required:
            raise TokenCommandError(f"--config {config_path!r}: the file does not exist")
        return settings
    unsafe = strictmodes.problems("config file", str(config_path), config_path, root)
    if unsafe:
        # It says where the HIMDS challenge key is sent: whoever can change it gets a token.
        raise TokenCommandError(f"config file {config_path}: expected " + "; ".join(p.expected for p in unsafe))
    parsed = _parse(config_path)

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
    _check_loopback(settings["himds_endpoint"], config_path)
    return settings


def _file_kind(mode):
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _parse(config_path):
    """The file parsed by configobj, or a TokenCommandError naming the file.

    stat() before opening, as aks_flex_node/config/fileformat.py not_regular() does:
    opening a FIFO waits for a writer, and the kubelet would wait with us. The open is
    non-blocking and the descriptor is checked again, in case the file was swapped.
    """
    import configobj  # deferred: only needed when there is a file to read

    try:
        if not stat.S_ISREG(os.stat(config_path).st_mode):
            raise TokenCommandError(f"cannot read {config_path}: expected a regular file, "
                                    f"it is {_file_kind(os.stat(config_path).st_mode)}")
        fd = os.open(config_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise TokenCommandError(f"cannot read {config_path}: expected a regular file, "
                                        f"it is {_file_kind(mode)}")
            data = handle.read()
    except OSError as err:
        raise TokenCommandError(f"cannot read {config_path}: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8-sig")  # configobj's encoding="utf-8" also drops a BOM
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TokenCommandError(
            f"cannot read {config_path}: expected UTF-8 text (line {line} has the byte "
            f"0x{data[err.start]:02x}, which UTF-8 does not allow there)",
            remedy="rewrite the file in UTF-8, for example with `iconv -t UTF-8`",
        ) from None
    try:
        return configobj.ConfigObj(text.splitlines(), interpolation=False)
    except configobj.ConfigObjError as err:
        first = (getattr(err, "errors", None) or [err])[0]
        if not hasattr(first, "line_number"):
            raise TokenCommandError(f"cannot read {config_path}: {first}") from None
        # The same words as aks_flex_node/config/fileformat.py parse_problem().
        expected = {"DuplicateError": "each key and section once",
                    "NestingError": "sections without nesting: [section] only"}.get(
            type(first).__name__, "key = value, a [section] line, or a # comment line")
        raise TokenCommandError(
            f"{config_path} line {first.line_number} = {first.line.strip()!r}: expected {expected}"
        ) from None


def _check_loopback(endpoint, config_path):
    """himds_endpoint must be on this machine: the challenge key read from the key
    directory travels back to it in clear (azure/himds.py token_url says the same, without
    the file's name)."""
    import urllib.parse

    from aks_flex_node.azure import himds
    from aks_flex_node.http_policy import is_loopback

    try:
        parts = urllib.parse.urlsplit(endpoint)
        host = parts.hostname
    except ValueError:
        host, parts = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise TokenCommandError(
            f"himds_endpoint = {endpoint!r} in {config_path}: expected an http:// URL such as {himds.DEFAULT_ENDPOINT}"
        )
    if not is_loopback(host):
        raise TokenCommandError(
            f"himds_endpoint = {endpoint!r} in {config_path}: expected a URL on this machine (127.0.0.1, ::1 "
            f"or localhost) such as {himds.DEFAULT_ENDPOINT}: the HIMDS challenge key must not leave it"
        )


def exec_api_version(environ):
    """The ExecCredential version kubelet asked for in KUBERNETES_EXEC_INFO
    (cached_token.requested_version), or a TokenCommandError saying why it cannot be used."""
    try:
        return cached_token.requested_version(environ)
    except cached_token.BadExecInfo as err:
        raise TokenCommandError(str(err)) from None


class TokenCache:
    """One token in a 0600 JSON file in a root-only directory.

    A file we did not write (other owner, group/other-readable) is ignored, not trusted.
    """

    def __init__(self, path, lock_path=None):
        self.path = path
        self.lock_path = lock_path or path + ".lock"

    def load(self, resource, now):
        """The cached token, or None: cached_token.read, the cached answer's own reader."""
        return cached_token.read(self.path, resource, now)

    def _private_dir(self):
        """The cache's directory, created 0700; False when someone else could swap files in it."""
        directory = os.path.dirname(self.path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        return info.st_uid == os.geteuid() and not info.st_mode & 0o022

    def store(self, resource, token):
        from aks_flex_node.host import fs

        if not self._private_dir():
            # Someone else could swap the file under us: do without a cache.
            return False
        fs.write_file(self.path, cached_token.entry(resource, token), 0o600)  # atomic; the temp file is 0600 from the start
        return True

    def single_flight(self, wait):
        """The minting lock (a descriptor to give to `done`), or None to mint without it.

        Many cold calls at once (a node's kubelet and the tools that share its kubeconfig,
        right after a boot) would each ask HIMDS for a token: the first takes an flock on
        `paths.TOKEN_LOCK` and mints, the others wait for it and then read the cache it wrote.
        A lock we cannot use (a link or a FIFO planted there, a directory others can
        write), or one still held after `wait` seconds, costs only the single flight."""
        from aks_flex_node.host import lock_file

        try:
            if not self._private_dir():
                return None
            fd = lock_file.open_private(self.lock_path)
        except (OSError, lock_file.Unsafe):
            return None
        if lock_file.hold(fd, wait):
            return fd
        lock_file.release(fd)
        return None

    @staticmethod
    def done(lock):
        if lock is not None:
            from aks_flex_node.host import lock_file

            lock_file.release(lock)


def _parser():
    parser = argparse.ArgumentParser(
        prog="aks-flex-node token",
        description="Print a kubelet ExecCredential with a token from the local Azure Arc HIMDS.",
    )
    parser.add_argument("--root", help="root directory of the node's filesystem (default: $AKS_FLEX_NODE_ROOT or /)")
    parser.add_argument("--config", help=f"configuration file (default: {paths.CONFIG} under the root)")
    return parser


def get_token(root, config_path=None, now=None):
    """The token to hand out: the cached one while it lasts, else a new one from HIMDS, minted
    once however many calls miss the cache together (TokenCache.single_flight).
    The configuration is read only for a new token: a cache hit costs no configobj import."""
    clock_now = (lambda: int(time.time())) if now is None else (lambda: now)
    node = paths.Paths(root)
    cache = TokenCache(str(node.real(paths.TOKEN_CACHE)), str(node.real(paths.TOKEN_LOCK)))
    token = cache.load(AKS_RESOURCE, clock_now())
    if token is not None:
        return token
    # Read before the lock is made: a bad configuration is refused with nothing written.
    settings = read_settings(config_path or str(node.real(paths.CONFIG)),
                             required=config_path is not None, root=root)
    # A minting call ends by HIMDS_BUDGET (plus one request's time): wait a little longer.
    lock = cache.single_flight(wait=HIMDS_BUDGET + 15)
    try:
        token = cache.load(AKS_RESOURCE, clock_now())  # the holder we waited for wrote it
        if token is None:
            token = _mint(cache, root, settings)
    finally:
        cache.done(lock)
    return token


def _mint(cache, root, settings):
    from aks_flex_node.azure import himds

    token = himds.get_token(
        settings["himds_endpoint"],
        AKS_RESOURCE,
        settings["himds_key_dir"],
        root=root,
        budget=HIMDS_BUDGET,
    )
    try:
        cache.store(AKS_RESOURCE, token)
    except (OSError, FlexNodeError) as err:
        # A read-only or full disk must not stop the kubelet from getting its token: the
        # cache only saves a HIMDS round trip (host.fs reports a failed write as HostFileError).
        why = getattr(err, "message", None) or err.strerror or str(err)
        print(f"aks-flex-node token: warning: cannot cache the token in {output.shown(cache.path)}: {output.shown(why)}", file=sys.stderr)
    return token


def main(argv=None, environ=None, stdout=None, stderr=None):
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = _parser().parse_args(argv)
    root = args.root or environ.get(cached_token.ROOT_ENV) or "/"
    try:
        api_version = exec_api_version(environ)
        token = get_token(root, args.config)
    except FlexNodeError as err:
        # The kubelet logs this; a control character from HIMDS's answer is shown escaped.
        print(f"aks-flex-node token: {output.shown(err.message)}", file=stderr)
        if err.remedy:
            print(f"aks-flex-node token: {output.shown(err.remedy)}", file=stderr)
        # 75 tells an operator running it by hand "try again"; kubelet only sees non-zero.
        return int(ExitCode.TEMPFAIL if err.exit_code == ExitCode.TEMPFAIL else ExitCode.FAILED)
    stdout.write(json.dumps(exec_credential(token, api_version)) + "\n")
    stdout.flush()
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
