"""The run's own state files read back only in the shape a run writes them: status.json and
the ledger holding the wrong types are errors naming the file and the field (never a
traceback, never "nothing there"), a ledger from a newer aks-flex-node is refused, and a
directory where the lock file belongs is named with what to do."""

import json
import os

import pytest

from aks_flex_node import cli
from aks_flex_node.maintainer import node_files
from aks_flex_node.engine import status as st
from aks_flex_node.engine.ledger import Ledger
from aks_flex_node.engine.lock import RunLock, StateWriteError
from aks_flex_node.engine.step import restart
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import Host
from aks_flex_node.paths import COMPLETE_MARKER, LEDGER, LOCK, STATE_DIR, STATUS
from aks_flex_node.steps.kinds import KINDS, Kind, open_ledger


@pytest.fixture
def host(tmp_path):
    host = Host(str(tmp_path))
    host.ensure_dir(STATE_DIR, 0o700)
    return host


def put(host, path, value, mode):
    host.write_file(path, json.dumps(value).encode(), mode)


def names(text, field):
    """Whether `text` names the key and the value found that `field` ("<key> is <value>,
    expected ..." or "<key> is missing") speaks of, whatever the words around them."""
    key, _, value = field.partition(", expected")[0].partition(" is ")
    return key in text and value in text


# ---- status.json ------------------------------------------------------------------------

BAD_STATUS = [
    ({"state": "failed", "phases": 5}, "phases is 5, expected a list"),
    ({"state": "failed", "phases": ["arc"]}, 'phases[0] is "arc", expected an object'),
    ({"state": "failed", "error": "boom"}, 'error is "boom", expected an object or null'),
    ({"state": "failed", "exit_code": "three"}, 'exit_code is "three", expected an integer'),
    ({"state": "failed", "exit_code": True}, "exit_code is true, expected an integer"),
    ({"state": "failed", "phases": [{"name": "arc", "status": "changed", "changes": [{}]}]},
     "phases[0].changes[0].what is missing"),
    ({"state": "failed", "owed": [{"kind": "restart", "unit": 3, "reason": "r"}]},
     "owed[0].unit is 3, expected a string"),
    ({"phases": []}, "state is missing"),
]


