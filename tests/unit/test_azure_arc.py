"""Arc machines through the real hybridcompute SDK of this stack."""

import pytest

from azure.mgmt.hybridcompute.operations import MachinesOperations
from aks_flex_node.azure import arc
from aks_flex_node.errors import TemporaryError
from tests.emulator import constants as C
from tests.azure_fixtures import *  # noqa: F401,F403  (fixtures)
from tests.azure_fixtures import put_machine

# A long-running delete (begin_delete) since api-version 2025-02-19-preview: hybridcompute
# 9.1.0b2 (Ubuntu 26.04's) and 10.x; 7.0.0, 8.0.0b1, 8.0.0 and 9.1.0b1 a synchronous delete.
# Asked of the SDK, as arc.delete_machine asks it: the version number does not tell (9.1.0b1
# and 9.1.0b2 differ).
LRO_SDK = hasattr(MachinesOperations, "begin_delete")


def test_absent_machine_is_none(azure_clients):
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "nobody") is None


def test_machine_fields_from_this_sdk_shape(fresh_emulator, azure_clients):
    body = put_machine(fresh_emulator, "m1")
    machine = arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1")
    assert machine == arc.Machine(
        id=body["id"],
        name="m1",
        location=C.LOCATION,
        principal_id=body["identity"]["principalId"],
        tenant_id=C.TENANT_ID,
        status=body["properties"]["status"],
        agent_version=body["properties"].get("agentVersion"),
        vm_id=body["properties"]["vmId"],  # the agent's ID of its host (preflight/identity.py)
    )
    assert type(machine.status) is str and type(machine.vm_id) is str  # not the SDK's enum or UUID


def test_delete_present_then_absent(fresh_emulator, azure_clients):
    put_machine(fresh_emulator, "m1")
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is True
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is None
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is False
    deletes = fresh_emulator.requests(server="arm", method="DELETE", path_contains="/machines/m1")
    # One DELETE only (the second call saw the 404 first); 202 + polling on 10.x, 200 before.
    assert [r["status"] for r in deletes] == [202 if LRO_SDK else 200]


def test_delete_with_a_slow_lro_waits_for_it(fresh_emulator, azure_clients):
    fresh_emulator.settings(lro_delay=0.3)
    put_machine(fresh_emulator, "m1")
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is True
    assert arc.get_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is None


def test_delete_answered_204_works_on_every_sdk(fresh_emulator, azure_clients):
    fresh_emulator.settings(machine_delete_mode="204")
    put_machine(fresh_emulator, "m1")
    assert arc.delete_machine(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1") is True


class WorldClock:
    """The poll's clock and sleep, on the emulator's clock: a pause moves the world ahead by
    its length instead of taking it, so Azure's identity delay passes without a wait."""

    def __init__(self, emulator):
        self.emulator, self.now, self.sleeps = emulator, 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        self.emulator.advance_clock(seconds)


def test_wait_for_identity_polls_until_the_principal_shows(fresh_emulator, azure_clients):
    fresh_emulator.settings(arc_identity_delay=30)
    put_machine(fresh_emulator, "m1")
    clock = WorldClock(fresh_emulator)
    machine = arc.wait_for_identity(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1", timeout=600,
                                    clock=clock, sleep=clock.sleep)
    assert machine.principal_id
    assert clock.sleeps == [1, 2, 4, 8, 15]  # the backoff's pauses, 30 s of the world's time
    gets = fresh_emulator.requests(server="arm", method="GET", path_contains="/machines/m1")
    assert len(gets) == 6


def test_wait_for_identity_is_bounded_and_says_what_it_saw(fresh_emulator, azure_clients):
    fresh_emulator.settings(arc_identity_delay=3600)
    put_machine(fresh_emulator, "m1")
    clock = WorldClock(fresh_emulator)
    with pytest.raises(TemporaryError) as caught:
        arc.wait_for_identity(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "m1", timeout=30,
                              clock=clock, sleep=clock.sleep)
    # the machine, how long it waited, and the machine as last seen (its resource ID)
    assert caught.value.code == "no-identity"
    assert f"{C.ARC_RG}/m1" in caught.value.message and "30s" in caught.value.message
    assert "/machines/m1" in caught.value.message
    assert sum(clock.sleeps) == 30  # up to the deadline, not past it


def test_wait_for_identity_of_a_machine_that_never_appears(azure_clients):
    with pytest.raises(TemporaryError) as caught:
        arc.wait_for_identity(azure_clients, C.SUBSCRIPTION_ID, C.ARC_RG, "ghost", timeout=0.2, first_delay=0.1)
    assert caught.value.code == "arc-machine-absent" and f"{C.ARC_RG}/ghost" in caught.value.message

