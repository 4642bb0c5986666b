"""The admin API (settings, faults, reset, clusters) and ARM's generic behaviour."""

import threading
import time
import uuid

import pytest

from tests.emulator import constants as C
from tests.emulator_fixtures import EmulatorError
from tests.waiting import wait_for

MACHINE = f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.CLUSTER_RG}/providers/Microsoft.HybridCompute/machines"


def put_machine(emu, name):
    return emu.arm_call("PUT", f"{MACHINE}/{name}", "2024-07-10", {"location": C.LOCATION})


@pytest.mark.parametrize("changes,fragments", [
    ({"rbac_propagaton_delay": 1}, ["rbac_propagaton_delay: unknown setting", "rbac_propagation_delay"]),
    ({"rbac_propagation_delay": "soon"}, ["rbac_propagation_delay = 'soon'", "non-negative number"]),
    ({"machine_delete_mode": "202"}, ["machine_delete_mode = '202'", "'auto', '204'"]),
    ({"page_size": -1, "lro_retry_after": "x"}, ["page_size = -1", "lro_retry_after = 'x'"]),
])
def test_bad_settings_name_the_field_the_value_and_what_is_expected(fresh_emulator, changes, fragments):
    with pytest.raises(EmulatorError) as err:
        fresh_emulator.settings(**changes)
    assert "HTTP 400" in str(err.value)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_settings_change_and_reset_restores_the_profile(fresh_emulator):
    assert fresh_emulator.settings(rbac_propagation_delay=0, page_size=5)["page_size"] == 5
    put_machine(fresh_emulator, "admin-m1")
    token = fresh_emulator.arm_token()
    fresh_emulator.reset()
    state = fresh_emulator.state()
    assert state["settings"]["page_size"] == 100 and state["settings"]["rbac_propagation_delay"] == 1.0
    assert state["machines"] == []
    assert {a["principal_id"] for a in state["role_assignments"]} == {
        C.SP_OBJECT_ID, C.READER_SP_OBJECT_ID, C.CERT_SP_OBJECT_ID, C.NODE_SP_OBJECT_ID}
    # Tokens belong to the directory, not the resources: still good after a reset.
    assert fresh_emulator.arm_call("GET", f"{MACHINE}/admin-m1", "2024-07-10", token=token)[0] == 404


@pytest.mark.parametrize("rules,fragments", [
    ([{"match": {"times": 0}, "drop": True}], ["faults[0].match.times = 0", "positive integer"]),
    ([{"match": {"path_regex": "("}, "drop": True}], ["faults[0].match.path_regex = '('", "regular expression"]),
    ([{"drop": True}, {"match": {"server": "dns"}, "delay": 1}], ["faults[1].match.server = 'dns'"]),
    ([{"respond": {"status": 429}, "drop": True}], ["faults[0]: respond and drop exclude each other"]),
    ([{"match": {}}], ["faults[0]: nothing to do"]),
    ([{"respond": {"status": 42}}], ["faults[0].respond.status = 42"]),
    ([{"hold": 30}], ["faults[0].hold = 30", "true or false"]),
    ({"bogus": 1}, ["faults[0].bogus: unknown key"]),
])
def test_bad_fault_rules_are_refused_with_the_problem_named(fresh_emulator, rules, fragments):
    with pytest.raises(EmulatorError) as err:
        fresh_emulator.faults(rules)
    for fragment in fragments:
        assert fragment in str(err.value)
    assert fresh_emulator.state()["faults"] == []


def test_delay_fault_slows_only_matching_requests(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "arm", "method": "PUT", "times": 1}, "delay": 0.5}])
    token = fresh_emulator.arm_token()
    fresh_emulator.arm_call("GET", f"{MACHINE}/x", "2024-07-10", token=token)
    assert len(fresh_emulator.state()["faults"]) == 1  # the GET did not use it (a lower bound only below:
    started = time.monotonic()                           # a loaded machine is slower, never faster)
    assert put_machine(fresh_emulator, "slow")[0] == 200
    assert time.monotonic() - started >= 0.5
    assert fresh_emulator.state()["faults"] == []  # used up


