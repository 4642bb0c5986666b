"""`aks-flex-node token` against a loopback HIMDS stand-in, with a temp root."""

import datetime
import io
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from aks_flex_node import token as token_cmd
from aks_flex_node.azure import himds
from tests.himds_fixtures import NODE_KEY_DIR, himds_node

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def node(tmp_path):
    """A node root with a key dir, a HIMDS stand-in and a config pointing at it."""
    with himds_node(tmp_path, "subscription_id = 00000000-0000-0000-0000-000000000000\n") as standin:
        yield standin


def run(root, environ=None, argv=None):
    out, err = io.StringIO(), io.StringIO()
    env = {"AKS_FLEX_NODE_ROOT": str(root)} if environ is None else environ
    code = token_cmd.main(argv or [], env, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def parse_ts(value):
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def test_default_is_v1beta1_with_expiry_five_minutes_early(node):
    code, out, err = run(node.root)
    assert code == 0, err
    cred = json.loads(out)
    assert cred["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert cred["kind"] == "ExecCredential"
    assert cred["status"]["token"] == "tok-" + himds.AKS_RESOURCE
    expires_on = int(time.time()) + 3599
    assert abs(parse_ts(cred["status"]["expirationTimestamp"]) - (expires_on - 300)) <= 3
    assert node.requests[0]["query"]["resource"] == "6dae42f8-4368-4678-94ff-3960e28e3630"


@pytest.mark.parametrize("version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"])
def test_api_version_follows_kubernetes_exec_info(node, version):
    info = {"apiVersion": version, "kind": "ExecCredential", "spec": {"interactive": False}}
    code, out, err = run(node.root, {"AKS_FLEX_NODE_ROOT": str(node.root), "KUBERNETES_EXEC_INFO": json.dumps(info)})
    assert code == 0, err
    assert json.loads(out)["apiVersion"] == version


def test_unknown_exec_api_version_is_refused_by_name(node):
    info = {"apiVersion": "client.authentication.k8s.io/v1alpha1"}
    code, out, err = run(node.root, {"AKS_FLEX_NODE_ROOT": str(node.root), "KUBERNETES_EXEC_INFO": json.dumps(info)})
    assert code == 1 and out == ""
    assert "KUBERNETES_EXEC_INFO" in err and "apiVersion = 'client.authentication.k8s.io/v1alpha1'" in err
    assert node.requests == []


def test_cache_is_reused_and_is_root_only(node):
    code, first, _ = run(node.root)
    assert code == 0
    requests_after_first = len(node.requests)
    assert requests_after_first == 2  # challenge + token
    code, second, _ = run(node.root)
    assert code == 0
    assert len(node.requests) == requests_after_first  # served from the cache
    assert json.loads(second)["status"] == json.loads(first)["status"]
    cache = node.root / "var/lib/aks-flex-node/token-cache.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    # No temp files left; the single flight's lock stays (removing it would race a waiter), 0600.
    assert sorted(p.name for p in cache.parent.iterdir()) == ["token-cache.json", "token-cache.json.lock"]
    assert stat.S_IMODE((cache.parent / "token-cache.json.lock").stat().st_mode) == 0o600


def test_cache_with_five_minutes_or_less_left_is_not_used(node):
    cache = node.root / "var/lib/aks-flex-node/token-cache.json"
    cache.parent.mkdir(parents=True, mode=0o700)
    cache.write_text(json.dumps({"resource": himds.AKS_RESOURCE, "access_token": "old", "expires_on": int(time.time()) + 299}))
    cache.chmod(0o600)
    code, out, _ = run(node.root)
    assert code == 0
    assert json.loads(out)["status"]["token"] != "old"
    assert len(node.requests) == 2
    assert json.loads(cache.read_text())["access_token"] == "tok-" + himds.AKS_RESOURCE


def test_cache_with_more_than_five_minutes_left_is_used(node):
    cache = node.root / "var/lib/aks-flex-node/token-cache.json"
    cache.parent.mkdir(parents=True, mode=0o700)
    expires_on = int(time.time()) + 400
    cache.write_text(json.dumps({"resource": himds.AKS_RESOURCE, "access_token": "cached", "expires_on": expires_on}))
    cache.chmod(0o600)
    code, out, _ = run(node.root)
    assert code == 0 and node.requests == []
    status = json.loads(out)["status"]
    assert status["token"] == "cached"
    assert parse_ts(status["expirationTimestamp"]) == expires_on - 300


def test_group_readable_cache_is_not_trusted(node):
    cache = node.root / "var/lib/aks-flex-node/token-cache.json"
    cache.parent.mkdir(parents=True, mode=0o700)
    cache.write_text(json.dumps({"resource": himds.AKS_RESOURCE, "access_token": "planted", "expires_on": int(time.time()) + 9999}))
    cache.chmod(0o644)
    code, out, _ = run(node.root)
    assert code == 0
    assert json.loads(out)["status"]["token"] != "planted"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600  # replaced by a proper one


def test_unreachable_himds_exits_75_without_output(node):
    node.__exit__(None, None, None)  # stop the stand-in: nothing listens any more
    code, out, err = run(node.root)
    assert code == 75
    assert out == ""
    assert node.endpoint in err and "himdsd" in err  # where it asked, and the service to check


def test_refused_key_exits_1_and_token_never_on_stderr(node, tmp_path):
    node.realm = str(tmp_path / "outside.key")
    (tmp_path / "outside.key").write_text("x")
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert repr(node.realm) in err and os.path.realpath(node.root / NODE_KEY_DIR.lstrip("/")) in err


def test_root_flag_and_explicit_config(node, tmp_path):
    other = tmp_path / "other.conf"
    other.write_text((node.root / "etc/aks-flex-node/aks-flex-node.conf").read_text())
    code, out, err = run(node.root, environ={}, argv=["--root", str(node.root), "--config", str(other)])
    assert code == 0, err
    assert json.loads(out)["status"]["token"]


def test_missing_explicit_config_is_an_error(node, tmp_path):
    code, out, err = run(node.root, argv=["--config", str(tmp_path / "nope.conf")])
    assert code == 1 and out == ""
    assert f"--config {str(tmp_path / 'nope.conf')!r}" in err


def test_relative_key_dir_is_refused_by_name(node):
    conf = node.root / "etc/aks-flex-node/aks-flex-node.conf"
    conf.write_text(f"himds_endpoint = {node.endpoint}\nhimds_key_dir = tokens\n")
    code, _, err = run(node.root)
    assert code == 1
    assert "himds_key_dir = 'tokens'" in err and str(conf) in err


def test_subprocess_prints_credential_and_imports_no_azure_sdk(node):
    probe = (
        "import sys, json\n"
        "from aks_flex_node import token\n"
        "code = token.main([], {'AKS_FLEX_NODE_ROOT': sys.argv[1]})\n"
        "assert not [m for m in sys.modules if m == 'azure' or m.startswith('azure.')], 'Azure SDK imported'\n"
        "assert 'validate' not in sys.modules, 'configobj validate imported'\n"
        "sys.exit(code)\n"
    )
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-c", probe, str(node.root)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["token"] == "tok-" + himds.AKS_RESOURCE
    assert "tok-" not in done.stderr


def test_cli_entry_point_imports_neither_the_sdk_nor_validate(node):
    """What kubelet runs: `python3 -m aks_flex_node token`, checked with -X importtime."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": REPO, "AKS_FLEX_NODE_ROOT": str(node.root)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "aks_flex_node", "token"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "ExecCredential"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not {m for m in imported if m == "azure" or m.startswith("azure.")}
    assert not {"validate", "configobj.validate", "aks_flex_node.config", "yaml"} & imported


def test_a_cache_in_the_way_does_not_stop_the_token(node, capsys):
    """Issue 9, defect 4: the cache is an optimisation; a path it cannot be written to (here
    a directory where the file goes) still gives the kubelet its token."""
    (node.root / "var/lib/aks-flex-node/token-cache.json").mkdir(parents=True)
    code, out, _ = run(node.root)
    assert code == 0 and json.loads(out)["status"]["token"]
    assert "token-cache.json" in capsys.readouterr().err  # the warning names the cache


def test_a_full_disk_does_not_stop_the_token(node, capsys):
    state = node.root / "var/lib/aks-flex-node"
    state.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k,mode=0700", "tmpfs", str(state)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        # Unbuffered: Python 3.14's larger default buffer (io.DEFAULT_BUFFER_SIZE, 128 KiB) would
        # hold the filler and raise ENOSPC on close, out of the try below.
        with open(state / "filler", "wb", buffering=0) as f:  # ENOSPC for the next write
            try:
                f.write(b"x" * 65536)
            except OSError:
                pass
        code, out, _ = run(node.root)
        assert code == 0 and json.loads(out)["status"]["token"]
        assert "token-cache.json" in capsys.readouterr().err  # the warning names the cache
        assert not (state / "token-cache.json").exists()
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def test_a_throttled_himds_exits_75_after_bounded_retries(node):
    # HIMDS answers 429 to everything: the plugin retries, then tells the kubelet to try later.
    # Bounded by count, not by a clock: HIMDS saw exactly himds.ATTEMPTS requests (a 429
    # ends its exchange at the first request) and the plugin says so. The time budget that
    # bounds the waits too is tests/unit/test_himds_retry.py's, on a fake clock.
    node.faults = [(429, {"Retry-After": "0"})] * 20
    code, out, err = run(node.root)
    assert code == 75 and out == ""
    assert "429" in err and str(himds.ATTEMPTS) in err
    assert len(node.requests) == himds.ATTEMPTS


def test_a_503_burst_still_gives_the_token(node):
    node.faults = [(503, {"Retry-After": "0"})] * 3
    code, out, _ = run(node.root)
    assert code == 0 and json.loads(out)["status"]["token"] == "tok-" + himds.AKS_RESOURCE


# --- bad inputs (tests/bad_inputs: files/token-config-*, env/exec-info-*) ---------------

def _conf(node):
    return node.root / "etc/aks-flex-node/aks-flex-node.conf"


def test_a_config_that_is_not_utf8_is_refused_by_file_and_line(node):
    """files/token-config-non-utf8: was a UnicodeDecodeError traceback."""
    _conf(node).write_bytes(b"[arc]\nhimds_endpoint = \xff\n")
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert str(_conf(node)) in err and "line 2" in err and "0xff" in err  # file, line, byte
    assert "Traceback" not in err and node.requests == []


def test_a_config_with_a_bom_is_still_read(node):
    _conf(node).write_bytes(b"\xef\xbb\xbf" + _conf(node).read_bytes())
    code, out, err = run(node.root)
    assert code == 0, err
    assert len(node.requests) == 2  # the endpoint of the file was used


def test_a_config_configobj_cannot_parse_names_the_file_and_line(node):
    _conf(node).write_text(f"[arc]\nhimds_endpoint = {node.endpoint}\nhimds_endpoint = {node.endpoint}\n")
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert f"{_conf(node)} line 3 = 'himds_endpoint = {node.endpoint}'" in err


def test_a_fifo_config_is_refused_without_waiting_for_a_writer(node):
    conf = _conf(node)
    conf.unlink()
    os.mkfifo(conf, 0o600)
    probe = ("import sys\nfrom aks_flex_node import token\n"
             "sys.exit(token.main([], {'AKS_FLEX_NODE_ROOT': sys.argv[1]}))\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-c", probe, str(node.root)], env=env, capture_output=True,
                          text=True, timeout=20)
    assert done.returncode == 1 and done.stdout == ""
    assert str(conf) in done.stderr and "FIFO" in done.stderr  # the file, and what it is


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_config_others_can_write_is_not_trusted(node, mode):
    """files/token-config-world-writable: StrictModes on the exec plugin's path too; before,
    the plugin followed whatever himds_endpoint the file held."""
    conf = _conf(node)
    conf.chmod(mode)
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert str(conf) in err and f"{mode:04o}" in err
    assert f"chmod go-w {conf}" in err  # the command that mends it
    assert node.requests == []  # HIMDS never asked


def test_a_config_in_a_directory_others_can_write_is_not_trusted(node):
    conf_dir = _conf(node).parent
    conf_dir.chmod(0o777)
    try:
        code, out, err = run(node.root)
    finally:
        conf_dir.chmod(0o755)
    assert code == 1 and out == ""
    assert f"chmod go-w {conf_dir}" in err and node.requests == []


@pytest.mark.parametrize("endpoint", ["http://10.0.0.5:40342/metadata/identity/oauth2/token",
                                      "http://himds.example.com/metadata/identity/oauth2/token"])
def test_a_himds_endpoint_off_this_machine_names_the_key_and_the_file(node, endpoint):
    _conf(node).write_text(f"[arc]\nhimds_endpoint = {endpoint}\n")
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert f"himds_endpoint = {endpoint!r}" in err and str(_conf(node)) in err


def test_a_himds_endpoint_that_is_no_url_names_the_key_and_the_file(node):
    _conf(node).write_text("[arc]\nhimds_endpoint = http://[::1/token\n")
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert "himds_endpoint = 'http://[::1/token'" in err and str(_conf(node)) in err


@pytest.mark.parametrize("raw", ["[]", '"client.authentication.k8s.io/v1"', "null", "42"])
def test_exec_info_that_is_not_an_object_is_refused_by_name(node, raw):
    """env/exec-info-a-list: `[]` used to mean "no version" and the default was used."""
    code, out, err = run(node.root, {"AKS_FLEX_NODE_ROOT": str(node.root), "KUBERNETES_EXEC_INFO": raw})
    assert code == 1 and out == ""
    assert f"KUBERNETES_EXEC_INFO = {raw!r}" in err
    assert node.requests == []


@pytest.mark.parametrize("info, said", [
    ({}, "apiVersion = None"),
    ({"kind": "ExecCredential"}, "apiVersion = None"),
    ({"apiVersion": "client.authentication.k8s.io/v1"}, "kind = None"),
    ({"apiVersion": "client.authentication.k8s.io/v1", "kind": "Pod"}, "kind = 'Pod'"),
])
def test_exec_info_without_a_known_version_and_kind_is_refused(node, info, said):
    code, out, err = run(node.root, {"AKS_FLEX_NODE_ROOT": str(node.root), "KUBERNETES_EXEC_INFO": json.dumps(info)})
    assert code == 1 and out == ""
    assert "KUBERNETES_EXEC_INFO" in err and said in err and node.requests == []


@pytest.mark.parametrize("environ", [{}, {"KUBERNETES_EXEC_INFO": ""}])
def test_exec_info_absent_still_means_v1beta1(node, environ):
    code, out, err = run(node.root, dict(environ, AKS_FLEX_NODE_ROOT=str(node.root)))
    assert code == 0, err
    assert json.loads(out)["apiVersion"] == "client.authentication.k8s.io/v1beta1"


def test_reading_the_config_loads_neither_validate_nor_the_config_package(node):
    """StrictModes comes from aks_flex_node/strictmodes.py, outside the config package
    (whose __init__ imports configobj.validate and the loader)."""
    probe = (
        "import sys\n"
        "from aks_flex_node import token\n"
        "code = token.main([], {'AKS_FLEX_NODE_ROOT': sys.argv[1]})\n"
        "heavy = [m for m in sys.modules if m in ('validate', 'configobj.validate', 'aks_flex_node.config')\n"
        "         or m == 'azure' or m.startswith('azure.')]\n"
        "assert not heavy, heavy\n"
        "sys.exit(code)\n"
    )
    _conf(node).chmod(0o666)  # the StrictModes check runs and refuses
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-c", probe, str(node.root)], env=env, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1, done.stderr
    assert "chmod go-w" in done.stderr


def test_a_cache_hit_gives_the_identical_credential_and_imports_only_what_it_uses(node):
    """Issue 12: the kubelet meets the cache almost every time. A hit prints byte for byte
    what the HIMDS answer printed, and loads neither the HIMDS client (urllib.request, ssl),
    configobj, the StrictModes check, the atomic writer nor the Azure SDK."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": REPO, "AKS_FLEX_NODE_ROOT": str(node.root),
           "KUBERNETES_EXEC_INFO": json.dumps({"apiVersion": "client.authentication.k8s.io/v1",
                                               "kind": "ExecCredential", "spec": {"interactive": False}})}

    def token_process():
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "aks_flex_node", "token"],
                              env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                    if line.startswith("import time:")}
        return done.stdout, imported

    fresh, fresh_imports = token_process()
    assert len(node.requests) == 2 and "aks_flex_node.azure.himds" in fresh_imports
    cached, cached_imports = token_process()
    assert len(node.requests) == 2  # the cache answered
    assert cached == fresh
    assert json.loads(cached)["apiVersion"] == "client.authentication.k8s.io/v1"
    heavy = {"aks_flex_node.azure.himds", "urllib.request", "ssl", "http.client", "configobj",
             "aks_flex_node.strictmodes", "aks_flex_node.host.fs", "aks_flex_node.http_policy", "datetime"}
    assert not heavy & cached_imports, heavy & cached_imports
    assert not {m for m in cached_imports if m == "azure" or m.startswith("azure.")}


