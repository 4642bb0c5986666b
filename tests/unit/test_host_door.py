"""One door to the host: file reads, writes, stats, listings, removals and subprocesses go
through aks_flex_node/host/ (cloud-init's disable_subp_usage is the model: a test fails on a
call that goes around it).

The call sites outside host/ that are not there yet are counted per module in KNOWN; a new
one anywhere, or one more in a listed module, fails, and a module that loses some must
lower its count here (so the list only shrinks). `host.path()` counts too: it hands out a
real path, which is how a module ends up doing its own I/O.
"""

import ast
import collections
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "aks_flex_node"
OS_CALLS = {"open", "stat", "lstat", "fstat", "listdir", "scandir", "rmdir", "remove", "unlink", "rename", "replace",
            "makedirs", "mkdir", "chmod", "chown", "symlink", "readlink", "walk", "fdopen", "mkfifo", "utime",
            "link", "truncate", "access", "statvfs", "system", "popen", "spawnv", "execv", "execvp"}
OS_PATH_CALLS = {"exists", "isfile", "isdir", "islink", "getsize", "lexists", "realpath", "ismount", "getmtime"}
SUBPROCESS_MODULES = {"shutil", "subprocess"}
# module (relative to aks_flex_node/) -> its calls around the door, as of 2026-11-27.
# Legitimate crossings are here too until host/ offers them: a real path handed to a
# library that opens it (the Downloader's cache, the kube client's certificate).
KNOWN = {
    "agent.py": 2,  # the fork's result pipe
    "azure/auth.py": 1,
    "azure/himds.py": 4,
    "commands/mirror.py": 1,  # mirror sync's Downloader: its work directory inside DIR
    "config/fileformat.py": 3,
    "config/importer.py": 5,
    "config/named_files.py": 2,
    "config/semantic.py": 3,
    "config/upstream.py": 2,
    "maintainer/debconf_answers.py": 3,
    "maintainer/debconf_channel.py": 3,  # debconf's file descriptors
    "lifecycle.py": 5,  # each state mark's real path, for writing_state's error (pending, leaving)
    "maintainer/maintscript.py": 6,
    "steps/preflight/checks.py": 6,
    "steps/context.py": 1,  # the Downloader's cache directory
    "steps/kubelet_auth.py": 1,  # the kubelet's certificate, for the kube client
    "strictmodes.py": 4,
    "token.py": 8,
}


def calls_around_the_door(tree):
    found = collections.Counter()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found["open()"] += 1
        elif isinstance(func, ast.Attribute):
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id == "os" and func.attr in OS_CALLS:
                found[f"os.{func.attr}"] += 1
            elif isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) \
                    and owner.value.id == "os" and owner.attr == "path" and func.attr in OS_PATH_CALLS:
                found[f"os.path.{func.attr}"] += 1
            elif isinstance(owner, ast.Name) and owner.id in SUBPROCESS_MODULES:
                found[f"{owner.id}.{func.attr}"] += 1
            elif func.attr == "path" and (getattr(owner, "id", None) == "host" or getattr(owner, "attr", None) == "host"):
                found["host.path"] += 1
    return found


def counts():
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("host/"):
            continue
        found = calls_around_the_door(ast.parse(path.read_text(), str(path)))
        if found:
            out[rel] = (sum(found.values()), dict(found))
    return out


def test_nothing_new_goes_around_the_host_door():
    now = counts()
    grown = {m: found for m, (n, found) in now.items() if n > KNOWN.get(m, 0)}
    assert grown == {}, "use aks_flex_node/host/ (Host's methods, careful_read) instead"
    shrunk = {m: (KNOWN[m], now.get(m, (0,))[0]) for m in KNOWN if now.get(m, (0,))[0] < KNOWN[m]}
    assert shrunk == {}, "fewer calls around the door now: lower KNOWN to match (it only shrinks)"


def test_the_door_check_sees_each_kind_of_call():
    tree = ast.parse("open(p)\nos.stat(p)\nos.path.isdir(p)\nsubprocess.run(a)\nshutil.rmtree(p)\n"
                     "ctx.host.path(p)\nhost.path(p)\nctx.host.read_bytes(p)\nos.path.join(a, b)\n")
    assert calls_around_the_door(tree) == {"open()": 1, "os.stat": 1, "os.path.isdir": 1, "subprocess.run": 1,
                                           "shutil.rmtree": 1, "host.path": 2}
