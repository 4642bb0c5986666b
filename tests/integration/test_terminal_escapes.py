"""Issue 26 defect 9: text from the network or the disk (an archive member's name, an ARM
error message) never reaches the terminal with its control characters raw: every line we
print shows them escaped (`\\x1b`), and the JSON output escapes them as JSON does."""

import io
import json
import tarfile

from tests import digest_fixtures, harness

ESC = "\x1b"
CLEAR = "\x1b[2J"  # erase the screen
TITLE = "\x1b]0;pwned\x07"  # set the terminal's title (OSC ... BEL)
CNI = "cni-plugins-linux-amd64-v1.9.1.tgz"


def cni_tarball(path):
    """A CNI tarball whose first member is a symlink named with a screen-clearing escape."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"{CLEAR}bridge")
        info.mtime, info.type, info.linkname = 1700000000, tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
        data = b"#!/bin/sh\nexit 0\n"
        info = tarfile.TarInfo("loopback")
        info.mtime, info.mode, info.size = 1700000000, 0o755, len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def assert_escaped(text, raw, where):
    assert ESC not in text and "\x07" not in text, f"a raw control character in {where}: {text!r}"
    assert raw.replace(ESC, "\\x1b").replace("\x07", "\\x07") in text, f"{where} lacks the escaped form: {text!r}"


def serve(node, path):
    """The mirror serves `path` as CNI 1.9.1, pinned through the operator's door to a build
    of their own (tests/digest_fixtures.py), so the archive is read and its member named."""
    node.emu.admin("POST", "artifacts", {"name": CNI, "path": str(path)})
    pin = digest_fixtures.line("cni", "1.9.1", path.read_bytes())
    harness.write_config(node.root, node.emu, node.wrapper, digests=[pin])


def test_an_archive_member_name_with_escapes_is_shown_escaped(node, tmp_path):
    serve(node, cni_tarball(tmp_path / CNI))
    proc = node.cli("bootstrap", "--phase", "cni")
    assert proc.returncode != 0
    assert ESC not in proc.stdout
    assert_escaped(proc.stderr, CLEAR, "stderr")

    status = node.cli("status")
    assert ESC not in status.stderr
    assert_escaped(status.stdout, CLEAR, "status")
    shown = node.cli("status", "--json")
    assert ESC not in shown.stdout and "\\u001b[2J" in shown.stdout
    assert CLEAR in json.loads(shown.stdout)["error"]["message"]  # the JSON keeps the value, escaped


def test_an_arm_error_message_with_escapes_is_shown_escaped(node):
    message = f"The cluster {CLEAR}is gone{TITLE}"
    node.emu.faults([{"match": {"server": "arm", "path_regex": "managedClusters", "method": "GET"},
                      "respond": {"status": 400, "body": {"error": {"code": "BadRequest", "message": message}}}}])
    proc = node.cli("bootstrap")
    assert proc.returncode != 0
    assert ESC not in proc.stdout
    assert_escaped(proc.stderr, CLEAR, "stderr")
    assert_escaped(proc.stderr, TITLE, "stderr")
    shown = node.cli("bootstrap", "--json")
    assert ESC not in shown.stdout + shown.stderr