@pytest.mark.parametrize("content, field", BAD_STATUS)
def test_a_status_file_of_another_shape_names_the_file_and_the_field(host, capsys, content, field):
    # print_status and `status --wait` indexed into these and died with a TypeError,
    # AttributeError or ValueError ("internal error").
    put(host, STATUS, content, 0o644)
    with pytest.raises(FlexNodeError) as err:
        st.StatusFile(host).read()
    assert STATUS in err.value.message and names(err.value.message, field)  # the file, key, value
    assert f"rm {STATUS}" in err.value.remedy  # the command that mends it
    # an error of ours (its JSON), not an internal error
    assert cli.main(["status", "--json", "--root", str(host.root)]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["error"] == "failed" and names(shown["message"], field)


def test_status_wait_with_a_garbage_exit_code_names_it(host, capsys):
    put(host, STATUS, {"state": "failed", "exit_code": "three"}, 0o644)
    host.write_file(COMPLETE_MARKER, b"2024-01-01T00:00:00Z\n", 0o644)
    assert cli.main(["status", "--wait", "--timeout", "2", "--json", "--root", str(host.root)]) == 1
    shown = json.loads(capsys.readouterr().out)  # an error of ours, not an internal error
    assert shown["error"] == "failed" and "exit_code" in shown["message"] and STATUS in shown["message"]


def test_what_a_run_writes_reads_back_and_prints(host, capsys):
    written = {
        "state": st.FAILED, "operation": "bootstrap", "cluster_resource_id": "/c/1",
        "machine_name": "n1", "started": st.now_iso(0), "finished": st.now_iso(1),
        "duration_s": 1.25, "exit_code": 1, "dry_run": False, "mode": "concurrent",
        "pass": "full", "error": {"error": "auth", "message": "denied", "remedy": "log in"},
        "phases": [{"name": "arc", "branch": "identity", "status": "changed", "message": "",
                    "duration_s": 0.5, "changes": [{"what": "connect", "why": "not connected"}],
                    "unknown": [{"what": "x", "reason": "y"}]},
                   {"name": "cni", "branch": "install", "status": "failed", "changes": [],
                    "message": "boom"}],
        "owed": [restart("kubelet", "its config changed").to_dict()],
        "leftovers": ["a: b"], "kept": ["c: d"]}
    status_file = st.StatusFile(host)
    status_file.write(written)
    assert status_file.read()["phases"] == written["phases"]
    status_file.write(dict(written, error=None, operation=None))  # null is what we write too
    assert cli.main(["status", "--root", str(host.root)]) == 0
    assert "owed: restart kubelet (its config changed)" in capsys.readouterr().out


def test_an_interrupted_record_keeps_the_shape(host):
    # current() derives "interrupted" (with an error object) from a "running" record.
    st.StatusFile(host).write({"state": st.RUNNING, "operation": "bootstrap", "pid": 7,
                               "started": st.now_iso(0), "phases": []})
    status = st.StatusFile(host).current()
    assert status["state"] == st.INTERRUPTED
    assert st.StatusFile(host).read()["state"] == st.RUNNING  # derived, never written


# ---- the ledger -------------------------------------------------------------------------

BAD_LEDGERS = [
    ({"version": 1, "entries": [1, 2], "joined": {}}, "entries[0] is 1, expected an object"),
    ({"version": 1, "entries": [], "joined": ["x"]}, 'joined is ["x"], expected an object'),
    ({"version": 1, "entries": [{"step": "s", "kind": "file"}]}, "entries[0].id is missing"),
    ({"version": 1, "entries": [{"step": "s", "kind": "file", "id": "/a", "mode": "0644"}]},
     'entries[0].mode is "0644", expected an integer'),
    ({"version": 1, "owed": [{"kind": "restart", "unit": "kubelet"}]}, "owed[0].reason is missing"),
    ({"version": 1, "joined": {"facts": 3}}, "joined.facts is 3, expected an object or null"),
    ({"version": "1", "entries": []}, 'version is "1", expected an integer'),
    ({"version": 0, "entries": []}, "version is 0, expected 1"),
]


@pytest.mark.parametrize("content, field", BAD_LEDGERS)
def test_a_ledger_of_another_shape_is_refused_and_kept(host, content, field):
    # entries of numbers gave a TypeError; a "joined" list was taken as a ledger, and
    # unbootstrap then removed it.
    put(host, LEDGER, content, 0o600)
    before = open(host.path(LEDGER), "rb").read()
    with pytest.raises(FlexNodeError) as err:
        Ledger(host)
    assert LEDGER in err.value.message and names(err.value.message, field)  # the file, key, value
    assert f"mv {LEDGER} {LEDGER}.bad" in err.value.remedy
    assert open(host.path(LEDGER), "rb").read() == before


def test_a_ledger_from_a_newer_version_is_refused(host):
    # Version 99 with an unknown kind: unbootstrap undid nothing, said "complete" and
    # removed the ledger, the only record of what that version created.
    put(host, LEDGER, {"version": 99, "entries": [{"step": "x", "kind": "quantum", "id": "q"}],
                       "joined": {}}, 0o600)
    with pytest.raises(FlexNodeError) as err:
        Ledger(host)
    assert err.value.message.startswith(f"{LEDGER} is a ledger of version 99, written by a newer")
    assert "reads version 1" in err.value.message
    assert "keep " + LEDGER in err.value.remedy
    assert os.path.exists(host.path(LEDGER))


def test_an_entry_of_an_unknown_kind_is_refused(host):
    put(host, LEDGER, {"version": 1, "entries": [
        {"step": "arc", "kind": "arc_machine", "id": "/m"},
        {"step": "x", "kind": "quantum", "id": "q"}]}, 0o600)
    with pytest.raises(FlexNodeError) as err:
        open_ledger(host)
    assert 'entries[1].kind is "quantum" (id q)' in err.value.message
    assert all(str(kind) in err.value.message for kind in KINDS)  # the kinds it knows
    assert LEDGER in err.value.message and "newer" in err.value.remedy
    # The engine knows no kind of its own: the steps hand it theirs.
    assert Ledger(host).get("quantum", "q") is not None


def test_the_kinds_are_the_words_earlier_releases_wrote():
    """The ledger on disk keeps its words: a Kind is written, shown and compared as one."""
    assert sorted(KINDS) == [
        "agentpool_machine", "arc_machine", "artifact", "azcmagent_config", "azcmagent_connection",
        "cache_dir", "dir", "file", "kubelet_upgrade", "machine_goal", "node", "parent_dir", "role_assignment",
        "staging", "state_dir", "unit"]
    assert (json.dumps(Kind.ROLE_ASSIGNMENT), f"{Kind.FILE}", str(Kind.UNIT)) == (
        '"role_assignment"', "file", "unit")
    assert Kind("node") is Kind.NODE and Kind.NODE == "node"


def test_every_kind_the_steps_record_is_known():
    from aks_flex_node.steps.arc import CONFIG_KIND
    from aks_flex_node.steps.artifacts import ARTIFACT_KIND
    from aks_flex_node.steps.tracked import DIR_KINDS

    assert {CONFIG_KIND, ARTIFACT_KIND, *DIR_KINDS} <= KINDS


def test_what_the_ledger_writes_reads_back(host):
    ledger = open_ledger(host)
    for kind in sorted(KINDS):
        ledger.record("s", kind, f"/{kind}")
    assert {e["kind"] for e in json.loads(host.read_bytes(LEDGER))["entries"]} == set(KINDS)
    ledger.record("kubelet", "file", "/etc/default/kubelet", backup="/var/backup", mode=0o644)
    ledger.record("runc", "artifact", "runc", url="https://x/runc", members=["/usr/bin/runc"])
    ledger.owe([restart("kubelet", "its config changed")])
    ledger.set_joined(cluster_resource_id="/c/1", facts={"principal_id": "p"})
    again = open_ledger(host)
    assert again.get("file", "/etc/default/kubelet")["mode"] == 0o644
    assert again.obligations()[0].unit == "kubelet"
    assert again.joined["facts"] == {"principal_id": "p"}
    put(host, LEDGER, {"entries": []}, 0o600)  # no version: read as the current one
    assert Ledger(host).empty()


def test_the_maintainer_scripts_name_a_bad_status_and_a_newer_ledger(host):
    put(host, STATUS, {"state": "failed", "phases": 5}, 0o644)
    put(host, LEDGER, {"version": 2, "entries": []}, 0o600)
    bad = {b.path: b for b in node_files.state_problems(host)}
    assert names(bad[STATUS].problem, BAD_STATUS[0][1])  # phases, 5
    assert bad[LEDGER].problem.startswith("it is a ledger of version 2, written by a newer")


# ---- the lock ---------------------------------------------------------------------------


def test_a_directory_where_the_lock_belongs_is_named_with_what_to_do(host):
    # It came out as "check the file system ... (dmesg)", which does not help.
    os.mkdir(host.path(LOCK))
    with pytest.raises(StateWriteError) as err:
        with RunLock(host, "bootstrap"):
            pass
    real = host.path(LOCK)
    # the file, the system's reason, and the command that mends it
    assert err.value.code == "state-write"
    assert str(real) in err.value.message and "Is a directory" in err.value.message
    assert f"(mv {real} {real}.bad)" in err.value.remedy
    assert os.path.isdir(real)
