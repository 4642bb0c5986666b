"""Azure Arc: the HybridCompute machine resource, and the local `azcmagent`.

The machine resource is created by `azcmagent connect` (the agent PUTs it itself,
azure-wire.md §1a); we only read it (for its managed identity) and delete it.
"""

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Optional

from azure.core.exceptions import ResourceNotFoundError

from aks_flex_node.azure.auth import azure_errors
from aks_flex_node.errors import FlexNodeError, TemporaryError
from aks_flex_node.host.run import CommandNotFound

log = logging.getLogger(__name__)

IDENTITY_TIMEOUT = 240  # upstream polls about 245 s for the identity (upstream-go-agent.md §3.1)


@dataclass(frozen=True)
class Machine:
    id: str
    name: str
    location: str
    principal_id: Optional[str]
    tenant_id: Optional[str]
    status: Optional[str]  # Connected | Disconnected | Error | Expired | AwaitingConnection
    agent_version: Optional[str]


def _text(value):
    """Enums of the newer SDKs are str subclasses; keep plain strings in our dataclasses."""
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _machine_property(model, name):
    """A property of the machine under both SDK shapes: hybridcompute 8.x flattens
    `properties.*` onto the model, 10.x keeps them under `.properties`."""
    properties = getattr(model, "properties", None)
    if properties is not None and getattr(properties, name, None) is not None:
        return getattr(properties, name)
    return getattr(model, name, None)


def machine_from_model(model):
    identity = getattr(model, "identity", None)
    return Machine(
        id=model.id,
        name=model.name,
        location=model.location,
        principal_id=getattr(identity, "principal_id", None),
        tenant_id=getattr(identity, "tenant_id", None),
        status=_text(_machine_property(model, "status")),
        agent_version=_text(_machine_property(model, "agent_version")),
    )


def get_machine(clients, subscription_id, resource_group, name):
    """The Arc machine, or None when there is none."""
    with azure_errors(f"reading Arc machine {resource_group}/{name}"):
        try:
            model = clients.hybridcompute(subscription_id).machines.get(resource_group, name)
        except ResourceNotFoundError:
            return None
    return machine_from_model(model)


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
                # hybridcompute 10.x: a long-running operation (202 or 204, azure-wire.md §1a)
                machines.begin_delete(resource_group, name).result()
            else:
                # 8.x/9.x: synchronous, 200 or 204
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
    deadline = clock() + timeout
    delay = first_delay
    last_seen = "no Arc machine resource"
    while True:
        machine = get_machine(clients, subscription_id, resource_group, name)
        if machine is not None and machine.principal_id:
            return machine
        if machine is not None:
            last_seen = f"machine {machine.id} with status {machine.status}, no identity principalId yet"
        remaining = deadline - clock()
        if remaining <= 0:
            raise TemporaryError(
                f"Arc machine {resource_group}/{name} has no managed identity after {timeout:g}s; last seen: {last_seen}",
                remedy="check `azcmagent show` and the machine in the Azure portal, then run bootstrap again",
            )
        sleep(min(delay, remaining))
        delay = min(delay * 2, max_delay)


# ---- the local agent ---------------------------------------------------------------------

RUN_DIR = "/run/aks-flex-node"  # root-only (0700): the connect config with the token lives here briefly
CONNECT_TIMEOUT = 600  # `azcmagent connect` installs extensions and waits for ARM
SHOW_TIMEOUT = 30
INSTALL_HINT = (
    "install the Azure Connected Machine agent package azcmagent "
    "(from packages.microsoft.com: `apt-get install azcmagent`)"
)
# The keys `azcmagent connect --config` reads are its long flag names (peers.md §5).
CONNECT_KEYS = ("tenant-id", "subscription-id", "resource-group", "location", "resource-name", "tags", "cloud")


class AzcmagentError(FlexNodeError):
    code = "azcmagent"


def format_tags(tags):
    """{"k": "v"} -> "k=v,k2=v2" (azcmagent's --tags form); values may not hold , or =."""
    if isinstance(tags, str):
        return tags
    parts = []
    for key, value in sorted((tags or {}).items()):
        for what, text in (("key", key), ("value", value)):
            if not isinstance(text, str) or "," in text or "=" in text:
                raise AzcmagentError(f"arc tag {what} = {text!r}: expected text without ',' or '='")
        parts.append(f"{key}={value}")
    return ",".join(parts)