# Issue 26 defect 6: one bad HIMDS answer must not poison the cache. Every field of the
# answer is checked before it is cached or formatted; a bad one is a permanent error naming
# HIMDS, the field and the value, and nothing is cached.
NOW = int(time.time())
BAD_ANSWERS = {
    "expires_on-1e17": ({"expires_on": "1e17"}, "expires_on"),
    "expires_on-inf": ({"expires_on": "inf"}, "expires_on"),
    "expires_on-nan": ({"expires_on": "nan"}, "expires_on"),
    "expires_on-negative": ({"expires_on": "-1"}, "expires_on"),
    "expires_on-float": ({"expires_on": 1.5e9}, "expires_on"),
    "expires_on-bool": ({"expires_on": True}, "expires_on"),
    "expires_on-past": ({"expires_on": str(NOW - 3600)}, "expires_on"),
    "expires_on-72h": ({"expires_on": str(NOW + 72 * 3600)}, "expires_on"),
    "expires_in-1e17": ({"expires_on": None, "expires_in": "1e17"}, "expires_in"),
    "expires_in-huge": ({"expires_on": None, "expires_in": str(10**11)}, "expires_in"),
    "access_token-escape": ({"access_token": "\x1b[2Jtok"}, "access_token"),
    "access_token-space": ({"access_token": "tok en"}, "access_token"),
    "access_token-huge": ({"access_token": "a" * 100000}, "access_token"),
    "access_token-number": ({"access_token": 12345}, "access_token"),
}


