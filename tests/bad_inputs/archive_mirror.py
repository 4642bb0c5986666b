"""The mirror a "hostile archive" case is served from: one emulator (tests/emulator) for the
whole corpus run, started when the first such case needs it, where each case places the
archive its `archive` field describes under a CNI tarball name of its own version.

A case's `archive` field:
  {"entries": [[NAME, SPEC], ...]}  a tar.gz built by tests/archive_fixtures.py, SPEC one of
      {"text": T}, {"b64": B}, {"zeros": N} (a regular file), {"dir": true},
      {"symlink": TARGET}, {"hardlink": TARGET}, {"chardev": true}, {"fifo": true};
      with "repeat": N, the entry N times, "{i}" in NAME replaced by 0 to N-1
  {"raw_text": T}                   bytes that are no archive at all
  "cut": N                          (with entries) only the first N bytes of the archive

The case's node then runs `bootstrap --phase cni` against the emulator (its Azure, HIMDS
and mirror endpoints, and its CA), with `cni_version` set to the case's own version. Where
the configuration pins artifact digests (artifact_digests_file), the archive's sha256 is
pinned there, so what refuses it is the archive reader, not the digest.
"""

import atexit
import base64
import hashlib
import os
import shutil
import tarfile
import tempfile
import threading
import zlib

from tests.archive_fixtures import Zeros, tar_gz

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, "amd64")
PINS_PATH = "/etc/aks-flex-node/artifact-digests"
CA_NODE_PATH = "/etc/aks-flex-node/mirror-ca.pem"
_CONFIGSPEC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "aks_flex_node", "configspec.ini")
_TYPES = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "chardev": tarfile.CHRTYPE,
          "fifo": tarfile.FIFOTYPE, "dir": tarfile.DIRTYPE}

_lock = threading.Lock()
_emulator = None
_state_dir = None


def _mirror():
    global _emulator, _state_dir
    with _lock:
        if _emulator is None:
            from tests.emulator_fixtures import start_emulator

            _state_dir = tempfile.mkdtemp(prefix="bad-inputs-mirror-")
            _emulator = start_emulator(_state_dir)
            atexit.register(_stop)
        return _emulator


def _stop():
    if _emulator is not None:
        _emulator.stop()
    shutil.rmtree(_state_dir, ignore_errors=True)


def _expanded(entries):
    for name, member in entries:
        for i in range(member.get("repeat", 1)):
            yield name.replace("{i}", str(i)), member


def archive_bytes(spec):
    if "raw_text" in spec:
        return spec["raw_text"].encode("utf-8")
    entries = []
    for name, member in _expanded(spec["entries"]):
        if "text" in member:
            entries.append((name, member["text"].encode("utf-8")))
        elif "b64" in member:
            entries.append((name, base64.b64decode(member["b64"])))
        elif "zeros" in member:
            entries.append((name, Zeros(int(member["zeros"]))))
        else:
            kind = next(k for k in _TYPES if k in member)
            link = member[kind] if isinstance(member[kind], str) else ""
            entries.append((name, _TYPES[kind], link))
    data = tar_gz(entries)
    return data[:spec["cut"]] if "cut" in spec else data


def serve(case, work):
    """Place the case's archive on the mirror: the configuration values and files (as the
    corpus writes them: node paths) that point the node at it."""
    emu = _mirror()
    n = zlib.crc32(case.id.encode())
    version = f"9.{n % 10000}.{n // 10000 % 10000}"  # a name of the case's own
    name = f"cni-plugins-linux-{ARCH}-v{version}.tgz"
    data = archive_bytes(case.archive)
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data)
    emu.admin("POST", "artifacts", {"name": name, "path": path})
    with open(emu.ca_bundle, encoding="utf-8") as f:
        ca = f.read()
    config = {"arm_endpoint": emu.arm, "authority_host": emu.authority, "himds_endpoint": emu.himds,
              "artifact_mirror": emu.artifacts, "ca_bundle": CA_NODE_PATH, "cni_version": version,
              "pause_image": emu.pause_image}
    files = [{"path": CA_NODE_PATH, "text": ca, "mode": "0644"}]
    with open(_CONFIGSPEC, encoding="utf-8") as f:
        pins = "\nartifact_digests_file" in f.read()
    if pins:
        config["artifact_digests_file"] = PINS_PATH
        files.append({"path": PINS_PATH, "mode": "0644",
                      "text": f"cni {version} {ARCH} sha256:{hashlib.sha256(data).hexdigest()}\n"})
    return config, files
