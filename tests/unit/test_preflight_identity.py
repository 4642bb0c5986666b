"""This host's machine ID as preflight reads it (steps/preflight/identity.py), on real files
under a scratch root, and what a Node object says of who holds the name."""

import os

import pytest

from aks_flex_node.host import Host
from aks_flex_node.steps.preflight import identity

ID_A = "0123456789abcdef0123456789abcdef"
ID_B = "fedcba9876543210fedcba9876543210"


@pytest.fixture
def host(tmp_path):
    (tmp_path / "etc").mkdir()
    return Host(str(tmp_path))


def write(host, data):
    with open(host.path(identity.MACHINE_ID_PATH), "wb") as f:
        f.write(data)


def test_a_machine_id_is_read(host):
    write(host, ID_A.encode() + b"\n")
    mid = identity.read_machine_id(host)
    assert (mid.value, mid.problem) == (ID_A, None)


@pytest.mark.parametrize("data, problem", [
    (b"", "empty"),  # machine-id(5): the image convention, filled at first boot
    (b"\n", "empty"),
    (b"uninitialized\n", "uninitialized"),  # machine-id(5): first boot not finished
    (b"not-an-id\n", "malformed"),
    (ID_A.upper().encode() + b"\n", "malformed"),
    (b"\x1b]0;owned\x07\n", "malformed"),
    (b"0" * 32 + b"\n", "malformed"),  # machine-id(5): "This ID may not be all zeros."
])
def test_an_unusable_machine_id_says_what_is_wrong(host, data, problem):
    write(host, data)
    mid = identity.read_machine_id(host)
    assert (mid.value, mid.problem) == (None, problem)
    if problem == "malformed":
        assert "\x1b" not in mid.detail  # shown by repr, never raw


def test_a_missing_machine_id_is_absent(host):
    assert identity.read_machine_id(host).problem == "absent"


def test_a_fifo_is_not_waited_on_and_a_huge_file_not_read(host):
    os.mkfifo(host.path(identity.MACHINE_ID_PATH))
    assert identity.read_machine_id(host).problem == "unreadable"
    os.unlink(host.path(identity.MACHINE_ID_PATH))
    write(host, b"0" * (identity.MACHINE_ID_MAX_BYTES + 1))
    assert identity.read_machine_id(host).problem == "unreadable"


def test_a_symlink_is_not_followed(host, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text(ID_A + "\n")
    os.symlink(target, host.path(identity.MACHINE_ID_PATH))
    assert identity.read_machine_id(host).problem == "unreadable"


def _node(machine_id, ready):
    return {"metadata": {"name": "n"},
            "status": {"nodeInfo": {"machineID": machine_id},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize("theirs, ready, claim", [
    (ID_A, True, None),       # this machine's own Node: a rejoin
    (ID_A, False, None),
    (ID_B, True, "ready"),    # another machine is that node now
    (ID_B, False, "stale"),   # another machine was: re-imaged, or gone
    ("", True, None),         # a Node that says no ID (registered by hand): nothing to compare
])
def test_what_a_node_says_of_who_holds_the_name(theirs, ready, claim):
    assert identity.node_claim(_node(theirs, ready), ID_A) == claim


@pytest.mark.parametrize("node", [
    {}, {"status": None}, {"status": []}, {"status": {"nodeInfo": "x"}},
    {"status": {"nodeInfo": {"machineID": 7}}, "conditions": [{"type": "Ready", "status": "True"}]},
])
def test_a_node_not_shaped_as_one_says_nothing_of_who_holds_the_name(node):
    assert identity.reported_machine_id(node) == "" and identity.node_claim(node, ID_A) is None
