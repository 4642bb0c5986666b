"""Shared fixtures: the emulator (tests/emulator_fixtures.py) and a scratch node on it."""

import os

import pytest

from tests import harness
from tests.emulator import constants as C
from tests.emulator_fixtures import *  # noqa: F401,F403  (the emulator fixtures)


@pytest.fixture
def node(fake_host, tmp_path):
    """A Debian-like root prefix configured against a freshly reset emulator."""
    root = str(fake_host.root)
    harness.prepare_root(root)
    # The agent's key directory is where the emulator's HIMDS writes its challenge keys.
    keys = os.path.join(root, "var/opt/azcmagent/tokens")
    os.makedirs(os.path.dirname(keys), exist_ok=True)
    os.symlink(fake_host.emulator.himds_key_dir, keys)
    wrapper = harness.exec_plugin_wrapper(str(tmp_path))
    harness.write_config(root, fake_host.emulator, wrapper)
    n = harness.Node(root, str(fake_host.state_dir), fake_host.emulator, fake_host.env)
    n.fake = fake_host
    n.wrapper = wrapper
    return n


@pytest.fixture
def pool_node(node):
    """The scratch node in agent-pool mode, with the node's own service principal (the
    kubelet joins the pool by TLS bootstrap)."""
    harness.write_config(node.root, node.emu, node.wrapper, extra={
        "join_mode": "agent-pool", "agent_pool": C.FLEX_POOL, "sp_client_id": C.NODE_SP_CLIENT_ID,
        "arc_tags": "", "himds_endpoint": ""})
    with open(node.path(harness.SECRET_PATH), "w") as f:
        f.write(C.NODE_SP_CLIENT_SECRET + "\n")
    return node
