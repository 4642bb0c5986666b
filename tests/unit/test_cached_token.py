"""`aks-flex-node token` answered from its cache (aks_flex_node/cached_token.py): what it
loads, that it prints what token.py prints, and that whatever token.py would not use (or would
name as an error) is left to token.py, which then answers as it always has."""

import io
import json
import os
import pathlib
import stat
import subprocess
import sys
import time

import pytest

from aks_flex_node import cached_token, cli, paths
from aks_flex_node import token as token_cmd
from aks_flex_node.azure import himds
from aks_flex_node.commands import arguments
from tests.himds_fixtures import himds_node

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V1 = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                 "spec": {"interactive": False}})
MINTED = "tok-" + himds.AKS_RESOURCE  # what the stand-in hands out


@pytest.fixture
def node(tmp_path):
    """A node root whose config points at a HIMDS stand-in, with an empty state directory."""
    with himds_node(tmp_path) as standin:
        (standin.root / "var/lib/aks-flex-node").mkdir(parents=True, mode=0o700)
        standin.cache = standin.root / "var/lib/aks-flex-node/token-cache.json"
        yield standin


def write_cache(path, access_token="cached.tok-en", expires_in=3000, resource=himds.AKS_RESOURCE, raw=None):
    path.write_bytes(raw if raw is not None else json.dumps(
        {"resource": resource, "access_token": access_token, "expires_on": int(time.time()) + expires_in}).encode())
    path.chmod(0o600)


def cached_answer(args, environ):
    """(exit code or None, what the cached answer printed)."""
    out = io.StringIO()
    return cached_token.answer(args, environ, out), out.getvalue()


def full_answer(args, environ):
    """(exit code, stdout, stderr) of token.py, the path the kubelet took before."""
    out, err = io.StringIO(), io.StringIO()
    return token_cmd.main(args, environ, stdout=out, stderr=err), out.getvalue(), err.getvalue()


def through_the_cli(monkeypatch, capsys, argv, environ):
    """(exit code, stdout, stderr) of cli.main(argv) with exactly `environ` set."""
    for name in ("AKS_FLEX_NODE_ROOT", "KUBERNETES_EXEC_INFO", "AKS_FLEX_NODE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code = cli.main(argv)
    done = capsys.readouterr()
    return code, done.out, done.err


# --- what a hit loads -------------------------------------------------------------------

def modules_after(code, argv, env):
    probe = code + "\nsys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    done = subprocess.run([sys.executable, "-c", probe, *argv], env=env, cwd="/", capture_output=True, text=True,
                          timeout=60)
    assert "\nMODULES " in done.stderr, done.stderr
    return done, set(done.stderr.rsplit("\nMODULES ", 1)[1].split())


