"""The fast subset of the fault matrix (tests/faults; `make faults` runs all of it): a clean
run as the reference, kill -9 at two deterministic points, a full /etc, a throttled ARM, a
truncated artifact, two bootstraps at once, in agent-pool mode a clean run (its own
reference) and a throttled listBootstrapData, and a kubelet upgrade (its own reference: one
that succeeds) killed in the restart after the switch. Each must converge once the fault is gone and
leave no file of ours corrupted (half-written while failing, or unlike the clean run's)."""

import os

import pytest

from tests.faults import cells, matrix

FAST = [c for c in cells.all_cells() if c.fast]
# One xdist worker runs the module: its fixture runs every cell at once in its own pool
# (spread over workers, each would run them all again).
pytestmark = pytest.mark.xdist_group("fault-subset")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the ENOSPC cell mounts a tmpfs: needs root")
    parent = str(tmp_path_factory.mktemp("faults"))
    # Keyed by group and name: every join mode has its own "clean run".
    return {f"{r.group}: {r.name}": r for r in matrix.run_cells(FAST, workers=len(FAST), parent=parent)}


def test_the_subset_has_a_cell_of_every_group():
    assert {c.group for c in FAST} == {"baseline", "kill -9", "ENOSPC", "endpoint", "artifact", "concurrency",
                                           "agent-pool", "upgrade"}


@pytest.mark.parametrize("name", [f"{c.group}: {c.name}" for c in FAST])
def test_cell_converges_and_corrupts_nothing(results, name):
    r = results[name]
    assert r.converged, "; ".join(r.notes)
    assert r.corrupted == [], r.corrupted
    assert r.unbootstrap_clean is not False, "; ".join(r.notes)


def test_kill_9_is_followed_by_a_clean_unbootstrap(results):
    for r in results.values():
        if r.group == "kill -9" or r.name.startswith("kill -9"):
            assert r.exit_failing == ["kill -9"] and r.unbootstrap_clean, (r.name, r.notes)


def test_a_full_etc_fails_with_a_clear_error_then_converges(results):
    [r] = [r for r in results.values() if r.group == "ENOSPC"]
    assert r.exit_failing and r.exit_failing[0] not in (0, None)
    assert not any(n.startswith("UNCLEAR") for n in r.notes), r.notes
    assert any("No space left on device" in n for n in r.notes), r.notes


def test_throttling_is_retried_within_the_run(results):
    r = results["endpoint: arm 429"]
    assert r.retries == str(cells.BURST) and r.exit_failing == [], (r.retries, r.exit_failing, r.notes)


def test_two_bootstraps_at_once_one_waits_its_turn(results):
    r = results["concurrency: two bootstraps"]
    assert r.exit_failing in ([], [75]), r.notes


def test_the_judge_flags_half_written_and_differing_files_only():
    """What `files corrupted` counts: a file neither as before nor as the clean run made it
    while failing, a file unlike the clean run's after convergence; not old or new content,
    not run state, not a temp file of a write in progress."""
    ref = cells.CellResult("baseline", cells.REFERENCE, "none")
    ref.final = {"/etc/a": ("file", "new-a", 0o644, 3), "/etc/b": ("file", "new-b", 0o644, 3),
                 "/var/lib/aks-flex-node/status.json": ("file", "s1", 0o644, 2)}
    r = cells.CellResult("kill -9", "x", "x")
    r.pre = {"/etc/a": ("file", "old-a", 0o644, 3)}
    r.failing = [{"/etc/a": ("file", "old-a", 0o644, 3), "/etc/b": ("file", "half-b", 0o644, 1),
                  "/etc/.c.abc.tmp": ("file", "junk", 0o600, 1),
                  "/var/lib/aks-flex-node/status.json": ("file", "s0", 0o644, 2)}]
    r.final = {"/etc/a": ("file", "new-a", 0o644, 3), "/etc/b": ("file", "new-b", 0o600, 3),
               "/var/lib/aks-flex-node/status.json": ("file", "s2", 0o644, 2)}
    matrix.evaluate(r, ref)
    assert r.corrupted == ["/etc/b (differs from the clean run)", "/etc/b (half-written while failing: 1 bytes)"]
    assert any(n.startswith("stray 1: /etc/.c.abc.tmp") for n in r.notes), r.notes


def test_a_new_table_keeps_the_hand_written_hostile_inputs_section(tmp_path):
    """`make faults` rewrites docs/reliability.md's table; the prose after it that says what
    each class of hostile input gets is not the run's to drop."""
    doc = tmp_path / "reliability.md"
    doc.write_text("# old table\n\n| a |\n\n## Hostile inputs\n\nA bomb is refused.\n")
    result = cells.CellResult("endpoint", "arm 429", "429 x3")
    matrix.write_document([result], 1.0, path=str(doc))
    text = doc.read_text()
    assert "| endpoint: arm 429 |" in text and "| a |" not in text
    assert text.endswith("\n## Hostile inputs\n\nA bomb is refused.\n")
    doc.unlink()
    matrix.write_document([result], 1.0, path=str(doc))
    assert "## Hostile inputs" not in doc.read_text()
