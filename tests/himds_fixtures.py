"""A loopback stand-in for Arc HIMDS (the token endpoint of the Connected Machine agent): the
401 challenge with its key file, then tokens; faults on demand; every request recorded.
Shared by tests/unit/test_himds.py, test_himds_retry.py, test_token.py and test_cached_token.py."""

import contextlib
import http.server
import json
import os
import threading
import time
import urllib.parse

NODE_KEY_DIR = "/var/opt/azcmagent/tokens"


class HimdsStandIn:
    """Answers like Arc HIMDS (Learn: managed-identity-authentication): 401 + realm, then a
    token for the key."""

    def __init__(self, key_dir, realm=None, key="s3cret-challenge", body=None, first_status=401):
        self.key_dir = key_dir
        self.key = key
        self.realm = realm or os.path.join(key_dir, "challenge.key")
        self.body = body
        self.first_status = first_status
        self.requests = []
        # Answers for the next requests, whatever they ask, before answering normally:
        # (status, headers), "drop" (close the connection without a word) or None (answer).
        self.faults = []
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parsed = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parsed.query))
                standin.requests.append({"path": parsed.path, "query": query, "headers": dict(self.headers)})
                fault = standin.faults.pop(0) if standin.faults else None
                if fault is not None:
                    if fault == "drop":
                        self.close_connection = True
                        return None
                    status, headers = fault
                    return self._reply(status, {"error": "fault", "error_description": f"fault {status}"}, headers)
                auth = self.headers.get("Authorization")
                if self.headers.get("Metadata") != "true":
                    return self._reply(400, {"error": "invalid_request", "error_description": "Metadata header"})
                if auth is None:
                    if standin.first_status != 401:
                        return self._reply(standin.first_status, {"error": "nope"})
                    with open(os.path.join(key_dir, "challenge.key"), "w") as handle:
                        handle.write(standin.key)
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", f"Basic realm={standin.realm}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                if auth != f"Basic {standin.key}":
                    return self._reply(401, {"error": "invalid_client", "error_description": "bad key"})
                body = standin.body if standin.body is not None else {
                    # A bearer token's characters only (RFC 6750 b64token): a resource URL's ':' is not one.
                    "access_token": "tok-" + urllib.parse.quote(query.get("resource", ""), safe="").replace("%", "_"),
                    "expires_in": "3599",
                    "expires_on": str(int(time.time()) + 3599),
                    "resource": query.get("resource"),
                    "token_type": "Bearer",
                }
                return self._reply(200, body)

            def _reply(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/metadata/identity/oauth2/token"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@contextlib.contextmanager
def himds_node(tmp_path, config_head=""):
    """A node root (tmp_path/root) with the Arc agent's key directory and a config naming a
    HIMDS stand-in, `config_head` before its [arc] section; yields the stand-in, its .root set.
    HIMDS names the key by its path on the node (WWW-Authenticate: Basic realm=<path>)."""
    root = tmp_path / "root"
    key_dir = root / NODE_KEY_DIR.lstrip("/")
    key_dir.mkdir(parents=True)
    with HimdsStandIn(str(key_dir), realm=NODE_KEY_DIR + "/challenge.key") as standin:
        conf = root / "etc/aks-flex-node/aks-flex-node.conf"
        conf.parent.mkdir(parents=True)
        conf.write_text(config_head + f"[arc]\nhimds_endpoint = {standin.endpoint}\nhimds_key_dir = {NODE_KEY_DIR}\n")
        standin.root = root
        yield standin
