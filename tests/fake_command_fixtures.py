"""Driving the host-command stand-ins (tests/fakes/bin) on a fake host: a command run in its
environment, and the config file the Arc agent stand-in's `connect --config` reads. Shared
by tests/unit/test_emulator_fakes.py and test_emulator_throttling.py."""

import json
import os
import subprocess

from tests.emulator import constants as C


def run(host, *argv, env=None):
    """A command run with the fake host's environment (its stand-ins first on PATH)."""
    return subprocess.run(list(argv), env={**host.env, **(env or {})}, capture_output=True, text=True, timeout=30)


def write_config(host, name="azcmagent.json", mode=0o600, **values):
    """A config file for `azcmagent connect --config` under the fake host's /run, with the
    emulator's tenant, subscription and place; a value of None leaves its key out."""
    settings = {"tenant-id": C.TENANT_ID, "subscription-id": C.SUBSCRIPTION_ID, "resource-group": C.ARC_RG,
                "location": C.LOCATION, "resource-name": "fake-node", "tags": "env=test,owner=ci",
                "cloud": "AzureCloud", **values}
    path = host.path(f"/run/{name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
        json.dump({k: v for k, v in settings.items() if v is not None}, f)
    os.chmod(path, mode)
    return str(path)
