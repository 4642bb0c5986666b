"""ARM throttling as the emulator models it (tests/emulator/throttling.py) and our clients
under it: token buckets that drain and refill at their rate, 429 + Retry-After + the
remaining-requests headers, the role-assignment limit, and Clients that keep waiting out
Retry-After for as long as ARM keeps asking (within the call's time bound)."""

import time
import uuid

import pytest

from aks_flex_node.azure import aks, arc
from aks_flex_node.azure.clients import Clients
from aks_flex_node.errors import TemporaryError
from tests.emulator import constants as C
from tests.emulator import throttling
from tests.emulator.httpbase import HttpError
from tests.emulator.state import State
from tests.fake_command_fixtures import run, write_config
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import put_machine

API = "2024-07-10"
MACHINES = f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/Microsoft.HybridCompute/machines"
ASSIGNMENTS = f"{C.CLUSTER_ID}/providers/Microsoft.Authorization/roleAssignments"


class ClusterRef:
    subscription_id, resource_group, name = C.SUBSCRIPTION_ID, C.CLUSTER_RG, C.CLUSTER_NAME


def get_machine(emu, token, name="absent"):
    return emu.arm_call("GET", f"{MACHINES}/{name}", API, token=token)


# -- the buckets ------------------------------------------------------------------------------


def test_defaults_are_the_documented_figures(fresh_emulator):
    snap = fresh_emulator.throttling()
    assert snap["enabled"] is True and snap["global_factor"] == 15
    assert snap["figures"] == {"reads": {"bucket": 250, "refill_per_second": 25.0},
                               "writes": {"bucket": 200, "refill_per_second": 10.0},
                               "deletes": {"bucket": 200, "refill_per_second": 10.0}}
    assert fresh_emulator.state()["settings"]["role_assignment_limit"] == 4000


def test_every_answer_counts_down_its_own_bucket(fresh_emulator):
    token = fresh_emulator.arm_token()
    status, headers, _ = get_machine(fresh_emulator, token)
    assert status == 404  # a read that found nothing still takes a read token
    assert headers["x-ms-ratelimit-remaining-subscription-reads"] == "249"
    assert headers["x-ms-ratelimit-remaining-subscription-global-reads"] == str(250 * 15 - 1)
    assert "x-ms-ratelimit-remaining-subscription-writes" not in headers
    status, headers, _ = fresh_emulator.arm_call("PUT", f"{MACHINES}/t1", API, {"location": C.LOCATION}, token=token)
    assert status in (200, 201) and headers["x-ms-ratelimit-remaining-subscription-writes"] == "199"
    status, headers, _ = fresh_emulator.arm_call("DELETE", f"{MACHINES}/t1", API, token=token)
    assert headers["x-ms-ratelimit-remaining-subscription-deletes"] == "199"


def test_an_empty_bucket_answers_429_with_retry_after_and_refills_at_its_rate(fresh_emulator):
    # A token every 500 s of the emulator's clock: a loaded machine's pauses between calls
    # refill nothing worth a call; the test moves the clock instead.
    fresh_emulator.settings(arm_reads_bucket=3, arm_reads_refill=0.002)
    token = fresh_emulator.arm_token()
    remaining = [get_machine(fresh_emulator, token)[1]["x-ms-ratelimit-remaining-subscription-reads"]
                 for _ in range(3)]
    assert remaining == ["2", "1", "0"]
    status, headers, body = get_machine(fresh_emulator, token)
    assert status == 429
    assert body["error"]["code"] == "SubscriptionRequestsThrottled"
    assert "Number of read requests for subscription" in body["error"]["message"]
    retry_after = int(headers["Retry-After"])
    assert 490 <= retry_after <= 500  # the time one token takes at 0.002/s, less what already came back
    assert headers["x-ms-ratelimit-remaining-subscription-reads"] == "0"
    # Writes have their own bucket.
    assert fresh_emulator.arm_call("PUT", f"{MACHINES}/t2", API, {"location": C.LOCATION},
                                   token=token)[0] in (200, 201)
    fresh_emulator.advance_clock(retry_after)  # one token back, and no more
    assert [get_machine(fresh_emulator, token)[0] for _ in range(2)] == [404, 429]
    snap = fresh_emulator.throttling()
    assert snap["throttled"] == 2
    refused = [c for c in snap["calls"] if c["status"] == 429]
    assert len(refused) == 2 and all(c["kind"] == "reads" and c["retry_after"] >= 1 for c in refused)


