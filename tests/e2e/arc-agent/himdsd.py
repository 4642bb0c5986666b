#!/usr/bin/python3
"""himdsd, test stand-in: the Arc identity endpoint (HIMDS) on 127.0.0.1:40342.

To its clients it is the real service (Learn:
https://learn.microsoft.com/azure/azure-arc/servers/managed-identity-authentication): a GET of
/metadata/identity/oauth2/token with `Metadata: true` and no Authorization gets a 401 and
`WWW-Authenticate: Basic realm=/var/opt/azcmagent/tokens/<random>.key`, after a random
secret was written to that file (0600, root only); the same GET with
`Authorization: Basic <the file's content>` gets the token. A key serves once, and for
KEY_TTL seconds (about 60 s, a reported figure; Learn documents no lifetime).

The token itself comes from the emulator's HIMDS (HIMDSD_UPSTREAM), through the same
challenge: the emulator writes its key files into its own directory on the test host,
which the e2e harness binds into the container at HIMDSD_UPSTREAM_KEY_DIR. The emulator
knows which Arc machine `azcmagent connect` bound, so a disconnected or deleted machine
gets the emulator's own error, relayed as it is. Both settings come from
/etc/default/azcmagent-standin (the unit's EnvironmentFile). Nothing secret is logged.
"""

import http.server
import os
import secrets
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LISTEN = ("127.0.0.1", 40342)
TOKEN_PATH = "/metadata/identity/oauth2/token"
KEY_DIR = "/var/opt/azcmagent/tokens"
KEY_TTL = 60.0
UPSTREAM_TIMEOUT = 20


class Keys:
    """The outstanding challenge keys: secret -> (path, created)."""

    def __init__(self, directory):
        self.directory = directory
        self._keys = {}
        self._lock = threading.Lock()

    def issue(self):
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        secret = secrets.token_hex(32)
        path = os.path.join(self.directory, secrets.token_hex(16) + ".key")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret)
        with self._lock:
            self._expire()
            self._keys[secret] = (path, time.monotonic())
        return path

    def consume(self, secret):
        """True when `secret` is an outstanding key; it is forgotten (single use)."""
        with self._lock:
            self._expire()
            entry = self._keys.pop(secret, None)
        if entry is None:
            return False
        _unlink(entry[0])
        return True

    def _expire(self):
        now = time.monotonic()
        for secret, (path, created) in list(self._keys.items()):
            if now - created > KEY_TTL:
                del self._keys[secret]
                _unlink(path)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Upstream:
    """The emulator's HIMDS, asked through its own challenge."""

    def __init__(self, url, key_dir):
        self.url = url
        self.key_dir = key_dir
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _get(self, query, authorization=None):
        headers = {"Metadata": "true"}
        if authorization:
            headers["Authorization"] = authorization
        request = urllib.request.Request(f"{self.url}?{query}", headers=headers, method="GET")
        try:
            with self.opener.open(request, timeout=UPSTREAM_TIMEOUT) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def token(self, query):
        """(status, content type, body) of the emulator's answer for this query."""
        status, headers, body = self._get(query)
        challenge = headers.get("WWW-Authenticate") or headers.get("Www-Authenticate") or ""
        if status != 401 or "=" not in challenge:
            return status, headers.get("Content-Type", "application/json"), body
        # The realm names the key file on the test host; it is bound here under KEY_DIR.
        name = os.path.basename(challenge.split("=", 1)[1].strip())
        with open(os.path.join(self.key_dir, name)) as f:
            key = f.read(4096).strip()
        status, headers, body = self._get(query, f"Basic {key}")
        return status, headers.get("Content-Type", "application/json"), body


def _json_error(status, error, description):
    import json

    return status, "application/json", json.dumps({"error": error, "error_description": description}).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "himdsd-standin"
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's naming)
        parsed = urllib.parse.urlsplit(self.path)
        if parsed.path != TOKEN_PATH:
            return self._send(*_json_error(404, "not_found", f"no endpoint at {parsed.path}; tokens are at "
                                                             f"{TOKEN_PATH}"))
        if (self.headers.get("Metadata") or "").lower() != "true":
            return self._send(*_json_error(400, "invalid_request", "expected the header 'Metadata: true'"))
        query = urllib.parse.parse_qs(parsed.query)
        if not query.get("api-version") or not query.get("resource"):
            return self._send(*_json_error(400, "invalid_request", "expected the query variables api-version "
                                                                   "and resource"))
        authorization = self.headers.get("Authorization")
        if not authorization:
            path = self.server.keys.issue()
            return self._send(*_json_error(401, "unauthorized_client", "read the key file named in "
                                                                       "WWW-Authenticate and send its content"),
                              extra={"WWW-Authenticate": f"Basic realm={path}"})
        scheme, _, secret = authorization.partition(" ")
        if scheme.lower() != "basic" or not self.server.keys.consume(secret.strip()):
            return self._send(*_json_error(401, "invalid_client", "the key is unknown, used or expired: "
                                                                  "ask for a new challenge"))
        try:
            answer = self.server.upstream.token(parsed.query)
        except (OSError, urllib.error.URLError) as e:
            answer = _json_error(503, "upstream_unavailable", f"the identity service cannot be reached: {e}")
        return self._send(*answer)

    def _send(self, status, content_type, body, extra=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        # The request line has no secret (keys travel in a header); the journal keeps it.
        sys.stderr.write("himdsd: %s\n" % (fmt % args))


def main():
    upstream = os.environ.get("HIMDSD_UPSTREAM", "")
    key_dir = os.environ.get("HIMDSD_UPSTREAM_KEY_DIR", "")
    if not upstream.startswith("http://") or not key_dir:
        sys.stderr.write("himdsd (test stand-in): HIMDSD_UPSTREAM = %r, HIMDSD_UPSTREAM_KEY_DIR = %r: expected "
                         "the emulator's HIMDS URL (http://...) and the directory its key files are bound at, "
                         "in /etc/default/azcmagent-standin\n" % (upstream, key_dir))
        return 2
    server = http.server.ThreadingHTTPServer(LISTEN, Handler)
    server.daemon_threads = True
    server.keys = Keys(KEY_DIR)
    server.upstream = Upstream(upstream, key_dir)
    sys.stderr.write(f"himdsd: serving {TOKEN_PATH} on {LISTEN[0]}:{LISTEN[1]}, tokens from {upstream}\n")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
