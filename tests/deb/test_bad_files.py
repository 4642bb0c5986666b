"""Files broken by hand, a disk fault or an interrupted run, met by the real maintainer
scripts (tests/deb/sandbox.py: debconf's frontend, a private debconf database, ucf, the
library from the work tree). Whatever the file, the postinst ends without a traceback: a
debconf note names the file and what to do, a join that was due is left pending (exit 0
in the default mode), and the client secret is in no debconf database file.
"""

import os
import stat
import subprocess

import pytest

from aks_flex_node import config
from tests.deb import sandbox as sb_mod
from tests.deb.test_maintscripts import CLUSTER, joined_state, loopback_cloud, preseed_join

SECRET = "s3cr3t-value"


def files_holding(root, needle):
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    if needle.encode() in f.read():
                        found.append(os.path.relpath(path, root))
    return found


def assert_secret_not_in_debconf(sb):
    assert not [p.name for p in sb.db_files() if SECRET.encode() in p.read_bytes()]
    assert sb.get("sp_client_secret") == ""
    # Nowhere but in its own file, if that could take it.
    assert set(files_holding(sb.root, SECRET)) <= {sb_mod.SECRET.lstrip("/")}


def assert_noted(result, path, *words):
    """The run ended cleanly, with the debconf note (noninteractive prints it on the
    terminal: stdout) naming the file and what to do, and the same on stderr."""
    assert "Traceback" not in result.stderr, result.stderr
    assert f"Unusable file: {path}" in result.stdout, (result.stdout, result.stderr)
    assert "What to do:" in result.stdout
    note = " ".join(result.stdout.split())
    for word in words:
        assert word in note, (word, note)
    assert f"{path} cannot be used" in result.stderr


def configured(sb):
    """An install's starting point: the answers preseeded (with a new secret), the file
    pointing the custom cloud at a closed port, as test_maintscripts does."""
    preseed_join(sb)
    loopback_cloud(sb)


