"""Azure Arc: the HybridCompute machine resource.

The machine resource is created by `azcmagent connect` (the agent PUTs it itself; the
local agent is `aks_flex_node.host.azcmagent`); we only read it (for its managed
identity) and delete it.
"""

import time
from dataclasses import dataclass
from typing import Optional

from azure.core.exceptions import ResourceNotFoundError

from aks_flex_node import cloud_values
from aks_flex_node.azure.auth import azure_errors
from aks_flex_node.azure.sdk_compat import model_property
from aks_flex_node.errors import TemporaryError
from aks_flex_node.polling import poll

# Upstream polls about 245 s for the identity (Azure/AKSFlexNode v0.0.10,
# pkg/components/arc/arc_installer.go registerArcMachine).
IDENTITY_TIMEOUT = 240


@dataclass(frozen=True)
class Machine:
    id: str
    name: str
    location: str
    principal_id: Optional[str]
    tenant_id: Optional[str]
    status: Optional[str]  # Connected | Disconnected | Error | Expired | AwaitingConnection
    agent_version: Optional[str]
    # The agent's own ID for the host it runs on, chosen at connect (properties.vmId, create-only:
    # specification/hybridcompute/.../stable/2026-07-15/openapi.json, MachineProperties): another
    # vmId under our machine name is another host's connection (steps/preflight/identity.py).
    vm_id: Optional[str] = None


def _text(value):
    """Enums of the newer SDKs are str subclasses; keep plain strings in our dataclasses."""
    if value is None:
        return None
    return str(getattr(value, "value", value))


def machine_from_model(model, source="ARM HybridCompute machines GET"):
    """Our Machine of the SDK's, the values we use checked (cloud_values): the principal ID
    is whom the role assignments name, the ID what status shows."""
    identity = getattr(model, "identity", None)
    principal_id = getattr(identity, "principal_id", None)
    tenant_id = getattr(identity, "tenant_id", None)
    return Machine(
        id=cloud_values.resource_id(model.id, source, "id"),
        name=cloud_values.resource_name(model.name, source, "name"),
        location=cloud_values.resource_name(model.location, source, "location"),
        principal_id=principal_id and cloud_values.guid(principal_id, source, "identity.principalId"),
        tenant_id=tenant_id and cloud_values.guid(tenant_id, source, "identity.tenantId"),
        status=_text(model_property(model, "status")),
        agent_version=_text(model_property(model, "agent_version")),
        vm_id=_text(model_property(model, "vm_id")),
    )


def get_machine(clients, subscription_id, resource_group, name):
    """The Arc machine, or None when there is none."""
    with azure_errors(f"reading Arc machine {resource_group}/{name}"):
        try:
            model = clients.hybridcompute(subscription_id).machines.get(resource_group, name)
        except ResourceNotFoundError:
            return None
    return machine_from_model(model, f"ARM HybridCompute machines GET {resource_group}/{name}")


def delete_machine(clients, subscription_id, resource_group, name):
    """Delete the Arc machine resource; True if it was there, False if it was not."""
    machines = clients.hybridcompute(subscription_id).machines
    with azure_errors(f"deleting Arc machine {resource_group}/{name}"):
        # ARM answers a DELETE of an absent resource with 204 too, so ask first.
        try:
            machines.get(resource_group, name)
        except ResourceNotFoundError:
            return False
        try:
            if hasattr(machines, "begin_delete"):
                # hybridcompute 9.1.0b2 (Ubuntu 26.04's, api 2025-02-19-preview) and 10.x: a
                # long-running operation (202 or 204: Machines_Delete.json, azure-rest-api-specs
                # HybridCompute stable/2026-07-15 examples)
                machines.begin_delete(resource_group, name).result()
            else:
                # earlier ones (7.0.0, 8.0.0b1, 8.0.0, 9.1.0b1): synchronous, 200 or 204
                machines.delete(resource_group, name)
        except ResourceNotFoundError:
            return False
    return True


def wait_for_identity(clients, subscription_id, resource_group, name, timeout=IDENTITY_TIMEOUT,
                      first_delay=1.0, max_delay=15.0, clock=time.monotonic, sleep=time.sleep):
    """Poll the machine until its system-assigned identity has a principal ID.

    The agent creates the resource and Azure adds the identity shortly after; a bounded
    exponential backoff (1, 2, 4, 8, 15, 15 ... s) within `timeout` seconds.
    """
    no_machine = "no Arc machine resource"

    def probe():
        machine = get_machine(clients, subscription_id, resource_group, name)
        if machine is None:
            return False, no_machine
        if machine.principal_id:
            return True, machine
        return False, f"machine {machine.id} with status {machine.status}, no identity principalId yet"

    def give_up(last_seen):
        return TemporaryError(
            f"Arc machine {resource_group}/{name} has no managed identity after {timeout:g}s; last seen: {last_seen}",
            remedy="check `azcmagent show` and the machine in the Azure portal, then run bootstrap again",
            code="arc-machine-absent" if last_seen == no_machine else "no-identity",
        )

    return poll(probe, timeout=timeout, delay=first_delay, max_delay=max_delay, give_up=give_up,
                clock=clock, sleep=sleep)