def test_a_hit_loads_nothing_beyond_json_os_and_time(node):
    """Issue 30: the kubelet's call, `aks-flex-node token` with the cache filled, loads no
    module that `import json, os, time` does not (json loads re, re loads enum), and of ours
    only the cached answer's own small modules. It was 27 more (argparse, enum's users,
    pathlib, gettext, locale, errno...)."""
    write_cache(node.cache)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": REPO, "AKS_FLEX_NODE_ROOT": str(node.root),
           "KUBERNETES_EXEC_INFO": V1}
    # os.fdopen imports io when it runs, and Python 3.14 no longer loads io at its start
    # (Ubuntu 26.04's stack): what os's own functions load is os's.
    _, allowed = modules_after("import sys, json, os, time\nos.fdopen(os.open(os.devnull, os.O_RDONLY), 'rb').close()",
                               [], env)
    done, loaded = modules_after("import sys\nfrom aks_flex_node.cli import main\ncode = main()", ["token"], env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["token"] == "cached.tok-en"
    ours = {m for m in loaded if m.split(".")[0] == "aks_flex_node"}
    assert sorted(loaded - allowed - ours) == []
    assert ours == {"aks_flex_node", "aks_flex_node.cli", "aks_flex_node.cached_token", "aks_flex_node.paths",
                    "aks_flex_node.access_token", "aks_flex_node.host", "aks_flex_node.host.careful_read"}
    assert node.requests == []


def test_a_miss_through_the_cli_still_mints_and_fills_the_cache(node, monkeypatch, capsys):
    code, out, err = through_the_cli(monkeypatch, capsys, ["token"], {"AKS_FLEX_NODE_ROOT": str(node.root)})
    assert code == 0, err
    assert json.loads(out)["status"]["token"] == MINTED and len(node.requests) == 2
    code, again, _ = through_the_cli(monkeypatch, capsys, ["token"], {"AKS_FLEX_NODE_ROOT": str(node.root)})
    assert code == 0 and again == out and len(node.requests) == 2  # the cached answer


# --- the same credential as token.py ------------------------------------------------------

@pytest.mark.parametrize("exec_info", [None, "", V1, json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                                  "kind": "ExecCredential"})])
@pytest.mark.parametrize("flags", ["none", "--root", "--root=", "--config"])
def test_the_credential_is_the_one_token_py_prints(node, exec_info, flags):
    write_cache(node.cache, expires_in=1000)
    environ = {} if exec_info is None else {"KUBERNETES_EXEC_INFO": exec_info}
    if flags == "none":
        environ["AKS_FLEX_NODE_ROOT"] = str(node.root)
        args = []
    elif flags == "--root":
        args = ["--root", str(node.root)]
    elif flags == "--root=":
        args = [f"--root={node.root}"]
    else:  # a hit reads no config: token.py does not look at it either
        environ["AKS_FLEX_NODE_ROOT"] = str(node.root)
        args = ["--config", str(node.root / "no-such.conf")]
    code, fast = cached_answer(args, environ)
    full_code, full, err = full_answer(args, environ)
    assert (code, full_code) == (0, 0), err
    assert fast == full
    assert json.loads(fast)["status"]["token"] == "cached.tok-en" and node.requests == []


def test_the_cache_is_where_paths_puts_it():
    for root in ("/", "/srv/node", "relative/root", "", pathlib.Path("/srv/other/")):
        assert cached_token.cache_path(root) == str(paths.Paths(root).real(paths.TOKEN_CACHE))


def test_the_spelled_constants_agree_with_their_owners():
    assert cached_token.AKS_RESOURCE == himds.AKS_RESOURCE
    assert cached_token.ROOT_ENV == arguments.ROOT_ENV


def test_the_cache_token_py_writes_is_the_one_the_cached_answer_reads(node):
    code, minted, err = full_answer([], {"AKS_FLEX_NODE_ROOT": str(node.root)})
    assert code == 0, err
    code, cached = cached_answer([], {"AKS_FLEX_NODE_ROOT": str(node.root)})
    assert code == 0 and cached == minted and len(node.requests) == 2


# --- what the cached answer leaves to token.py ----------------------------------------------

def plant(node, tmp_path, what):
    """Make the cache something token.py does not use; return a check that what it pointed
    at (for a link) is untouched."""
    cache = node.cache
    if what == "symlink":
        target = tmp_path / "elsewhere.json"
        write_cache(target, access_token="planted")
        cache.symlink_to(target)
        return lambda: json.loads(target.read_text())["access_token"] == "planted"
    if what == "foreign-owner":
        if os.geteuid() != 0:
            pytest.skip("giving the cache to another user needs root")
        write_cache(cache, access_token="planted")
        os.chown(cache, 65534, 65534)
    elif what in ("group-writable", "world-writable", "group-readable"):
        write_cache(cache, access_token="planted")
        cache.chmod({"group-writable": 0o620, "world-writable": 0o602, "group-readable": 0o640}[what])
    elif what == "oversize":  # a valid entry padded past the read's bound
        body = json.dumps({"resource": himds.AKS_RESOURCE, "access_token": "planted",
                           "expires_on": int(time.time()) + 3000})
        write_cache(cache, raw=(body[:-1] + " " * cached_token.MAX_BYTES + "}").encode())
    elif what == "expired":
        write_cache(cache, access_token="planted", expires_in=-10)
    elif what == "within-the-margin":
        write_cache(cache, access_token="planted", expires_in=cached_token.EARLY_EXPIRY_SECONDS - 1)
    elif what == "other-audience":
        write_cache(cache, access_token="planted", resource="https://management.azure.com/")
    elif what == "corrupt-json":
        write_cache(cache, raw=b'{"resource": "' + himds.AKS_RESOURCE.encode() + b'", "access_token": "planted"')
    elif what == "deeply-nested":
        write_cache(cache, raw=b"[" * 5000)
    elif what == "not-utf8":
        write_cache(cache, raw=b'{"access_token": "\xff"}')
    elif what == "fifo":
        os.mkfifo(cache, 0o600)
    elif what == "directory":
        cache.mkdir(mode=0o700)
    return lambda: True


