"""The one redactor of the support bundle (`aks-flex-node debug`): every part's bytes pass
it before they are added, whatever the part is (a file of ours, a command's output, an
answer from the API server).

Three layers, because no single one is enough:
- the secrets we know by value (the service principal's client secret, the bootstrap token,
  the HIMDS challenge key, a proxy password, the body of every private key we hold), each
  also as its base64, replaced by *** through host/run.py's `redact`, the one the command
  runner uses for log lines;
- private key PEM blocks removed whole (RFC 7468 section 2's encapsulation boundaries), so
  a key we did not know of, or one with another line length, never survives;
- patterns of credentials that need no knowing: an Authorization bearer value, a JWT (and
  its base64), a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`: kubernetes.io, "Authenticating
  with Bootstrap Tokens"), user:password@ in a URL (http_policy.redact's rule), and a SAS
  signature or token in a URL's query (an artifact mirror on Azure Blob Storage).
"""

import base64
import json
import re

from aks_flex_node.host.run import REDACTED, redact

_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.S)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# No \b before these: in a JSON string a "\n" puts a letter before them.
# A JWT's base64 ("eyJ" encodes as "ZXlK"): a kubeconfig or a secret dump holds tokens so.
_JWT_BASE64 = re.compile(r"ZXlK[A-Za-z0-9+/_-]{16,}={0,2}")
_BOOTSTRAP_TOKEN = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}\b")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s\"']+@")
# A URL's query credentials: an Azure Storage SAS's signature (Learn, "Create a service SAS":
# sig=), and access_token / token / code parameters (RFC 6750 section 2.3, RFC 6749).
_QUERY_CREDENTIALS = re.compile(r"(?i)([?&](?:sig|signature|access_token|token|code)=)[^&\s\"'#]+")
# Lines of a PEM body (base64): what is taken of a key file as secrets of its own.
_PEM_BODY_LINE = re.compile(r"^[A-Za-z0-9+/=]{16,}$")

SHORTEST_SECRET = 4  # a shorter "secret" would blank half the bundle for nothing


def _other_forms(secret):
    """How a secret is also written: its base64 (standard and URL-safe, padded or not) and
    its text inside a JSON string (a quote or a backslash in it escaped)."""
    raw = secret.encode("utf-8")
    forms = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    return forms | {form.rstrip("=") for form in forms} | {json.dumps(secret)[1:-1]}


def private_key_lines(pem_text):
    """The base64 lines of every private key block in `pem_text`: secrets of their own, so a
    key's body is caught even where its BEGIN/END lines were cut off."""
    lines = []
    for match in _PEM_PRIVATE_KEY.finditer(pem_text):
        lines += [line.strip() for line in match.group(0).splitlines() if _PEM_BODY_LINE.match(line.strip())]
    return lines


class Redactor:
    """Cleans text and bytes of the secrets it was given and of every credential pattern."""

    def __init__(self, secrets=()):
        known = set()
        for secret in secrets:
            if isinstance(secret, str) and len(secret.strip()) >= SHORTEST_SECRET:
                known.add(secret.strip())
                known |= {form for form in _other_forms(secret.strip()) if len(form) >= SHORTEST_SECRET}
        self.secrets = sorted(known, key=len, reverse=True)

    def text(self, text):
        text = _PEM_PRIVATE_KEY.sub(lambda m: f"[{m.group(1)} removed]", text)
        text = redact(text, self.secrets)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        text = _JWT.sub(REDACTED, text)
        text = _JWT_BASE64.sub(REDACTED, text)
        text = _BOOTSTRAP_TOKEN.sub(REDACTED, text)
        text = _QUERY_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED, text)
        return _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", text)

    def bytes(self, data):
        """`data` cleaned, as UTF-8 (bytes that are not UTF-8 are shown as U+FFFD: a secret
        must not hide in an encoding the patterns do not read)."""
        return self.text(data.decode("utf-8", "replace")).encode("utf-8")
