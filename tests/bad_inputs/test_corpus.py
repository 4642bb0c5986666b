"""The bad-input corpus (tests/bad_inputs/data) as pytest tests: one per case.

The cases run in parallel once per session (the runner's thread pool, as `make
bad-inputs`), then each test reports its own case, so `make test` stays fast.
"""

import os
import tempfile

import pytest

from tests.bad_inputs import corpus, report
from tests.bad_inputs.node import debconf_tools_missing, snapshot

CASES = corpus.load()


@pytest.fixture(scope="session")
def outcomes(request):
    """The outcomes of the cases this session selected (all of them, or those -k chose),
    run at once in the runner's thread pool."""
    selected = [item.callspec.params["case"] for item in request.session.items
                if getattr(item, "callspec", None) and "case" in item.callspec.params
                and item.originalname == "test_bad_input"]
    ran, _notes = report.run_all(selected or CASES)
    return {o.case.id: o for o in ran}


# One xdist group: the cases run in one worker, whose session fixture runs them all at once
# in the runner's pool (split over workers, every worker would run every case).
@pytest.mark.xdist_group("bad-input-corpus")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, outcomes):
    if case.run == "postinst" and debconf_tools_missing():
        pytest.skip(f"missing {', '.join(debconf_tools_missing())}: `make test-deb` installs debconf's tools")
    outcome = outcomes[case.id]
    assert outcome.passed, outcome.explain()


# ---- the corpus itself ---------------------------------------------------------------------


def test_the_corpus_is_large_and_covers_every_family():
    families = corpus.families(CASES)
    assert len(CASES) >= 170
    assert {"config-values", "config-file", "files", "state", "cli", "upstream", "debconf", "env",
            # issue 26: hostile bytes from a mirror, from Azure and the API server, on the disk
            "hostile-archive", "hostile-cloud-value", "hostile-local-file", "identity"} <= set(families)


def test_every_configuration_key_has_a_bad_value():
    from aks_flex_node import config

    covered = {key for c in CASES if c.family == "config-values" for key in c.config}
    assert set(config.keys()) <= covered, sorted(set(config.keys()) - covered)


def test_every_command_has_a_bad_flag():
    commands = {"bootstrap", "unbootstrap", "status", "preflight", "token", "agent", "config", "upgrade", "version"}
    covered = {c.argv[0] for c in CASES if c.family == "cli" and c.argv}
    assert commands <= covered, sorted(commands - covered)


def test_the_snapshot_sees_a_new_path_a_mode_an_owner_and_a_content_change():
    from tests.bad_inputs.node import differences

    with tempfile.TemporaryDirectory() as root:
        for name in ("mode", "owner", "content"):
            with open(os.path.join(root, name), "w") as f:
                f.write("a")
            os.chmod(os.path.join(root, name), 0o600)
        before = snapshot(root)
        os.chmod(os.path.join(root, "mode"), 0o640)
        if os.geteuid() == 0:
            os.chown(os.path.join(root, "owner"), 1000, -1)
        with open(os.path.join(root, "content"), "a") as f:
            f.write("b")
        os.mkdir(os.path.join(root, "new"))
        changes = differences(before, snapshot(root))
        assert "changed /content (content)" in changes
        assert "changed /mode (mode: 0600->0640)" in changes
        assert "created /new (dir 0755)" in changes or "created /new (dir 0700)" in changes
        if os.geteuid() == 0:
            assert "changed /owner (uid)" in changes
        assert differences(before, snapshot(root), allowed=("/new", "/mode", "/owner", "/content")) == []
