"""A token from the Azure Arc HIMDS (Hybrid Instance Metadata Service), stdlib only.

This runs on every kubelet token refresh (through `aks-flex-node token`), so it imports
nothing heavy. The protocol ("Authenticate against Azure resources with Azure Arc-enabled
servers", https://learn.microsoft.com/azure/azure-arc/servers/managed-identity-authentication):

1. GET {endpoint}?api-version=...&resource=... with `Metadata: true` -> 401 with
   `WWW-Authenticate: Basic realm=<path of a .key file>`;
2. read that file (only if it is a regular file of at most 4096 bytes directly inside
   the agent's key directory, `/var/opt/azcmagent/tokens` on Linux);
3. the same GET again with `Authorization: Basic <raw file contents>` -> 200 with IMDS JSON.

We implement it ourselves instead of using azure-identity/MSAL because MSAL hard-codes
the key directory (msal/managed_identity.py, _obtain_token_on_arc) and imports far too
much for a plugin that kubelet runs every hour.

Retries follow the Retry guidance of "How to use managed identities for Azure resources on
an Azure VM to acquire an access token" (learn.microsoft.com, how-to-use-vm-token): IMDS,
whose protocol HIMDS speaks, is retried on 429 and 5xx with exponential backoff. We also
retry an answer that never came (connection dropped, refused or timed out: himdsd may be
starting, e.g. right after `azcmagent connect`). Every wait honours Retry-After up to
MAX_WAIT, and the whole exchange, retries included, ends by a deadline (`budget`): the
kubelet waits for `aks-flex-node token`.
"""

import email.utils
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from aks_flex_node import access_token
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.host import careful_read, observed
from aks_flex_node.http_policy import is_loopback
from aks_flex_node.paths import Paths

# The Learn page above documents localhost:40342; we say 127.0.0.1 (as the config default
# does) so that no /etc/hosts entry and no resolver sits between the kubelet and its token.
DEFAULT_ENDPOINT = "http://127.0.0.1:40342/metadata/identity/oauth2/token"
DEFAULT_KEY_DIR = "/var/opt/azcmagent/tokens"  # on Linux (the Learn page above)
# MSAL 1.39 sends 2020-06-01; the Learn page's bash sample and msal-node send 2019-11-01:
# HIMDS accepts both.
API_VERSION = "2020-06-01"
# The AKS AAD server application: the audience of tokens the apiserver accepts
# ("the same in all environments": Azure/kubelogin, docs/book/src/concepts/aks.md).
AKS_RESOURCE = "6dae42f8-4368-4678-94ff-3960e28e3630"
MAX_KEY_BYTES = 4096  # as MSAL and azure-identity's _validate_key_file check
KEY_SUFFIX = ".key"

# Retries (see the module docstring). An exchange is a challenge and a token request; a
# failed token request is retried from a new challenge, since a key may be single-use and
# HIMDS may have spent it before failing.
ATTEMPTS = 4  # exchanges: the first and three retries
BACKOFF = 1.0  # seconds before the first retry, doubled for each next one
MAX_WAIT = 10.0  # the longest wait we honour a Retry-After for
DEFAULT_BUDGET = 60.0  # seconds for one get_token, retries and waits included
MIN_REQUEST_TIME = 1.0  # a retry with less time than this left is not worth starting

CHALLENGE = "the challenge request"
TOKEN_REQUEST = "the token request"


def _retryable(status):
    return status == 429 or 500 <= status <= 599


class HimdsError(FlexNodeError):
    """HIMDS answered, but not with a token we can use."""

    code = "himds"


class HimdsUnavailable(TemporaryError, HimdsError):
    """Nothing answers at the HIMDS endpoint: try again once the agent runs (exit 75)."""

    code = "himds_unavailable"


class HimdsBusy(TemporaryError, HimdsError):
    """HIMDS kept answering 429 or 5xx through every retry: try again later (exit 75)."""

    code = "himds_busy"