def test_a_hold_fault_holds_matching_requests_until_the_faults_are_cleared(fresh_emulator):
    """A gate, not a time: the PUT is held however long the test takes, others go through."""
    fresh_emulator.faults([{"match": {"server": "arm", "method": "PUT"}, "hold": True}])
    token = fresh_emulator.arm_token()
    answers = []
    held = threading.Thread(target=lambda: answers.append(put_machine(fresh_emulator, "held")[0]))
    held.start()
    try:
        assert wait_for(lambda: fresh_emulator.admin("GET", "faults")[0]["hits"] == 1)
        assert fresh_emulator.arm_call("GET", f"{MACHINE}/held", "2024-07-10", token=token)[0] == 404
        assert held.is_alive() and answers == []
        assert fresh_emulator.requests(method="PUT", path_contains="/held") == []  # logged once answered
    finally:
        fresh_emulator.clear_faults()
        held.join(60)
    assert answers == [200]
    assert [r["fault"] for r in fresh_emulator.requests(method="PUT", path_contains="/held")] == ["hold"]


def test_himds_rules_do_not_touch_arm(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "himds"}, "respond": {"status": 500}}])
    assert put_machine(fresh_emulator, "unaffected")[0] == 200
    status, _, _ = fresh_emulator.http("GET", f"{fresh_emulator.himds}?api-version=2020-06-01&resource=x",
                                       headers={"Metadata": "true"})
    assert status == 500


def test_added_cluster_gets_its_own_apiserver(fresh_emulator):
    added = fresh_emulator.add_cluster(name="aks-three", resource_group="rg-three", kubernetes_version="1.29.8")
    assert added["apiserver"] not in (fresh_emulator.apiserver, fresh_emulator.apiservers[C.CLUSTER2_ID])
    status, _, version = fresh_emulator.http("GET", f"{added['apiserver']}/version")
    assert status == 200 and version["gitVersion"] == "v1.29.8"
    status, _, cluster = fresh_emulator.arm_call("GET", added["id"], "2026-08-01")
    assert status == 200 and cluster["properties"]["kubernetesVersion"] == "1.29.8"
    with pytest.raises(EmulatorError) as err:
        fresh_emulator.add_cluster(name="", resource_group="rg", kubernetes_version="1.30", colour="blue")
    for fragment in ("name = ''", "kubernetes_version = '1.30'", "colour: unknown key"):
        assert fragment in str(err.value)


def test_unregistered_provider_answers_missing_subscription_registration(fresh_emulator):
    fresh_emulator.settings(unregistered_providers=["Microsoft.HybridCompute"])
    status, _, body = fresh_emulator.arm_call("GET", f"{MACHINE}/x", "2024-07-10")
    assert status == 409 and body["error"]["code"] == "MissingSubscriptionRegistration"
    assert "'Microsoft.HybridCompute'" in body["error"]["message"]  # the SDK policy parses the quoted name
    provider = f"/subscriptions/{C.SUBSCRIPTION_ID}/providers/Microsoft.HybridCompute"
    assert fresh_emulator.arm_call("GET", provider, "2016-02-01")[2]["registrationState"] == "NotRegistered"
    status, _, registered = fresh_emulator.arm_call("POST", f"{provider}/register", "2016-02-01")
    assert status == 200 and registered["registrationState"] == "Registered"
    assert fresh_emulator.arm_call("GET", f"{MACHINE}/x", "2024-07-10")[0] == 404


def test_arm_paths_are_matched_leniently_and_api_versions_recorded(fresh_emulator):
    put_machine(fresh_emulator, "lenient")
    weird = (f"//SUBSCRIPTIONS/{C.SUBSCRIPTION_ID.upper()}//resourcegroups/RG-AKS/providers/"
             "microsoft.hybridcompute/MACHINES/lenient/")
    status, headers, body = fresh_emulator.arm_call("GET", weird, "2031-01-01-preview",
                                                    token=fresh_emulator.arm_token())
    assert status == 200 and body["name"] == "lenient"
    assert headers["x-ms-request-id"] and headers["x-ms-correlation-request-id"]
    assert "2031-01-01-preview" in fresh_emulator.state()["api_versions"]["microsoft.hybridcompute/machines"]