REFUSED = ["symlink", "foreign-owner", "group-writable", "world-writable", "group-readable", "oversize", "expired",
           "within-the-margin", "other-audience", "corrupt-json", "deeply-nested", "not-utf8", "fifo", "directory"]


@pytest.mark.parametrize("what", REFUSED)
def test_a_cache_token_py_would_not_use_is_left_to_it(node, tmp_path, monkeypatch, capsys, what):
    """The cached answer prints nothing and returns None; through the CLI, token.py then
    mints a token from HIMDS (two round trips) and hands it out, as it did before there was
    a cached answer; the planted token is never printed."""
    untouched = plant(node, tmp_path, what)
    environ = {"AKS_FLEX_NODE_ROOT": str(node.root), "KUBERNETES_EXEC_INFO": V1}
    assert cached_answer([], environ) == (None, "")
    code, out, err = through_the_cli(monkeypatch, capsys, ["token"], environ)
    assert code == 0, err
    assert json.loads(out)["status"]["token"] == MINTED and len(node.requests) == 2
    assert "planted" not in out + err and "Traceback" not in err
    assert untouched()


def test_a_deeply_nested_cache_is_a_miss_for_token_py_too(node):
    """token.py read the cache with json.loads and caught ValueError, KeyError and TypeError:
    a nested entry (a 5,000-deep list) raised RecursionError, a traceback instead of a token.
    The one reader (cached_token.read) now takes it as a miss."""
    write_cache(node.cache, raw=b"[" * 5000)
    code, out, err = full_answer([], {"AKS_FLEX_NODE_ROOT": str(node.root)})
    assert code == 0, err
    assert json.loads(out)["status"]["token"] == MINTED
    assert json.loads(node.cache.read_text())["access_token"] == MINTED  # replaced
    assert stat.S_IMODE(node.cache.stat().st_mode) == 0o600


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--root"], ["--root", ""], ["--root", "-x"], ["--root="],
                                  ["--root", "/a", "--root", "/b"], ["--ro", "/x"], ["extra"], ["--verbose"]])
def test_flags_the_cached_answer_does_not_read_are_left_to_token_py(node, args):
    write_cache(node.cache)
    assert cached_answer(args, {"AKS_FLEX_NODE_ROOT": str(node.root)}) == (None, "")


BAD_EXEC_INFO = {
    "a-list": "[]", "null": "null", "not-json": "{",
    "v1alpha1": json.dumps({"apiVersion": "client.authentication.k8s.io/v1alpha1", "kind": "ExecCredential"}),
    "kind-pod": json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "Pod"}),
    "nested-5000-deep": "[" * 5000,
}


@pytest.mark.parametrize("exec_info", BAD_EXEC_INFO.values(), ids=list(BAD_EXEC_INFO))
def test_an_exec_info_token_py_refuses_is_refused_by_name_through_the_cli(node, monkeypatch, capsys, exec_info):
    """A hit does not hide a bad KUBERNETES_EXEC_INFO: the cached answer leaves it to
    token.py, which names it (exit 1, nothing on stdout, HIMDS not asked). A 5,000-deep
    list was a RecursionError traceback before."""
    write_cache(node.cache)
    environ = {"AKS_FLEX_NODE_ROOT": str(node.root), "KUBERNETES_EXEC_INFO": exec_info}
    assert cached_answer([], environ) == (None, "")
    code, out, err = through_the_cli(monkeypatch, capsys, ["token"], environ)
    assert (code, out) == (1, "")
    assert "KUBERNETES_EXEC_INFO" in err and "Traceback" not in err and len(err) < 1000
    assert node.requests == []