@dataclass(frozen=True)
class Token:
    access_token: str
    expires_on: int  # seconds since the epoch

    def __repr__(self):
        # The token must never end up in a log through a stray repr().
        return f"Token(access_token=<{len(self.access_token)} chars>, expires_on={self.expires_on})"

    __str__ = __repr__


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: the second request carries the key, it must not go elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise HimdsError(
            f"HIMDS at {req.full_url.split('?')[0]} redirected to {newurl.split('?')[0]}",
            remedy="check himds_endpoint in the configuration: it must name the local HIMDS",
            code="himds-redirect",
        )


def _opener(url):
    # HIMDS is local (token_url refuses anything else): no proxy may capture it, whatever
    # the environment says.
    return urllib.request.build_opener(_NoRedirect(), urllib.request.ProxyHandler({}))


def token_url(endpoint, resource, api_version=API_VERSION, client_id=None):
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HimdsError(
            f"himds_endpoint = {endpoint!r}: expected an http:// URL such as {DEFAULT_ENDPOINT}"
        )
    if not is_loopback(parts.hostname):
        # The challenge key read from the key directory travels back in clear over http: it
        # must never leave this machine (and only the local HIMDS wrote it).
        raise HimdsError(
            f"himds_endpoint = {endpoint!r}: expected a URL on this machine (127.0.0.1, ::1 or "
            f"localhost) such as {DEFAULT_ENDPOINT}: the HIMDS challenge key must not leave it"
        )
    query = urllib.parse.parse_qsl(parts.query)
    query += [("api-version", api_version), ("resource", resource)]
    if client_id:
        query.append(("client_id", client_id))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _request(opener, url, headers, timeout):
    """Return (status, headers, body) for any HTTP answer; raise for no answer at all."""
    request = urllib.request.Request(url, headers=headers, method="GET")
    where = url.split("?")[0]
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers, err.read()
    except urllib.error.URLError as err:
        raise HimdsUnavailable(
            f"cannot reach HIMDS at {where}: {err.reason}",
            remedy="is the Azure Connected Machine agent (himdsd) running? "
            "Check `systemctl status himdsd` and `azcmagent show`",
        ) from None
    except (TimeoutError, ConnectionError) as err:
        raise HimdsUnavailable(
            f"HIMDS at {where} did not answer: {err}",
            remedy="is the Azure Connected Machine agent (himdsd) running? "
            "Check `systemctl status himdsd` and `azcmagent show`",
        ) from None


def _realm_path(www_authenticate):
    """`Basic realm=/var/opt/azcmagent/tokens/<id>.key` -> the path."""
    scheme_and_realm, sep, value = (www_authenticate or "").partition("=")
    if not sep or scheme_and_realm.strip().lower() != "basic realm":
        raise HimdsError(
            f"HIMDS challenge header WWW-Authenticate = {www_authenticate!r}: "
            "expected 'Basic realm=<path of a .key file>'",
            code="bad-challenge",
        )
    return value.strip().strip('"')


def _real(path, root):
    """Node path -> path on this machine (unchanged when it already lies below root);
    None for one that is no node path (relative, or with '..')."""
    node = Paths(root)
    if node.is_live or path == str(node.root) or path.startswith(f"{node.root}{os.sep}"):
        return path
    try:
        return str(node.real(path))
    except ValueError:
        return None


def resolve_key_dir(key_dir, root=None):
    """The agent key directory on this machine: the node path under `root` when it
    exists there (or when neither exists, for the error message), else as given (a test
    HIMDS keeping its keys outside the root)."""
    joined = _real(key_dir, root)
    if joined is None:
        raise HimdsError(f"himds_key_dir = {key_dir!r}: expected an absolute path without '..'")
    if joined == key_dir or os.path.isdir(joined) or not os.path.isdir(key_dir):
        return joined
    return key_dir