@pytest.mark.parametrize("change,field", BAD_ANSWERS.values(), ids=list(BAD_ANSWERS))
def test_a_bad_himds_token_field_is_refused_by_name_and_not_cached(node, change, field):
    body = {"access_token": "tok-good", "expires_in": "3599", "expires_on": str(int(time.time()) + 3599),
            "token_type": "Bearer"}
    body.update(change)
    node.body = {k: v for k, v in body.items() if v is not None}
    code, out, err = run(node.root)
    assert code == 1 and out == ""
    assert "Traceback" not in err and "\x1b" not in err
    assert "HIMDS" in err and f"{field} = " in err
    assert len(err) < 2000  # the value is shown bounded
    assert not (node.root / "var/lib/aks-flex-node/token-cache.json").exists()
    with pytest.raises(himds.HimdsError) as raised:
        himds.parse_token(json.dumps(node.body).encode())
    assert raised.value.code == "bad-token-field" and raised.value.field == field

    node.body = None  # HIMDS mends: the next call gets a token at once
    code, out, err = run(node.root)
    assert code == 0, err
    assert json.loads(out)["status"]["token"] == "tok-" + himds.AKS_RESOURCE


POISONED_CACHE = {
    "expires_on-1e17": {"expires_on": 10**17},
    "expires_on-1e300-float": {"expires_on": 1e300},
    "expires_on-inf-string": {"expires_on": "inf"},
    "expires_on-72h": {"expires_on": NOW + 72 * 3600},
    "expires_on-negative": {"expires_on": -10**15},
    "access_token-escape": {"access_token": "\x1b[2Jplanted"},
    "access_token-object": {"access_token": {"a": 1}},
    "entry-a-list": None,
}


