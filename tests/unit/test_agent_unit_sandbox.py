"""The agent unit's sandboxing, read from the unit file the package ships (issue 26, defect
10): each directive that holds under a booted systemd is there with its value, and those
left out stay out. The exposure figure it earns is asserted in a booted node
(tests/e2e/test_join_failure.py); this is the cheap guard that names the directive that went.
"""

import pathlib

import pytest

UNIT = pathlib.Path(__file__).resolve().parents[2] / "lib/systemd/system/aks-flex-node-agent.service"

# What the agent runs under (the unit's comments say why each holds).
SANDBOX = {
    "NoNewPrivileges": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectProc": "invisible",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "SystemCallArchitectures": "native",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "KeyringMode": "private",
    "CapabilityBoundingSet": "~CAP_SYS_TIME CAP_WAKE_ALARM",
}
# Measured to break something the agent does (the unit's comments say what).
LEFT_OUT = ("ProtectHome", "ProtectHostname", "ProtectClock", "UMask")


def service_settings(text):
    """{key: [values]} of the [Service] section; systemd allows a key more than once."""
    settings, section = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section == "Service" and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


@pytest.fixture(scope="module")
def service():
    return service_settings(UNIT.read_text("utf-8"))


@pytest.mark.parametrize("key", sorted(SANDBOX))
def test_the_agent_runs_sandboxed(service, key):
    assert service.get(key) == [SANDBOX[key]], f"{UNIT.name}: {key}={service.get(key)!r}"


@pytest.mark.parametrize("key", LEFT_OUT)
def test_what_breaks_the_agent_stays_out(service, key):
    assert key not in service, f"{UNIT.name}: {key}={service[key]!r}"