def read_challenge_key(realm, key_dir, root=None):
    """Read the key HIMDS points at, refusing anything but a small file in key_dir.

    The realm comes from whatever answered on the HIMDS port; without these checks a
    rogue local listener could make us (root) send it the contents of any file.
    `key_dir` and the realm are node paths: with `root` they are looked up below it.
    """
    real_dir = os.path.realpath(resolve_key_dir(key_dir, root))
    # The realm as named, or below the root: whichever really is in the key directory.
    candidates = [os.path.realpath(p) for p in dict.fromkeys((realm, _real(realm, root))) if p is not None]
    inside = [p for p in candidates if os.path.dirname(p) == real_dir]
    if not inside:
        raise HimdsError(
            f"HIMDS challenge key {realm!r} resolves to {candidates[-1]!r}: "
            f"expected a file directly inside the agent key directory {real_dir!r}",
            code="key-outside-key-dir",
        )
    real = inside[0]
    if not real.endswith(KEY_SUFFIX):
        raise HimdsError(f"HIMDS challenge key {realm!r}: expected a file name ending in {KEY_SUFFIX!r}",
                         code="key-not-a-key-file")
    try:
        # Not followed on the resolved path: a symlink swapped in after realpath() fails here.
        data = careful_read.read(real, MAX_KEY_BYTES)
    except careful_read.Unsafe as unsafe:
        if unsafe.errno is not None:
            raise HimdsError(f"cannot read HIMDS challenge key {real!r}: {unsafe.why}",
                             remedy="run as root or as a member of the himds group",
                             code=f"key-{unsafe.code}") from None
        raise HimdsError(f"HIMDS challenge key {real!r}: {unsafe.why}", code=f"key-{unsafe.code}") from None
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise HimdsError(f"HIMDS challenge key {real!r}: expected ASCII text", code="key-not-ascii") from None


def _error_detail(body):
    """The error text of an IMDS error body, without echoing anything unexpected at length."""
    try:
        payload = json.loads(body)
        detail = payload.get("error_description") or payload.get("error") or ""
        return str(detail)[:300]
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace")


def parse_token(body, now=None):
    """IMDS JSON -> Token, every field we use checked (access_token.py says what a token and
    its expiry may be): a bad one is a HimdsError naming the field and the value, raised
    before anything is cached or formatted. IMDS sends numbers as strings ("expires_in":
    "3599" in the sample response of "How to use managed identities for Azure resources on
    an Azure VM to acquire an access token", learn.microsoft.com, how-to-use-vm-token)."""
    try:
        payload = json.loads(body)
    except ValueError:
        raise HimdsError("HIMDS answered 200 with a body that is not JSON") from None
    if not isinstance(payload, dict) or payload.get("access_token") in (None, ""):
        raise HimdsError("HIMDS answered 200 without an access_token")
    now = int(time.time()) if now is None else now
    try:
        token = access_token.access_token(payload["access_token"])
        if payload.get("expires_on") not in (None, ""):
            expires_on = access_token.expiry(access_token.seconds(payload["expires_on"], "expires_on"), now)
        elif payload.get("expires_in") not in (None, ""):
            lifetime = access_token.seconds(payload["expires_in"], "expires_in")
            expires_on = access_token.expiry(now + lifetime, now, "expires_in")
        else:
            raise HimdsError("HIMDS answered 200 without expires_on or expires_in", code="token-without-expiry")
    except access_token.BadTokenField as bad:
        error = HimdsError(f"HIMDS token answer field {bad}", code="bad-token-field",
                           remedy="HIMDS (himdsd) answered with a token no Entra issuer makes: check "
                                  "`azcmagent show` and whether something else listens on the HIMDS port")
        error.field = bad.field
        raise error from None
    return Token(token, expires_on)


