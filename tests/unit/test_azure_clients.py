"""Client construction, retries and thread safety, with the real SDK clients against the emulator."""

import dataclasses
import socket
import threading
import time
import urllib.parse

import pytest

from aks_flex_node.azure import aks, arc
from aks_flex_node.azure import auth
from aks_flex_node.azure.clients import Clients
from aks_flex_node.clouds import CUSTOM, CloudEndpoints
from aks_flex_node.errors import TemporaryError
from aks_flex_node.http_policy import HttpPolicy
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import put_machine, settings_for
from tests.waiting import connects_to, pauses


class ClusterRef:
    subscription_id, resource_group, name = C.SUBSCRIPTION_ID, C.CLUSTER_RG, C.CLUSTER_NAME


def test_one_client_per_service_and_subscription_across_threads(azure_clients):
    seen, barrier = [], threading.Barrier(8)

    def build():
        barrier.wait()
        seen.append(azure_clients.hybridcompute(C.SUBSCRIPTION_ID))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 1
    assert azure_clients.hybridcompute(C.SUBSCRIPTION_ID.upper()) is seen[0]
    assert azure_clients.authorization(C.SUBSCRIPTION_ID) is not seen[0]


def test_concurrent_calls_share_the_clients(fresh_emulator, azure_clients):
    put_machine(fresh_emulator, "m1")
    results, errors = [], []

    def work():
        try:
            results.append(arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1").name)
            results.append(aks.get_cluster(azure_clients, ClusterRef).name)
        except Exception as err:  # collected, asserted below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results) == sorted(["m1", C.CLUSTER_NAME] * 6)


def test_calls_go_to_the_configured_arm_with_its_ca(fresh_emulator, azure_clients):
    aks.get_cluster(azure_clients, ClusterRef)
    gets = fresh_emulator.requests(server="arm", method="GET", path_contains="managedClusters")
    assert gets and gets[-1]["status"] == 200


def test_throttled_get_waits_for_retry_after(fresh_emulator, azure_clients):
    put_machine(fresh_emulator, "m1")
    fresh_emulator.faults([{
        "match": {"method": "GET", "path_regex": "machines/m1", "times": 1},
        "respond": {"status": 429, "headers": {"Retry-After": "1"},
                    "body": {"error": {"code": "TooManyRequests", "message": "throttled"}}},
    }])
    started = time.monotonic()
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1").name == "m1"
    assert time.monotonic() - started >= 0.9
    statuses = [r["status"] for r in fresh_emulator.requests(server="arm", method="GET", path_contains="machines/m1")]
    assert statuses[-2:] == [429, 200]


def test_throttled_post_with_retry_after_is_retried(fresh_emulator, azure_clients):
    # azure-core retries any method on a status >= 400 with Retry-After (policies/_retry.py).
    fresh_emulator.faults([{
        "match": {"method": "POST", "path_regex": "listClusterUserCredential", "times": 1},
        "respond": {"status": 429, "headers": {"Retry-After": "1"},
                    "body": {"error": {"code": "TooManyRequests", "message": "throttled"}}},
    }])
    server, _ = aks.server_and_ca(azure_clients, ClusterRef)
    assert server.startswith("https://127.0.0.1:")


def test_persistent_server_errors_end_as_temporary(fresh_emulator, endpoints, operator):
    fresh_emulator.faults([{
        "match": {"method": "GET", "path_regex": "managedClusters"},
        "respond": {"status": 503, "body": {"error": {"code": "ServiceUnavailable", "message": "down"}}},
    }])
    with Clients(endpoints, operator, backoff_factor=0.01) as clients:
        with pytest.raises(TemporaryError, match="Azure answered 503 \\(ServiceUnavailable\\): down"):
            aks.get_cluster(clients, ClusterRef)
    attempts = fresh_emulator.requests(server="arm", method="GET", path_contains="managedClusters")
    assert len(attempts) == 5  # the first try and RETRY_STATUS = 4 retries


def test_dead_endpoint_fails_within_the_bound(endpoints, operator, monkeypatch):
    """Nothing listens: the production retry settings give up after a bounded number of
    tries and pauses, as exit 75. Counted where they leave this process: the connection
    attempts to the dead port (socket.connect) and the backoff pauses (time.sleep)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = CloudEndpoints(CUSTOM, f"https://127.0.0.1:{port}", endpoints.authority, C.ARM_SCOPE, endpoints.ca_bundle)
    attempts = connects_to(monkeypatch, port)
    slept = pauses(monkeypatch)
    with Clients(dead, operator) as clients:
        with pytest.raises(TemporaryError, match="cannot reach Azure"):
            aks.get_cluster(clients, ClusterRef)
    assert len(attempts) == 3  # the first try and RETRY_CONNECT = 2 retries
    # azure-core's backoff: none before the first retry, BACKOFF_FACTOR * 2 before the second.
    assert slept == [2.0]


def test_clients_from_a_config_object(fresh_emulator, endpoints, operator):
    class Cfg:  # the attributes Clients reads from config.Config
        https_proxy = "http://proxy.invalid:3128"
        no_proxy = ["127.0.0.1", "localhost"]

    Cfg.endpoints = endpoints
    with Clients(Cfg, operator, polling_interval=0) as clients:
        assert clients.proxies == {}  # the ARM host is in no_proxy: no proxy for it
        assert aks.get_cluster(clients, ClusterRef).name == C.CLUSTER_NAME


def _dead_proxy():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_the_environment_proxy_is_not_used(fresh_emulator, endpoints, secret_file, monkeypatch):
    """The config is the only source: a proxy in the process environment (an operator's
    shell) changes nothing, for the credential and for the ARM clients alike."""
    dead = _dead_proxy()
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, dead)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    operator = auth.credential(settings_for(endpoints, secret_file))
    with Clients(endpoints, operator, polling_interval=0) as clients:
        assert aks.get_cluster(clients, ClusterRef).name == C.CLUSTER_NAME


def test_the_configured_proxy_carries_arm_and_entra_calls(fresh_emulator, endpoints, secret_file, no_proxy):
    """A configured proxy is used even for loopback hosts (only no_proxy exempts a host):
    with nothing listening there, both the token request and the ARM call fail as
    unreachable; the same calls with the host in no_proxy go through."""
    policy = HttpPolicy(https_proxy=_dead_proxy(), ca_bundle=endpoints.ca_bundle)
    settings = dataclasses.replace(settings_for(endpoints, secret_file), policy=policy)
    with pytest.raises(Exception) as caught:
        auth.credential(settings).get_token(C.ARM_SCOPE)
    assert "127.0.0.1" in str(caught.value) or "proxy" in str(caught.value).lower()
    # Loopback, and the authority's host (the public cloud's where the suite routes it by name).
    bypassed = HttpPolicy(https_proxy=policy.https_proxy, ca_bundle=endpoints.ca_bundle,
                          no_proxy=("127.0.0.0/8", urllib.parse.urlsplit(endpoints.authority).hostname))
    operator = auth.credential(dataclasses.replace(settings, policy=bypassed))
    with Clients(endpoints, operator, policy, polling_interval=0, retry_total=1) as clients:
        with pytest.raises(TemporaryError, match="cannot reach Azure"):
            aks.get_cluster(clients, ClusterRef)
    with Clients(endpoints, operator, bypassed, polling_interval=0) as clients:
        assert clients.proxies == {}
        assert aks.get_cluster(clients, ClusterRef).name == C.CLUSTER_NAME


def test_empty_subscription_is_refused(azure_clients):
    with pytest.raises(ValueError, match="subscription_id = '': expected a subscription GUID"):
        azure_clients.hybridcompute("")


def _pipeline_response(status, retry_after):
    import requests
    from azure.core.pipeline import PipelineResponse
    from azure.core.pipeline.transport import HttpRequest as TransportRequest
    from azure.core.pipeline.transport import RequestsTransportResponse

    raw = requests.Response()
    raw.status_code = status
    raw.headers["Retry-After"] = str(retry_after)
    request = TransportRequest("GET", "https://127.0.0.1/")
    return PipelineResponse(request, RequestsTransportResponse(request, raw), None)


def test_throttled_waits_get_jitter_but_never_less_than_asked():
    """A fleet throttled at once must not come back at once: 429 waits get up to 20 % more
    (at most 5 s); other statuses' Retry-After is honoured as sent."""
    from aks_flex_node.azure.clients import ThrottleAwareRetryPolicy

    policy = ThrottleAwareRetryPolicy()
    waits = [policy.get_retry_after(_pipeline_response(429, 10)) for _ in range(200)]
    assert all(10 <= w <= 12 for w in waits) and len(set(waits)) > 100
    assert all(60 <= policy.get_retry_after(_pipeline_response(429, 60)) <= 65 for _ in range(50))
    assert policy.get_retry_after(_pipeline_response(503, 10)) == 10