def test_arm_requires_an_api_version_and_a_valid_token(fresh_emulator):
    status, _, body = fresh_emulator.http("GET", f"{fresh_emulator.arm}{MACHINE}/x",
                                          headers={"Authorization": f"Bearer {fresh_emulator.arm_token()}"})
    assert status == 400 and body["error"]["code"] == "MissingApiVersionParameter"
    for token, code in (("emuat.unknown", "InvalidAuthenticationToken"),
                        (fresh_emulator.mint_token(C.SP_OBJECT_ID, audience=C.ARM_AUDIENCE, lifetime=-5),
                         "ExpiredAuthenticationToken"),
                        (fresh_emulator.mint_token(C.SP_OBJECT_ID), "InvalidAuthenticationTokenAudience")):
        status, headers, body = fresh_emulator.arm_call("GET", f"{MACHINE}/x", "2024-07-10", token=token)
        assert status == 401 and body["error"]["code"] == code
        assert 'error="invalid_token"' in headers["WWW-Authenticate"]


def test_request_log_records_client_request_ids_and_user_agents(fresh_emulator):
    request_id = str(uuid.uuid4())
    fresh_emulator.http("GET", f"{fresh_emulator.arm}{MACHINE}/x?api-version=2024-07-10",
                        headers={"Authorization": f"Bearer {fresh_emulator.arm_token()}",
                                 "x-ms-client-request-id": request_id, "User-Agent": "probe/1.0"})
    entry = fresh_emulator.requests(server="arm")[-1]
    assert (entry["client_request_id"], entry["user_agent"], entry["api_version"], entry["status"]) == (
        request_id, "probe/1.0", "2024-07-10", 404)


# An hour of the emulator's clock: the operation stays in progress however slow this
# machine is, until the test moves the clock past it.
LRO_DELAY = 3600.0


def test_machine_delete_mode_204_and_slow_operations(fresh_emulator):
    fresh_emulator.settings(lro_delay=LRO_DELAY)
    put_machine(fresh_emulator, "slow-delete")
    status, headers, _ = fresh_emulator.arm_call("DELETE", f"{MACHINE}/slow-delete", "2026-07-15")
    assert status == 202 and "Retry-After" not in headers
    auth = {"Authorization": f"Bearer {fresh_emulator.arm_token()}"}
    assert fresh_emulator.http("GET", headers["Azure-AsyncOperation"], headers=auth)[2]["status"] == "InProgress"
    assert fresh_emulator.http("GET", headers["Location"], headers=auth)[0] == 202
    _, _, deleting = fresh_emulator.arm_call("GET", f"{MACHINE}/slow-delete", "2026-07-15")
    assert deleting["properties"]["provisioningState"] == "Deleting"
    fresh_emulator.advance_clock(LRO_DELAY - 60)  # not yet
    auth = {"Authorization": f"Bearer {fresh_emulator.arm_token()}"}  # the first one has (nearly) expired
    assert fresh_emulator.http("GET", headers["Azure-AsyncOperation"], headers=auth)[2]["status"] == "InProgress"
    fresh_emulator.advance_clock(61)
    auth = {"Authorization": f"Bearer {fresh_emulator.arm_token()}"}
    assert fresh_emulator.http("GET", headers["Azure-AsyncOperation"], headers=auth)[2]["status"] == "Succeeded"
    assert fresh_emulator.http("GET", headers["Location"], headers=auth)[0] == 204
    fresh_emulator.settings(machine_delete_mode="204")
    put_machine(fresh_emulator, "quick-delete")
    assert fresh_emulator.arm_call("DELETE", f"{MACHINE}/quick-delete", "2026-07-15")[0] == 204