def retry_after(headers, default):
    """Seconds to wait before the next try: the Retry-After header (delay-seconds or an
    HTTP-date, RFC 9110 section 10.2.3) when it is usable, else `default`; at most MAX_WAIT."""
    value = (headers.get("Retry-After") if headers is not None else None) or ""
    value = value.strip()
    seconds = None
    if value.isdigit():
        seconds = float(value)
    elif value:
        try:
            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            seconds = None
    if seconds is None:
        seconds = default
    return min(max(seconds, 0.0), MAX_WAIT)


def _exchange(opener, url, key_dir, root, timeout):
    """One challenge and, when it is answered with 401, one token request. Returns
    (request name, status, headers, body) of the last answer; `timeout()` is the time one
    request may take."""
    status, headers, body = _request(opener, url, {"Metadata": "true"}, timeout())
    if status != 401:
        return CHALLENGE, status, headers, body
    key = read_challenge_key(_realm_path(headers.get("WWW-Authenticate")), key_dir, root=root)
    status, headers, body = _request(
        opener, url, {"Metadata": "true", "Authorization": f"Basic {key}"}, timeout()
    )
    return TOKEN_REQUEST, status, headers, body


def get_token(
    endpoint=DEFAULT_ENDPOINT,
    resource=AKS_RESOURCE,
    key_dir=DEFAULT_KEY_DIR,
    timeout=10,
    *,
    api_version=API_VERSION,
    client_id=None,
    root=None,
    budget=DEFAULT_BUDGET,
    attempts=ATTEMPTS,
    sleep=time.sleep,
    clock=time.monotonic,
):
    """A token for `resource` from the local HIMDS.

    `key_dir` is the directory the challenge key must be in (a node path, like the realm
    HIMDS names; with `root`, both are looked up below the root). A 429, a 5xx or no answer
    is tried again, up to `attempts` exchanges and about `budget` seconds in all (a request
    waits at most `timeout` s, and not past the budget); then HimdsBusy or HimdsUnavailable
    (both exit 75). Any other wrong answer is a HimdsError at once.
    """
    url = token_url(endpoint, resource, api_version, client_id)
    where = url.split("?")[0]
    opener = _opener(url)
    started = clock()
    deadline = started + budget

    def request_timeout():
        return max(min(timeout, deadline - clock()), MIN_REQUEST_TIME)

    delay = BACKOFF
    for attempt in range(1, attempts + 1):
        try:
            # The agent's drift probe leaves this exchange, and its single-use key, to its
            # real passes (host/observed.py).
            with observed.deferred("HIMDS"):
                which, status, headers, body = _exchange(opener, url, key_dir, root, request_timeout)
        except HimdsUnavailable as err:
            failure, wait = err, delay
        else:
            if which == TOKEN_REQUEST and status == 200:
                return parse_token(body)
            if not _retryable(status):
                if which == CHALLENGE:
                    raise HimdsError(
                        f"HIMDS at {where} answered {status} to the first request: expected 401 "
                        f"with a Basic realm challenge ({_error_detail(body)})",
                        remedy="check that himds_endpoint names the Azure Arc HIMDS, not an Azure VM's IMDS",
                        code="no-challenge",
                    )
                raise HimdsError(
                    f"HIMDS at {where} refused the token request with {status}: {_error_detail(body)}",
                    remedy="check `azcmagent show`: the machine must be Connected",
                    code="token-refused",
                )
            detail = _error_detail(body)
            failure = HimdsBusy(
                f"HIMDS at {where} answered {status} to {which}" + (f" ({detail})" if detail else ""),
                remedy="HIMDS is throttled or failing: the agent tries again later; if it lasts, "
                "check `systemctl status himdsd` and `azcmagent show`",
            )
            wait = retry_after(headers, delay)
        if attempt == attempts or clock() + wait + MIN_REQUEST_TIME > deadline:
            break
        sleep(wait)
        delay *= 2
    raise type(failure)(
        f"{failure.message} (gave up after {attempt} attempt(s) in {clock() - started:.1f} s)",
        remedy=failure.remedy,
        code=failure.code,
    ) from None