@pytest.mark.parametrize("change", POISONED_CACHE.values(), ids=list(POISONED_CACHE))
def test_a_cache_entry_out_of_range_is_a_miss_not_a_traceback(node, change):
    cache = node.root / "var/lib/aks-flex-node/token-cache.json"
    cache.parent.mkdir(parents=True, mode=0o700)
    entry = {"resource": himds.AKS_RESOURCE, "access_token": "cached", "expires_on": int(time.time()) + 3000}
    if change is None:
        cache.write_text("[1, 2]")
    else:
        entry.update(change)
        cache.write_text(json.dumps(entry))
    cache.chmod(0o600)
    code, out, err = run(node.root)
    assert code == 0, err
    assert json.loads(out)["status"]["token"] == "tok-" + himds.AKS_RESOURCE  # minted anew
    assert len(node.requests) == 2
    assert json.loads(cache.read_text())["access_token"] == "tok-" + himds.AKS_RESOURCE


@pytest.mark.parametrize("planted", ["symlink", "fifo", "group-readable"])
def test_a_lock_file_planted_in_the_way_costs_only_the_single_flight(node, tmp_path, planted):
    """The single flight's lock is opened without following a link, without waiting on a
    FIFO, and only when it is ours and 0600: anything else is left alone and the token is
    minted without the lock."""
    from tests.waiting import returns

    state = node.root / "var/lib/aks-flex-node"
    state.mkdir(parents=True, mode=0o700)
    lock = state / "token-cache.json.lock"
    target = tmp_path / "outside"
    target.write_text("keep me")
    if planted == "symlink":
        lock.symlink_to(target)
    elif planted == "fifo":
        os.mkfifo(lock, 0o600)
    else:
        lock.write_text("")
        lock.chmod(0o640)
    code, out, err = returns(lambda: run(node.root), what="token with a planted lock")
    assert code == 0, err
    assert json.loads(out)["status"]["token"] == "tok-" + himds.AKS_RESOURCE
    assert target.read_text() == "keep me" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert lock.is_symlink() if planted == "symlink" else True
    assert stat.S_ISFIFO(lock.lstat().st_mode) if planted == "fifo" else True
