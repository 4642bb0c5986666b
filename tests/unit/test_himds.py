"""The HIMDS client against a small loopback HIMDS stand-in (the HTTP boundary)."""

import http.server
import json
import os
import threading
import time
import urllib.parse

import pytest

from aks_flex_node.azure import himds
from aks_flex_node.errors import ExitCode


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
                    "access_token": "tok-" + query.get("resource", ""),
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


@pytest.fixture
def key_dir(tmp_path):
    path = tmp_path / "var/opt/azcmagent/tokens"
    path.mkdir(parents=True)
    return path


def test_challenge_then_token(key_dir):
    with HimdsStandIn(str(key_dir)) as standin:
        token = himds.get_token(standin.endpoint, himds.AKS_RESOURCE, str(key_dir), timeout=5)
    assert token.access_token == "tok-" + himds.AKS_RESOURCE
    assert abs(token.expires_on - (time.time() + 3599)) < 5
    first, second = standin.requests
    assert "Authorization" not in first["headers"]
    assert second["headers"]["Authorization"] == "Basic s3cret-challenge"
    for request in (first, second):
        assert request["query"] == {"api-version": "2020-06-01", "resource": himds.AKS_RESOURCE}
        assert request["headers"]["Metadata"] == "true"


def test_api_version_is_configurable(key_dir):
    with HimdsStandIn(str(key_dir)) as standin:
        himds.get_token(standin.endpoint, "https://management.azure.com", str(key_dir), api_version="2019-11-01")
    assert standin.requests[-1]["query"]["api-version"] == "2019-11-01"
    assert standin.requests[-1]["query"]["resource"] == "https://management.azure.com"


def test_expires_in_only_and_numbers_as_numbers(key_dir):
    with HimdsStandIn(str(key_dir), body={"access_token": "t", "expires_in": 600}) as standin:
        token = himds.get_token(standin.endpoint, "r", str(key_dir))
    assert abs(token.expires_on - (time.time() + 600)) < 5


def test_realm_outside_key_dir_is_refused_and_key_not_sent(key_dir, tmp_path):
    secret = tmp_path / "elsewhere.key"
    secret.write_text("not-for-himds")
    with HimdsStandIn(str(key_dir), realm=str(secret)) as standin:
        with pytest.raises(himds.HimdsError, match="expected a file directly inside the agent key directory"):
            himds.get_token(standin.endpoint, "r", str(key_dir))
    assert len(standin.requests) == 1  # nothing was sent back


def test_symlink_escape_is_refused(key_dir, tmp_path):
    target = tmp_path / "shadow"
    target.write_text("root:hash")
    (key_dir / "evil.key").symlink_to(target)
    with HimdsStandIn(str(key_dir), realm=str(key_dir / "evil.key")) as standin:
        with pytest.raises(himds.HimdsError, match="resolves to"):
            himds.get_token(standin.endpoint, "r", str(key_dir))
    assert len(standin.requests) == 1


def test_dotdot_escape_is_refused(key_dir, tmp_path):
    (tmp_path / "var/opt/azcmagent/other.key").write_text("x")
    realm = str(key_dir) + "/../other.key"
    with HimdsStandIn(str(key_dir), realm=realm) as standin:
        with pytest.raises(himds.HimdsError, match="directly inside"):
            himds.get_token(standin.endpoint, "r", str(key_dir))


def test_oversized_key_is_refused(key_dir):
    with HimdsStandIn(str(key_dir), key="k" * 4097) as standin:
        with pytest.raises(himds.HimdsError, match="4097 bytes: expected at most 4096"):
            himds.get_token(standin.endpoint, "r", str(key_dir))
    assert len(standin.requests) == 1


def test_key_of_exactly_4096_bytes_is_accepted(key_dir):
    with HimdsStandIn(str(key_dir), key="k" * 4096) as standin:
        assert himds.get_token(standin.endpoint, "r", str(key_dir)).access_token == "tok-r"


def test_key_without_key_suffix_is_refused(key_dir):
    (key_dir / "challenge.txt").write_text("x")
    with HimdsStandIn(str(key_dir), realm=str(key_dir / "challenge.txt")) as standin:
        with pytest.raises(himds.HimdsError, match="ending in '.key'"):
            himds.get_token(standin.endpoint, "r", str(key_dir))


def test_directory_named_key_is_refused(key_dir):
    (key_dir / "dir.key").mkdir()
    with HimdsStandIn(str(key_dir), realm=str(key_dir / "dir.key")) as standin:
        with pytest.raises(himds.HimdsError, match="dir.key"):
            himds.get_token(standin.endpoint, "r", str(key_dir))


def test_realm_is_looked_up_under_root(tmp_path, key_dir):
    # HIMDS names the node path; with --root the file lives below the root.
    with HimdsStandIn(str(key_dir), realm="/var/opt/azcmagent/tokens/challenge.key") as standin:
        token = himds.get_token(standin.endpoint, "r", str(key_dir), root=str(tmp_path))
    assert token.access_token == "tok-r"


def test_first_answer_not_401_is_an_error(key_dir):
    with HimdsStandIn(str(key_dir), first_status=200) as standin:
        with pytest.raises(himds.HimdsError, match="answered 200 to the first request: expected 401"):
            himds.get_token(standin.endpoint, "r", str(key_dir))


def test_malformed_challenge_header(key_dir):
    with HimdsStandIn(str(key_dir), realm="") as standin:
        standin.realm = ""
        # An empty realm still has the "Basic realm=" prefix: it must fail on the path.
        with pytest.raises(himds.HimdsError):
            himds.get_token(standin.endpoint, "r", str(key_dir))
    with pytest.raises(himds.HimdsError, match="expected 'Basic realm=<path of a .key file>'"):
        himds._realm_path("Bearer authorization_uri=x")


def test_token_without_expiry_is_an_error(key_dir):
    with HimdsStandIn(str(key_dir), body={"access_token": "t"}) as standin:
        with pytest.raises(himds.HimdsError, match="without expires_on or expires_in"):
            himds.get_token(standin.endpoint, "r", str(key_dir))


def test_garbage_expiry_names_the_field():
    with pytest.raises(himds.HimdsError, match="expires_on = 'soon'"):
        himds.parse_token(json.dumps({"access_token": "t", "expires_on": "soon"}).encode())


def test_connection_refused_is_temporary(key_dir):
    with HimdsStandIn(str(key_dir)) as standin:
        endpoint = standin.endpoint
    with pytest.raises(himds.HimdsUnavailable, match="cannot reach HIMDS") as caught:
        himds.get_token(endpoint, "r", str(key_dir), timeout=2)
    assert caught.value.exit_code == ExitCode.TEMPFAIL
    assert "himdsd" in caught.value.remedy


def test_proxy_from_environment_is_not_used_for_loopback(key_dir, monkeypatch):
    # A proxy that does not exist: if it were used, the call would fail.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with HimdsStandIn(str(key_dir)) as standin:
        assert himds.get_token(standin.endpoint, "r", str(key_dir)).access_token == "tok-r"


def test_bad_endpoint_names_the_field(key_dir):
    with pytest.raises(himds.HimdsError, match="himds_endpoint = 'localhost:40342'"):
        himds.get_token("localhost:40342", "r", str(key_dir))


def test_token_repr_hides_the_secret():
    token = himds.Token("eyJ-very-secret", 123)
    assert "eyJ" not in repr(token) and "eyJ" not in str(token)