def test_the_bucket_is_per_principal_with_a_subscription_wide_one_above(fresh_emulator):
    fresh_emulator.settings(arm_reads_bucket=1, arm_reads_refill=0.0, arm_global_factor=2)
    owner = fresh_emulator.arm_token()
    reader = fresh_emulator.arm_token(C.READER_SP_CLIENT_ID, C.READER_SP_CLIENT_SECRET)
    cert_owner = fresh_emulator.mint_token(C.CERT_SP_OBJECT_ID, C.ARM_AUDIENCE)
    assert get_machine(fresh_emulator, owner)[0] == 404
    assert get_machine(fresh_emulator, owner)[0] == 429  # the owner's bucket is empty
    assert get_machine(fresh_emulator, reader)[0] == 404  # the reader's is not...
    status, headers, _ = get_machine(fresh_emulator, cert_owner)
    assert status == 429  # ...but the subscription's (2 tokens) now is
    assert headers["x-ms-ratelimit-remaining-subscription-global-reads"] == "0"
    assert headers["Retry-After"] == "60"  # no refill at all: come back in a minute


def test_off_counts_but_never_refuses_and_reset_refills(fresh_emulator):
    fresh_emulator.settings(arm_reads_bucket=1, arm_reads_refill=0.0, arm_throttling="off")
    token = fresh_emulator.arm_token()
    assert [get_machine(fresh_emulator, token)[0] for _ in range(3)] == [404, 404, 404]
    fresh_emulator.settings(arm_throttling="on")
    assert get_machine(fresh_emulator, token)[0] == 404  # off took no tokens
    assert get_machine(fresh_emulator, token)[0] == 429
    fresh_emulator.reset()
    status, headers, _ = get_machine(fresh_emulator, token)
    assert status == 404 and headers["x-ms-ratelimit-remaining-subscription-reads"] == "249"
    assert fresh_emulator.throttling()["throttled"] == 0


@pytest.mark.parametrize("changes,fragment", [
    ({"arm_throttling": "maybe"}, "arm_throttling = 'maybe': expected one of 'on', 'off'"),
    ({"arm_writes_bucket": -1}, "arm_writes_bucket = -1: expected a non-negative integer"),
    ({"arm_reads_refill": "fast"}, "arm_reads_refill = 'fast': expected a non-negative number"),
])
def test_bad_throttling_settings_are_refused_with_the_field(fresh_emulator, changes, fragment):
    with pytest.raises(Exception, match="HTTP 400") as err:
        fresh_emulator.settings(**changes)
    assert fragment in str(err.value)


def test_retry_after_is_the_time_until_a_token(tmp_path):
    class Req:
        method = "GET"

    state = State(str(tmp_path), "default")
    state.settings.update(arm_reads_bucket=10, arm_reads_refill=0.25)
    for _ in range(10):
        throttling.admit(state, Req(), "p", C.SUBSCRIPTION_ID, now=100.0)
    with pytest.raises(HttpError) as err:
        throttling.admit(state, Req(), "p", C.SUBSCRIPTION_ID, now=100.0)
    assert err.value.response.headers["Retry-After"] == "4"  # 1 token at 0.25/s
    with pytest.raises(HttpError) as err:
        throttling.admit(state, Req(), "p", C.SUBSCRIPTION_ID, now=103.0)
    assert err.value.response.headers["Retry-After"] == "1"  # 0.75 there, 1 s to go
    req = Req()
    throttling.admit(state, req, "p", C.SUBSCRIPTION_ID, now=104.0)
    assert req.ratelimit["x-ms-ratelimit-remaining-subscription-reads"] == "0"


