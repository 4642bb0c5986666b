"""The artifact mirror the e2e node downloads from: real runtime binaries, stand-in kubelet.

The emulator's artifact endpoint generates stand-ins for everything (tests/emulator/
artifacts.py); its containerd is a shell script that sleeps, which systemd would never see
ready (the node's containerd unit is Type=notify). So in the booted container:

- containerd, runc and the CNI plugins are Debian's own binaries (the .debs apt-get
  downloads, container.runtime_debs), repacked in the layout of the upstream release files
  (containerd-<v>-linux-<arch>.tar.gz with bin/, runc-v<v>.<arch>, cni-plugins-linux-<arch>-
  v<v>.tgz with ./<plugin>), each with its <name>.sha256: containerd really runs;
- anything else (the Kubernetes node tarball and its stand-in kubelet, which registers and
  heartbeats a Node with the emulator's apiserver) is fetched from the emulator and
  served as it is, checksum included.

It serves the flat names of the `artifact_mirror` setting (configspec: "<name>" and
"<name>.sha256"), over HTTPS with the emulator's own server certificate (127.0.0.1, signed
by the emulator's CA, which the node trusts through ca_bundle).
"""

import gzip
import hashlib
import http.server
import io
import pathlib
import re
import ssl
import subprocess
import tarfile
import tempfile
import threading

from tests import digest_fixtures

ARCH = "amd64"
_MTIME = 1700000000


def upstream_version(deb):
    """1.6.20 of a Debian version such as 1.6.20~ds1-1+b1 (epoch, ~ds and revision dropped)."""
    version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                             text=True).stdout.strip()
    match = re.match(r"^(?:\d+:)?(\d+\.\d+\.\d+)", version)
    if not match:
        raise ValueError(f"{deb}: version {version!r} does not start with x.y.z")
    return match.group(1)


def _tar_gz(members):
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.mtime = _MTIME
                if data is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    info.mode, info.size = 0o755, len(data)
                    tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _unpack(deb, into):
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    return pathlib.Path(into)


def repack(debs):
    """{file name: bytes} of the release-style files, and {component: version}."""
    files, versions = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = _unpack(debs["containerd"], pathlib.Path(tmp) / "containerd")
        version = versions["containerd"] = upstream_version(debs["containerd"])
        tools = sorted(p for p in (tree / "usr/bin").iterdir() if p.name.startswith(("containerd", "ctr")))
        files[f"containerd-{version}-linux-{ARCH}.tar.gz"] = _tar_gz(
            [("bin", None)] + [(f"bin/{p.name}", p.read_bytes()) for p in tools])

        tree = _unpack(debs["runc"], pathlib.Path(tmp) / "runc")
        version = versions["runc"] = upstream_version(debs["runc"])
        files[f"runc-v{version}.{ARCH}"] = (tree / "usr/sbin/runc").read_bytes()

        tree = _unpack(debs["containernetworking-plugins"], pathlib.Path(tmp) / "cni")
        version = versions["cni"] = upstream_version(debs["containernetworking-plugins"])
        plugins = sorted(p for p in (tree / "usr/lib/cni").iterdir() if p.is_file())
        files[f"cni-plugins-linux-{ARCH}-v{version}.tgz"] = _tar_gz(
            [(".", None)] + [(f"./{p.name}", p.read_bytes()) for p in plugins])
    return files, versions


# What preflight asks of the mirror (paths without their last /): its root, and /v2/.
PROBES = ("", "v2")

class Mirror:
    """A running HTTPS mirror: `url`, `versions`, `requests` (file names asked for)."""

    def __init__(self, debs, emulator):
        self.files, self.versions = repack(debs)
        self.emulator = emulator
        self.requests = []
        self.probes = []
        self._lock = threading.Lock()
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                name = self.path.lstrip("/").split("?")[0]
                status, body = mirror.lookup(name)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream" if status == 200 else "text/plain")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        state = pathlib.Path(emulator.state_dir)
        context.load_cert_chain(state / "server.pem", state / "server-key.pem")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="e2e-mirror", daemon=True)
        self.thread.start()

    def digests(self):
        """The digest lines of what it serves (artifact_digests_file, as an operator pins the
        builds of their own mirror): Debian's binaries repacked, the emulator's for the rest."""
        own = [digest_fixtures.line(artifact, version, self.files[digest_fixtures.FILENAMES[artifact].format(
            version=version, arch=ARCH)], ARCH) for artifact, version in self.versions.items()]
        return digest_fixtures.with_lines(own)

    def lookup(self, name):
        with self._lock:
            # Preflight asks the mirror's root (artifact-hosts) and, as the nodes' pause image
            # names this host, its /v2/ (image-registry) whether they answer: probes, not downloads.
            (self.probes if name.rstrip("/") in PROBES else self.requests).append(name)
        checksum = name.endswith(".sha256")
        base = name[: -len(".sha256")] if checksum else name
        if base in self.files:
            data = self.files[base]
            if checksum:
                return 200, f"{hashlib.sha256(data).hexdigest()}  {base}\n".encode()
            return 200, data
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
            return 404, f"no file {name!r}\n".encode()
        status, _headers, body = self.emulator.http("GET", f"{self.emulator.artifacts}/{name}")
        return status, body if isinstance(body, bytes) else str(body).encode()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
