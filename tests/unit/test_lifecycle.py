"""The join lifecycle's own decisions and words (lifecycle.py), without a cluster."""

import io

import pytest

from aks_flex_node import lifecycle
from aks_flex_node.engine.undo import Leftover, UndoResult
from aks_flex_node.errors import ExitCode, TemporaryError
from aks_flex_node.host import Host

CLUSTER = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/aks-one"


def test_the_pending_mark_round_trip(tmp_path):
    host = Host(tmp_path)
    assert not lifecycle.is_pending(host)
    lifecycle.mark_pending(host)
    assert lifecycle.is_pending(host)
    assert (tmp_path / "var/lib/aks-flex-node/join-pending").stat().st_mode & 0o777 == 0o600
    assert lifecycle.clear_pending(host) is True
    assert lifecycle.clear_pending(host) is False


def test_a_leave_goes_on_past_a_pending_mark_it_cannot_remove(tmp_path, caplog):
    # A directory with content where the mark belongs: host.remove refuses it (no
    # recursive delete), and that must not stop prerm's unjoin before it reads the ledger.
    mark = tmp_path / "var/lib/aks-flex-node/join-pending"
    mark.mkdir(parents=True)
    (mark / "keep").write_text("x")
    with caplog.at_level("WARNING", logger="aks_flex_node"):
        assert lifecycle.leave(Host(tmp_path)) is None  # not joined: nothing to undo
    # a warning naming the mark, with what kept it there
    assert any(r.levelname == "WARNING" and "/var/lib/aks-flex-node/join-pending" in r.getMessage()
               and str(mark) in r.getMessage() for r in caplog.records)
    assert (mark / "keep").read_text() == "x"


def test_a_leave_names_the_cluster_or_lists_what_is_left():
    summary = {"machine_name": "node-1", "cluster_resource_id": CLUSTER, "kept": []}
    out = io.StringIO()
    lifecycle.report_leave((UndoResult([], [], []), summary), out)
    assert out.getvalue() == "aks-flex-node: node node-1 left aks-one\n"
    out = io.StringIO()
    lifecycle.report_leave((UndoResult([], [Leftover("/var/lib/kubelet", "still mounted")], []), summary), out)
    # each leftover named, and no claim that the node left cleanly
    assert "/var/lib/kubelet: still mounted" in out.getvalue() and "aks-one" not in out.getvalue()


def test_a_failed_join_in_fail_install_mode_clears_the_mark_and_fails(tmp_path):
    host = Host(tmp_path)
    lifecycle.mark_pending(host)
    out = io.StringIO()
    code = lifecycle.report_join(host, TemporaryError("ARM is down", remedy="wait"), lifecycle.FAIL, out)
    assert code == ExitCode.TEMPFAIL and not lifecycle.is_pending(host)
    assert "ARM is down" in out.getvalue() and "wait" in out.getvalue()  # the error and its remedy


def test_waiting_for_an_outcome_that_never_comes_says_why(tmp_path):
    host = Host(tmp_path)
    with pytest.raises(TemporaryError) as caught:
        lifecycle.wait_for_outcome(host, 0.01, poll=0.005)
    assert caught.value.code == "no-outcome" and "0 s" in caught.value.message  # the time waited
    lifecycle.mark_pending(host)
    with pytest.raises(TemporaryError) as caught:
        lifecycle.wait_for_outcome(host, 0.01, poll=0.005)
    assert caught.value.code == "join-pending" and caught.value.exit_code == ExitCode.TEMPFAIL
    assert lifecycle.last_status(host)["state"] == "unjoined"