def put(sb, node_path, content):
    path = sb.path(node_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def make_dir(sb, node_path):
    path = sb.path(node_path)
    path.mkdir(parents=True)
    (path / "something").write_text("not ours\n")
    return path


def latin1_line(sb):
    path = sb.path(sb_mod.CONF)
    path.write_bytes(path.read_bytes() + b"# edited by Ren\xe9\n")


def nul_bytes(sb):
    path = sb.path(sb_mod.CONF)
    path.write_bytes(path.read_bytes()[:200] + b"\0\0\x7fELF\0" + path.read_bytes()[200:])


def conf_is_dir(sb):
    sb.path(sb_mod.CONF).unlink()
    make_dir(sb, sb_mod.CONF)


def conf_dangles(sb):
    sb.path(sb_mod.CONF).unlink()
    sb.path(sb_mod.CONF).symlink_to("/nonexistent/aks-flex-node.conf")


def conf_loops(sb):
    # Root reads a mode 000 file; a symlink loop is what root cannot read either.
    sb.path(sb_mod.CONF).unlink()
    sb.path(sb_mod.CONF).symlink_to("aks-flex-node.conf")


def conf_dir_is_file(sb):
    conf_dir = sb.path(sb_mod.CONF).parent
    for child in conf_dir.iterdir():
        child.unlink()
    conf_dir.rmdir()
    conf_dir.write_text("not a directory\n")


def unparsable(sb):
    path = sb.path(sb_mod.CONF)
    path.write_text(path.read_text().replace("[cluster]", "[cluster\nthis line is not a key"))


def secret_is_dir(sb):
    make_dir(sb, sb_mod.SECRET)


def ledger_not_json(sb):
    put(sb, sb_mod.LEDGER, b'{"version": 1, "entries": [')


def ledger_a_list(sb):
    put(sb, sb_mod.LEDGER, b"[]\n")


def ledger_is_dir(sb):
    make_dir(sb, sb_mod.LEDGER)


def status_not_json(sb):
    put(sb, sb_mod.STATUS, b"\xff\xfe garbage")


def status_a_list(sb):
    put(sb, sb_mod.STATUS, b'["succeeded"]\n')


def pending_is_dir(sb):
    make_dir(sb, sb_mod.PENDING)


def state_dir_is_file(sb):
    put(sb, sb_mod.STATE, b"not a directory\n")


# (break the root, the file the note names, words the note has, the join can stay pending)
BROKEN = {
    "config not UTF-8": (latin1_line, sb_mod.CONF, ["not UTF-8 text (byte 0xe9", "iconv"], True),
    "config binary": (nul_bytes, sb_mod.CONF, ["a binary file"], True),
    "config a directory": (conf_is_dir, sb_mod.CONF, ["a directory, not a file", "mv "], True),
    "config a dangling symlink": (conf_dangles, sb_mod.CONF, ["/nonexistent/aks-flex-node.conf"], True),
    "config unreadable (a symlink loop)": (conf_loops, sb_mod.CONF, ["cannot be reached"], True),
    "config does not parse": (unparsable, sb_mod.CONF, ["line "], True),
    "config directory a file": (conf_dir_is_file, "/etc/aks-flex-node", ["a file, not a directory"], True),
    "secret a directory": (secret_is_dir, sb_mod.SECRET, ["a directory", "give the secret again"], True),
    "ledger not JSON": (ledger_not_json, sb_mod.LEDGER, ["not a ledger"], True),
    "ledger a JSON list": (ledger_a_list, sb_mod.LEDGER, ["not a ledger"], True),
    "ledger a directory": (ledger_is_dir, sb_mod.LEDGER, ["a directory"], True),
    "status not JSON": (status_not_json, sb_mod.STATUS, ["not JSON", "rm -r"], True),
    "status a JSON list": (status_a_list, sb_mod.STATUS, ["a JSON list"], True),
    "pending mark a directory": (pending_is_dir, sb_mod.PENDING, ["a directory", "rm -r"], False),
    "state directory a file": (state_dir_is_file, sb_mod.STATE, ["a file, not a directory"], False),
}


def snapshot(sb, node_path):
    """What is at node_path, to show it was left as it is."""
    path = sb.path(node_path)
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_dir():
        return ("dir", sorted(p.name for p in path.iterdir()))
    return ("file", path.read_bytes()) if path.exists() else None


@pytest.mark.parametrize("case", list(BROKEN))
def test_first_install_on_a_bad_file_notes_it_and_leaves_the_join_pending(sandbox, case):
    breaker, path, words, can_pend = BROKEN[case]
    configured(sandbox)
    breaker(sandbox)
    before = snapshot(sandbox, path)
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert_noted(result, path, *words)
    assert snapshot(sandbox, path) == before  # left as it is, for the admin
    assert not sandbox.path(sb_mod.COMPLETE).exists()  # no join was attempted
    if can_pend:
        assert sandbox.path(sb_mod.PENDING).is_file()
        assert ["start", "aks-flex-node-agent.service"] in sandbox.invoked()
    assert_secret_not_in_debconf(sandbox)


@pytest.mark.parametrize("case", ["config not UTF-8", "ledger a JSON list"])
def test_fail_install_mode_fails_on_a_bad_file_with_the_note_and_nothing_pending(sandbox, case):
    breaker, path, words, _can_pend = BROKEN[case]
    configured(sandbox)
    sandbox.preseed({"on_join_failure": ("select", "fail-install")})
    breaker(sandbox)
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 1
    assert_noted(result, path, *words)
    assert not sandbox.path(sb_mod.PENDING).exists()
    assert sandbox.invoked() == []
    assert_secret_not_in_debconf(sandbox)


def test_a_non_utf8_value_is_not_copied_into_debconf_and_the_secret_still_leaves(sandbox):
    # The reported defect: a hand edit in Latin-1 on a line the config script reads.
    configured(sandbox)
    conf = sandbox.path(sb_mod.CONF)
    conf.write_bytes(conf.read_bytes().replace(b"machine_name =", b"machine_name = caf\xe9", 1))
    before = conf.read_bytes()
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert_noted(result, sb_mod.CONF, "not UTF-8 text (byte 0xe9")
    assert conf.read_bytes() == before
    assert sandbox.get("machine_name") == ""  # debconf holds UTF-8 only
    assert sandbox.path(sb_mod.PENDING).is_file()
    # The new secret went to its own file, so fixing the configuration is all that is left.
    assert sandbox.path(sb_mod.SECRET).read_text() == SECRET + "\n"
    assert_secret_not_in_debconf(sandbox)


def test_a_non_utf8_preseeded_secret_is_cleared_from_debconf(sandbox):
    configured(sandbox)
    lines = f"aks-flex-node aks-flex-node/sp_client_secret password {SECRET}\xe9\n".encode("latin-1")
    subprocess.run(["debconf-set-selections"], input=lines, check=True, env=sandbox.env(),
                   capture_output=True, timeout=60)
    result = sandbox.run("postinst", "configure", "")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert "sp_client_secret: the answer is not UTF-8" in result.stderr
    assert not [p.name for p in sandbox.db_files() if SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize("content", [None, b"", b"\n"])
def test_a_missing_or_empty_secret_file_is_noted_and_the_join_left_pending(sandbox, content):
    configured(sandbox)
    sandbox.preseed({"sp_client_secret": ("password", "")})  # keep the stored one: there is none
    config.write(sb_mod.CONF, {"sp_client_secret_file": sb_mod.SECRET}, root=str(sandbox.root))
    if content is not None:
        put(sandbox, sb_mod.SECRET, content).chmod(0o600)
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert_noted(result, sb_mod.SECRET, "does not exist" if content is None else "it is empty",
                 "give the secret again")
    assert sandbox.path(sb_mod.PENDING).is_file()


def test_an_empty_configuration_file_starts_again_from_the_default(sandbox):
    preseed_join(sandbox, join="false")
    put(sandbox, sb_mod.CONF, b"")
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert "Unusable file" not in result.stdout
    assert sandbox.conf_value("cluster_resource_id") == CLUSTER
    assert sandbox.conf_value("sp_client_secret_file") == sb_mod.SECRET
    assert stat.S_IMODE(os.stat(sandbox.path(sb_mod.CONF)).st_mode) == 0o600
    assert_secret_not_in_debconf(sandbox)


def test_a_stale_pending_mark_meets_a_bad_file_on_upgrade_and_stays(sandbox):
    configured(sandbox)
    put(sandbox, sb_mod.PENDING, b"")
    latin1_line(sandbox)
    result = sandbox.run("postinst", "configure", "0.0.9")
    assert result.returncode == 0, result.stderr
    assert_noted(result, sb_mod.CONF, "not UTF-8")
    assert sandbox.path(sb_mod.PENDING).is_file()
    assert not sandbox.path(sb_mod.COMPLETE).exists()
    assert_secret_not_in_debconf(sandbox)


def test_a_plain_upgrade_notes_a_bad_configuration_and_joins_nothing(sandbox):
    configured(sandbox)
    latin1_line(sandbox)
    result = sandbox.run("postinst", "configure", "0.0.9")
    assert result.returncode == 0, result.stderr
    assert_noted(result, sb_mod.CONF, "not UTF-8")
    assert not sandbox.path(sb_mod.PENDING).exists()  # no join was due
    assert sandbox.invoked() == []


def test_join_false_notes_a_bad_configuration_and_cancels_nothing_it_cannot(sandbox):
    preseed_join(sandbox, join="false")
    loopback_cloud(sandbox)
    latin1_line(sandbox)
    make_dir(sandbox, sb_mod.PENDING)
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert_noted(result, sb_mod.CONF, "not UTF-8")
    assert f"Unusable file: {sb_mod.PENDING}" in result.stdout
    assert sandbox.path(sb_mod.PENDING).is_dir()  # someone else's: kept
    assert_secret_not_in_debconf(sandbox)


# ---- the other scripts ------------------------------------------------------------------


@pytest.mark.parametrize("case, expected", [
    ("config not UTF-8", "aks-flex-node.conf cannot be used: not UTF-8 text"),
    ("ledger a JSON list", "ledger.json cannot be used: it is not a ledger"),
    ("status not JSON", "status.json cannot be used: it is not JSON"),
    ("pending mark a directory", "join-pending cannot be used: a directory"),
])
def test_prerm_remove_never_fails_on_a_bad_file(sandbox, case, expected):
    joined_state(sandbox)
    ledger = sandbox.path(sb_mod.LEDGER).read_bytes()
    BROKEN[case][0](sandbox)
    result = sandbox.run("prerm", "remove")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr
    if case == "config not UTF-8":
        assert sandbox.path(sb_mod.LEDGER).read_bytes() == ledger  # what is left stays listed
    if case == "pending mark a directory":
        # The mark it cannot remove does not stop the leave (lifecycle.leave): the ledger
        # is walked and the node unjoined; the directory is someone else's and stays.
        assert "the pending join is not cancelled" in result.stderr
        assert not sandbox.path(sb_mod.LEDGER).exists()
        assert sandbox.path(sb_mod.PENDING).is_dir()


def test_purge_keeps_directories_that_are_not_ours_and_removes_the_rest(sandbox):
    preseed_join(sandbox, join="false")
    assert sandbox.run("postinst", "configure", "").returncode == 0
    sandbox.path(sb_mod.SECRET).unlink()
    make_dir(sandbox, sb_mod.SECRET)
    put(sandbox, sb_mod.LEDGER, b"[]")
    result = sandbox.run("postrm", "purge")
    assert result.returncode == 0, result.stderr
    assert f"{sandbox.path(sb_mod.SECRET)} is a directory" in result.stderr
    assert (sandbox.path(sb_mod.SECRET) / "something").exists()
    assert not sandbox.path(sb_mod.CONF).exists()
    assert not sandbox.path(sb_mod.STATE).exists()


def test_purge_with_a_file_where_the_configuration_directory_belongs(sandbox):
    preseed_join(sandbox, join="false")
    put(sandbox, "/etc/aks-flex-node", b"not a directory\n")
    result = sandbox.run("postrm", "purge")
    assert result.returncode == 0, result.stderr


def test_the_config_script_ignores_a_file_that_is_not_utf8(sandbox):
    configured(sandbox)
    conf = sandbox.path(sb_mod.CONF)
    conf.write_bytes(conf.read_bytes().replace(b"machine_name =", b"machine_name = caf\xe9", 1))
    result = sandbox.run("config", "configure", "")
    assert result.returncode == 0, result.stderr
    assert sandbox.get("machine_name") == ""
