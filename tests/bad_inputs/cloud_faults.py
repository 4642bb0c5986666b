"""The Azure a "hostile cloud value" case talks to: an emulator (tests/emulator) of the case's
own, started for it with the case's `faults` rules posted (tests/emulator/faults.py: a
`set` rule rewrites one field of one answer), stopped when the case ends.

One emulator per case: every case's rules match the same cluster's answers, so cases that
run at once must not share one. The node's Azure, HIMDS and mirror endpoints and its CA
bundle point at it; everything else is the corpus's base configuration.
"""

import os
import shutil
import threading

from tests import digest_fixtures

CA_NODE_PATH = "/etc/aks-flex-node/emulator-ca.pem"

_lock = threading.Lock()
_running = {}  # work directory -> its emulator


def serve(case, work):
    """Start the case's emulator with its fault rules: (configuration values, files) that
    point the node at it."""
    from tests.emulator_fixtures import start_emulator

    emu = start_emulator(os.path.join(work, "emulator"))
    with _lock:
        _running[work] = emu
    emu.faults(list(case.faults))
    with open(emu.ca_bundle, encoding="utf-8") as f:
        ca = f.read()
    # The emulator's stand-in artifacts pinned, as every test node pins them
    # (tests/digest_fixtures.py): what refuses the run is the bad value, not a digest.
    config = {"arm_endpoint": emu.arm, "authority_host": emu.authority, "himds_endpoint": emu.himds,
              "artifact_mirror": emu.artifacts, "ca_bundle": CA_NODE_PATH,
              "artifact_digests_file": digest_fixtures.NODE_PATH, "pause_image": emu.pause_image}
    return config, [{"path": CA_NODE_PATH, "text": ca, "mode": "0644"},
                    {"path": digest_fixtures.NODE_PATH, "text": digest_fixtures.emulator_digests(), "mode": "0644"}]


def stand_in_env(work):
    """What the stand-ins (tests/fakes/bin: azcmagent) need to reach the case's emulator, as
    the integration tests' node gives them (tests/emulator_fixtures.py); {} without one."""
    with _lock:
        emu = _running.get(work)
    if emu is None:
        return {}
    env = {"FAKE_AZURE_ARM": emu.arm, "FAKE_AZURE_CA_BUNDLE": emu.ca_bundle}
    emu.route_entra(env)
    return env


def release(work):
    """Stop the emulator `serve` started for the case in `work`, if any."""
    with _lock:
        emu = _running.pop(work, None)
    if emu is not None:
        emu.stop()
        shutil.rmtree(os.path.join(work, "emulator"), ignore_errors=True)
