"""The `set` fault: a normal answer with fields of its JSON body replaced, as a hostile or
broken service would send a bad value in an otherwise well-formed answer."""

import pytest

from tests.emulator import constants as C
from tests.emulator_fixtures import EmulatorError

API = "2024-05-01"


def get_cluster(emu):
    status, _headers, body = emu.arm_call("GET", C.CLUSTER_ID, API)
    assert status == 200
    return body


def test_set_replaces_a_nested_field_once(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "arm", "path_regex": "managedClusters/[^/]+$", "times": 1},
                            "set": {"properties.currentKubernetesVersion": "1.30.4/x",
                                    "properties.added.deep": [1, 2]}}])
    bad = get_cluster(fresh_emulator)
    assert bad["properties"]["currentKubernetesVersion"] == "1.30.4/x"
    assert bad["properties"]["added"] == {"deep": [1, 2]}
    assert bad["name"] == C.CLUSTER_NAME, "the rest of the answer is the real one"
    good = get_cluster(fresh_emulator)
    assert good["properties"]["currentKubernetesVersion"] != "1.30.4/x"
    faulted = [r["fault"] for r in fresh_emulator.requests(server="arm", path_contains=C.CLUSTER_NAME)]
    assert faulted[-2:] == ["set", None]


def test_set_indexes_lists_by_number(fresh_emulator):
    fresh_emulator.faults([{"match": {"server": "arm", "path_regex": "managedClusters/[^/]+$", "times": 1},
                            "set": {"properties.agentPoolProfiles.0.count": -3}}])
    assert get_cluster(fresh_emulator)["properties"]["agentPoolProfiles"][0]["count"] == -3


@pytest.mark.parametrize("rule,fragment", [
    ({"set": {}}, "faults[0].set = {}"),
    ({"set": {"a..b": 1}}, "faults[0].set = {'a..b': 1}"),
    ({"set": {"a": 1}, "corrupt": True}, "faults[0]: corrupt and set exclude each other"),
])
def test_bad_set_rules_are_refused_naming_the_field(fresh_emulator, rule, fragment):
    with pytest.raises(EmulatorError) as err:
        fresh_emulator.faults([rule])
    assert fragment in str(err.value)