# -- the role-assignment limit ------------------------------------------------------------------


def test_the_assignment_over_the_limit_is_refused_with_the_documented_code_and_not_stored(fresh_emulator):
    seeded = len(fresh_emulator.state()["role_assignments"])  # the profile's operators
    fresh_emulator.settings(role_assignment_limit=seeded + 2)
    token = fresh_emulator.arm_token()

    def assign(principal):
        body = {"properties": {"roleDefinitionId": f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/"
                                                   f"Microsoft.Authorization/roleDefinitions/{C.ROLE_READER}",
                               "principalId": principal, "principalType": "ServicePrincipal"}}
        return fresh_emulator.arm_call("PUT", f"{ASSIGNMENTS}/{uuid.uuid4()}", "2022-04-01", body, token=token)

    assert assign(C.READER_SP_OBJECT_ID)[0] == 201
    assert assign(C.CERT_SP_OBJECT_ID)[0] == 201
    before = fresh_emulator.state()["role_assignments"]
    status, _, body = assign(C.SP_OBJECT_ID)
    assert status == 400
    assert body["error"] == {"code": "RoleAssignmentLimitExceeded",
                             "message": "No more role assignments can be created."}
    assert fresh_emulator.state()["role_assignments"] == before


# -- our clients under throttling -------------------------------------------------------------


def test_clients_wait_out_more_429s_than_the_status_retry_budget(fresh_emulator, azure_clients):
    """ARM may answer 429 many times in a row when a fleet shares a subscription: each one
    says how long to wait, and waiting is what it asks, so those retries are bounded by the
    call's time bound, not by RETRY_STATUS (4: a fifth 429 used to fail the join)."""
    put_machine(fresh_emulator, "m1")
    fresh_emulator.faults([{
        "match": {"method": "GET", "path_regex": "machines/m1", "times": 8},
        "respond": {"status": 429, "headers": {"retry-after-ms": "50"},
                    "body": {"error": {"code": "SubscriptionRequestsThrottled", "message": "throttled"}}},
    }])
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1").name == "m1"
    statuses = [r["status"] for r in fresh_emulator.requests(server="arm", method="GET", path_contains="machines/m1")]
    assert statuses[-9:] == [429] * 8 + [200]


def test_retry_after_is_honoured_in_full_by_our_clients(fresh_emulator, azure_clients):
    fresh_emulator.settings(arm_reads_bucket=1, arm_reads_refill=1.0)
    started = time.monotonic()
    aks.get_cluster(azure_clients, ClusterRef)
    aks.get_cluster(azure_clients, ClusterRef)  # the bucket is empty: 429, Retry-After 1
    assert time.monotonic() - started >= 1.0
    calls = fresh_emulator.throttling()["calls"]
    refused = [c for c in calls if c["status"] == 429]
    assert refused
    for c in refused:
        after = [d for d in calls if d["time"] > c["time"] and d["kind"] == c["kind"]]
        assert after and after[0]["time"] - c["time"] >= c["retry_after"]


def test_endless_throttling_still_ends_within_the_call_bound(fresh_emulator, endpoints, operator):
    fresh_emulator.faults([{
        "match": {"method": "GET", "path_regex": "managedClusters"},
        "respond": {"status": 429, "headers": {"Retry-After": "1"},
                    "body": {"error": {"code": "SubscriptionRequestsThrottled", "message": "throttled"}}},
    }])
    with Clients(endpoints, operator, call_timeout=3) as clients:
        with pytest.raises(TemporaryError):
            aks.get_cluster(clients, ClusterRef)
    # It ended by its bound: each 429 waited out (1 s) and retried only while the 3 s
    # last. Counted, not timed: a loaded machine fits fewer attempts in, never more.
    assert 1 <= fresh_emulator.state()["fault_hits"] <= 4


