"""Whether an endpoint answers: an HTTP answer of any status is enough, through the proxy or
not as the run's HttpPolicy says; a failure that may pass on its own (a stall, a reset, DNS's
"try again") is tried once more before it counts."""

import dataclasses
import http.client
import socket
import ssl
import time
import urllib.error
import urllib.request

# A reachability probe that failed in a transient way is tried once more after this pause.
RETRY_PAUSE = 1.0


@dataclasses.dataclass(frozen=True)
class Unreachable:
    why: str
    transient: bool
    # It answered, with a certificate the CA we hold does not vouch for (a CA we stored may
    # be stale: the cluster's certificates rotated).
    untrusted: bool = False


def is_transient(reason):
    """Whether a failure to reach an endpoint may pass on its own. Transient: a timeout (a
    stall, or a firewall that drops packets: we cannot tell them apart, and the message
    still names the firewall), a connection reset, aborted or closed without an answer (also
    mid TLS handshake), and a DNS answer of "try again" (EAI_AGAIN). Definite, needing
    a fix: a name that does not resolve, a refused connection (nothing listens there, or a
    firewall rejects us; for HIMDS, himdsd is not running though the agent says Connected),
    a TLS certificate that does not verify, any other TLS or OS error."""
    if isinstance(reason, ssl.SSLCertVerificationError):
        return False
    if isinstance(reason, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return True
    if isinstance(reason, socket.gaierror):
        return reason.errno == socket.EAI_AGAIN
    if isinstance(reason, ConnectionRefusedError):
        return False
    return isinstance(reason, (TimeoutError, ConnectionResetError, ConnectionAbortedError,
                               BrokenPipeError, http.client.HTTPException))


def _why(reason, policy, cafile):
    """What to show of a failure: a certificate refusal names what it was checked against
    (the operator's ca_bundle, a cluster CA file or the system's CAs) and OpenSSL's reason."""
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"TLS certificate verify failed against {policy.trusted(cafile)}: {reason.verify_message}"
    return str(reason) or type(reason).__name__


def _probe(url, policy, cafile, timeout):
    opener = policy.opener(url, policy.ssl_context(cafile=cafile))
    try:
        opener.open(urllib.request.Request(url, method="GET"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # an answer, whatever its status
    except urllib.error.URLError as exc:
        return Unreachable(_why(exc.reason, policy, cafile), is_transient(exc.reason),
                           isinstance(exc.reason, ssl.SSLCertVerificationError))
    except (OSError, http.client.HTTPException) as exc:  # ssl.SSLError is an OSError
        return Unreachable(_why(exc, policy, cafile), is_transient(exc), isinstance(exc, ssl.SSLCertVerificationError))
    return None


def reachable(url, policy, cafile=None, timeout=5, pause=RETRY_PAUSE):
    """None when an HTTP answer (any status) comes back, else an Unreachable saying why.
    Through the proxy or not as the run's HttpPolicy says for `url`; `cafile` replaces its
    CA bundle. A transient failure is tried once more after `pause` s, so one dropped
    connection or one stall is not taken for a broken network."""
    failure = _probe(url, policy, cafile, timeout)
    if failure is not None and failure.transient:
        time.sleep(pause)
        failure = _probe(url, policy, cafile, timeout)
    return failure