class Azcmagent:
    """The Azure Connected Machine agent CLI, run through the Host."""

    def __init__(self, host, command="azcmagent", run_dir=RUN_DIR):
        self.host = host
        self.command = command
        self.run_dir = run_dir

    def _run(self, args, **kwargs):
        try:
            return self.host.run([self.command, *args], **kwargs)
        except CommandNotFound as err:
            raise AzcmagentError(f"{self.command} is not installed: {err.message}", remedy=INSTALL_HINT) from None

    def show(self):
        """`azcmagent show -j` as a dict (`status` is "Connected" or "Disconnected"...);
        None when it prints nothing. A failing agent raises CommandError with its output."""
        result = self._run(["show", "-j"], timeout=SHOW_TIMEOUT)
        if not result.stdout.strip():
            return None
        try:
            shown = json.loads(result.stdout)
        except ValueError:
            raise AzcmagentError(
                f"`{self.command} show -j` printed something that is not JSON: {result.stdout.strip()[:200]!r}"
            ) from None
        if not isinstance(shown, dict):
            raise AzcmagentError(f"`{self.command} show -j` printed {type(shown).__name__}: expected a JSON object")
        return shown

    def is_connected(self, expected, shown=None):
        """Connected, to the resource `expected` names (resource-name / resource-group /
        subscription-id, or their camelCase `show -j` keys)? `shown` is a `show()` the
        caller already has (one agent call, not two)."""
        shown = self.show() if shown is None else shown
        if not shown or str(shown.get("status", "")).lower() != "connected":
            return False
        pairs = (
            ("resourceName", "resource-name"),
            ("resourceGroup", "resource-group"),
            ("subscriptionId", "subscription-id"),
        )
        for show_key, flag_key in pairs:
            wanted = expected.get(flag_key, expected.get(show_key))
            if wanted and str(shown.get(show_key, "")).lower() != str(wanted).lower():
                return False
        return True

    def _with_config_file(self, args, content, secrets, timeout):
        """Run `azcmagent <args> --config <file>` with `content` in a 0600 file that is
        deleted afterwards whatever happens: the token stays off argv (upstream put it
        there, visible in /proc/*/cmdline, upstream-go-agent.md §8)."""
        self.host.ensure_dir(self.run_dir, mode=0o700)
        node_path = f"{self.run_dir}/azcmagent-{uuid.uuid4().hex}.json"
        try:
            self.host.write_file(node_path, json.dumps(content).encode(), mode=0o600)
            return self._run([*args, "--config", str(self.host.path(node_path))], timeout=timeout, secrets=secrets)
        finally:
            self.host.remove(node_path)

    def connect(self, settings, access_token):
        """`azcmagent connect` with `settings` (keys: azcmagent's long flag names)."""
        unknown = sorted(set(settings) - set(CONNECT_KEYS))
        if unknown:
            raise AzcmagentError(f"azcmagent connect settings {unknown}: expected only {', '.join(CONNECT_KEYS)}")
        if not access_token:
            raise AzcmagentError("azcmagent connect: access_token is empty: expected an ARM access token")
        content = {k: v for k, v in settings.items() if v not in (None, "", {})}
        if "tags" in content:
            content["tags"] = format_tags(content["tags"])
        content["access-token"] = access_token
        log.info("connecting the Arc agent as %s/%s", content.get("resource-group"), content.get("resource-name"))
        return self._with_config_file(["connect"], content, (access_token,), CONNECT_TIMEOUT)

    def disconnect(self, access_token=None):
        """With a token: delete the Azure resource and the local config. Without: local
        config only (`--force-local-only`, for when the resource is gone already)."""
        if access_token:
            return self._with_config_file(["disconnect"], {"access-token": access_token}, (access_token,), CONNECT_TIMEOUT)
        return self._run(["disconnect", "--force-local-only"], timeout=CONNECT_TIMEOUT)