# -- the Arc agent stand-in under throttling ------------------------------------------------


def test_azcmagent_connect_waits_out_throttling_of_its_machine_put(fake_host):
    emu = fake_host.emulator
    emu.settings(arm_writes_bucket=1, arm_writes_refill=0.25)  # Retry-After: 4
    token = emu.arm_token()
    emu.arm_call("PUT", f"{MACHINES}/other", API, {"location": C.LOCATION}, token=token)  # the last write token
    proc = run(fake_host, "azcmagent", "connect", "--config", write_config(fake_host, **{"access-token": token}))
    assert proc.returncode == 0, proc.stderr
    assert sorted(m["name"] for m in emu.state()["machines"]) == ["fake-node", "other"]
    puts = [c for c in emu.throttling()["calls"] if c["path"].endswith("/fake-node")]
    assert [c["status"] for c in puts][0] == 429 and puts[-1]["status"] in (200, 201)
    assert puts[1]["time"] - puts[0]["time"] >= puts[0]["retry_after"]


# -- HIMDS of many hosts on one emulator (the fleet simulation) -----------------------------


def himds_get(url, key=None):
    import json
    import urllib.error
    import urllib.request

    headers = {"Metadata": "true", **({"Authorization": f"Basic {key}"} if key else {})}
    request = urllib.request.Request(f"{url}?api-version=2020-06-01&resource=https://management.azure.com/",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_a_fleet_host_himds_serves_its_own_machine_identity(fresh_emulator):
    for name in ("host-a", "host-b"):
        fresh_emulator.arm_call("PUT", f"{MACHINES}/{name}", API,
                                {"location": C.LOCATION, "identity": {"type": "SystemAssigned"}})
    state = fresh_emulator.state()
    client_ids = {p["object_id"]: p["client_id"] for p in state["principals"]}
    expected = {m["name"]: client_ids[m["principal_id"]] for m in state["machines"]}
    keys = {}
    for name in ("host-a", "host-b"):
        url = fresh_emulator.himds.replace("/metadata/", f"/hosts/{name}/metadata/")
        status, headers, _ = himds_get(url)
        realm = headers["WWW-Authenticate"].split("realm=", 1)[1]
        assert status == 401 and realm.startswith(f"{fresh_emulator.himds_key_dir}/hosts/{name}/")
        with open(realm) as f:
            keys[name] = f.read()
        status, _, body = himds_get(url, keys[name])
        assert status == 200 and body["client_id"] == expected[name]
    # A host's key is no good at another host, and a host with no machine has no identity.
    status, _, _ = himds_get(fresh_emulator.himds.replace("/metadata/", "/hosts/host-b/metadata/"), keys["host-a"])
    assert status == 401
    status, _, body = himds_get(fresh_emulator.himds.replace("/metadata/", "/hosts/host-c/metadata/"))
    assert status == 404 and "host-c" in body["error_description"]


# -- a world of many nodes: state.json rewritten at most every few seconds -------------------


def test_state_save_interval_defers_state_json_rewrites(fresh_emulator):
    import json

    def saved_machines():
        with open(fresh_emulator.state_dir / "state.json") as f:
            return {m["name"] for m in json.load(f)["machines"].values()}

    put_machine(fresh_emulator, "saved-at-once")
    assert "saved-at-once" in saved_machines()  # the default: after every change
    fresh_emulator.settings(state_save_interval=3600)
    put_machine(fresh_emulator, "saved-later")
    put_machine(fresh_emulator, "saved-later-too")
    assert "saved-later-too" not in saved_machines()
    fresh_emulator.settings(state_save_interval=0)
    fresh_emulator.state()  # any answer saves a changed world again
    assert {"saved-later", "saved-later-too"} <= saved_machines()
