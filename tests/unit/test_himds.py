"""The HIMDS client against a small loopback HIMDS stand-in (the HTTP boundary:
tests/himds_fixtures.py)."""

import json
import os
import time

import pytest

from aks_flex_node.azure import himds
from aks_flex_node.errors import ExitCode
from tests.himds_fixtures import HimdsStandIn


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
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    # the realm HIMDS named, and the key directory it must lie in
    assert caught.value.code == "key-outside-key-dir"
    assert repr(str(secret)) in caught.value.message and repr(os.path.realpath(key_dir)) in caught.value.message
    assert len(standin.requests) == 1  # nothing was sent back


def test_symlink_escape_is_refused(key_dir, tmp_path):
    target = tmp_path / "shadow"
    target.write_text("root:hash")
    (key_dir / "evil.key").symlink_to(target)
    with HimdsStandIn(str(key_dir), realm=str(key_dir / "evil.key")) as standin:
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    assert caught.value.code == "key-outside-key-dir" and repr(str(target)) in caught.value.message  # where it leads
    assert len(standin.requests) == 1


def test_dotdot_escape_is_refused(key_dir, tmp_path):
    (tmp_path / "var/opt/azcmagent/other.key").write_text("x")
    realm = str(key_dir) + "/../other.key"
    with HimdsStandIn(str(key_dir), realm=realm) as standin:
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    assert caught.value.code == "key-outside-key-dir" and repr(realm) in caught.value.message


def test_oversized_key_is_refused(key_dir):
    with HimdsStandIn(str(key_dir), key="k" * 4097) as standin:
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    # the size found and the limit
    assert caught.value.code == "key-too-large"
    assert "4097" in caught.value.message and "4096" in caught.value.message
    assert len(standin.requests) == 1


def test_key_of_exactly_4096_bytes_is_accepted(key_dir):
    with HimdsStandIn(str(key_dir), key="k" * 4096) as standin:
        assert himds.get_token(standin.endpoint, "r", str(key_dir)).access_token == "tok-r"


def test_key_without_key_suffix_is_refused(key_dir):
    (key_dir / "challenge.txt").write_text("x")
    with HimdsStandIn(str(key_dir), realm=str(key_dir / "challenge.txt")) as standin:
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    # the realm and the suffix it lacks
    assert caught.value.code == "key-not-a-key-file"
    assert "challenge.txt" in caught.value.message and repr(himds.KEY_SUFFIX) in caught.value.message


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
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    # where it asked and the status it got
    assert caught.value.code == "no-challenge"
    assert standin.endpoint.split("?")[0] in caught.value.message and "200" in caught.value.message


def test_malformed_challenge_header(key_dir):
    with HimdsStandIn(str(key_dir), realm="") as standin:
        standin.realm = ""
        # An empty realm still has the "Basic realm=" prefix: it must fail on the path.
        with pytest.raises(himds.HimdsError):
            himds.get_token(standin.endpoint, "r", str(key_dir))
    with pytest.raises(himds.HimdsError) as caught:
        himds._realm_path("Bearer authorization_uri=x")
    # the header and the value refused
    assert caught.value.code == "bad-challenge"
    assert "WWW-Authenticate = 'Bearer authorization_uri=x'" in caught.value.message


def test_token_without_expiry_is_an_error(key_dir):
    with HimdsStandIn(str(key_dir), body={"access_token": "t"}) as standin:
        with pytest.raises(himds.HimdsError) as caught:
            himds.get_token(standin.endpoint, "r", str(key_dir))
    assert caught.value.code == "token-without-expiry"


def test_garbage_expiry_names_the_field():
    with pytest.raises(himds.HimdsError, match="expires_on = 'soon'"):
        himds.parse_token(json.dumps({"access_token": "t", "expires_on": "soon"}).encode())


def test_connection_refused_is_temporary(key_dir):
    with HimdsStandIn(str(key_dir)) as standin:
        endpoint = standin.endpoint
    with pytest.raises(himds.HimdsUnavailable) as caught:
        himds.get_token(endpoint, "r", str(key_dir), timeout=2)
    assert endpoint.split("?")[0] in caught.value.message  # where it asked
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
