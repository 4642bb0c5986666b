"""A private registry on the host's loopback for the registry-mirror scenario, and a CRI
client for the node's containerd.

    ca = TestCA(directory)                       # openssl: a CA and a server certificate for 127.0.0.1
    with Registry(directory, ca) as registry:    # Debian's docker-registry (the CNCF distribution registry), TLS
        image = oci_image(directory / "hello", {"hello.txt": b"hi\n"})   # an OCI layout from local files
        registry.push(image, "e2e/hello:1.0")    # Debian's skopeo
        pull_image(socket_path, "mcr.microsoft.com/e2e/hello:1.0")      # runtime.v1 ImageService/PullImage
    run_pod_sandbox(socket_path, "name", "uid")  # runtime.v1 RuntimeService/RunPodSandbox (the GPU scenario)

Nothing comes from outside: the image is built here, byte for byte, so its digest is known.

The CRI client speaks gRPC with Debian's python3-grpcio, the messages hand-encoded (two
string fields; the CRI's api.proto: kubernetes/cri-api pkg/apis/runtime/v1/api.proto,
PullImageRequest {ImageSpec image = 1; ...}, ImageSpec {string image = 1; ...},
PullImageResponse {string image_ref = 1;}; the sandbox calls' in sandbox_request), as
tests/emulator/kube_protobuf.py does the
Kubernetes protobuf: no generated code, no protoc.
"""

import gzip
import hashlib
import importlib.util
import io
import json
import os
import pathlib
import platform
import shutil
import socket
import subprocess
import tarfile

from tests.emulator import kube_protobuf
from tests.proxy_fixtures import free_port
from tests.waiting import wait_for

DOCKER_REGISTRY = "/usr/bin/docker-registry"
SKOPEO = "/usr/bin/skopeo"
OPENSSL = "/usr/bin/openssl"
PULL_IMAGE = "/runtime.v1.ImageService/PullImage"
RUN_POD_SANDBOX = "/runtime.v1.RuntimeService/RunPodSandbox"
STOP_POD_SANDBOX = "/runtime.v1.RuntimeService/StopPodSandbox"
REMOVE_POD_SANDBOX = "/runtime.v1.RuntimeService/RemovePodSandbox"
NAMESPACE_NODE = 2  # NamespaceMode NODE: the node's own namespace (api.proto, enum NamespaceMode)


def missing_tools():
    """What the scenario needs on the host and does not find (Debian's packages)."""
    missing = [name for name, path in (("docker-registry", DOCKER_REGISTRY), ("skopeo", SKOPEO),
                                       ("openssl", OPENSSL)) if not os.path.exists(path)]
    if importlib.util.find_spec("grpc") is None:
        missing.append("python3-grpcio")
    return missing


def _run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


class TestCA:
    """A throwaway CA and a server certificate for 127.0.0.1 it signed (Go checks the
    subjectAltName, never the common name)."""

    __test__ = False  # not a pytest class

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert, self.key = self.dir / "ca.crt", self.dir / "ca.key"
        self.server_cert, self.server_key = self.dir / "server.crt", self.dir / "server.key"
        _run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key, "-out", self.cert,
              "-days", "2", "-subj", "/CN=aks-flex-node e2e registry CA",
              "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        csr = self.dir / "server.csr"
        _run([OPENSSL, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", self.server_key, "-out", csr,
              "-subj", "/CN=127.0.0.1"])
        ext = self.dir / "server.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        _run([OPENSSL, "x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key, "-CAcreateserial",
              "-out", self.server_cert, "-days", "2", "-extfile", ext])


class Registry:
    """Debian's docker-registry on 127.0.0.1:<free port>, TLS from `ca`, storage in
    `directory`; its access log in `log` (each request line with its query)."""

    def __init__(self, directory, ca):
        self.dir = pathlib.Path(directory)
        self.ca = ca
        self.port = free_port()
        self.log = self.dir / "registry.log"
        self.process = None

    @property
    def origin(self):
        return f"https://127.0.0.1:{self.port}"

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "config.yml"
        # distribution's configuration (docs/configuration.md of distribution 2.8): JSON is YAML.
        config.write_text(json.dumps({
            "version": 0.1,
            "log": {"level": "info", "accesslog": {"disabled": False}},
            "storage": {"filesystem": {"rootdirectory": str(self.dir / "data")}},
            "http": {"addr": f"127.0.0.1:{self.port}",
                     "tls": {"certificate": str(self.ca.server_cert), "key": str(self.ca.server_key)}},
        }))
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([DOCKER_REGISTRY, "serve", str(config)], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT)

        def listening():
            if self.process.poll() is not None:
                raise AssertionError(f"docker-registry exited {self.process.returncode}:\n{self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        if not wait_for(listening, timeout=60, interval=0.1):
            raise AssertionError(f"docker-registry never listened on {self.port}:\n{self.log.read_text()}")
        return self

    def push(self, layout, reference):
        """skopeo copy of the OCI layout `layout` (its only image) to `reference` here."""
        certs = self.dir / "skopeo-certs"
        certs.mkdir(exist_ok=True)
        shutil.copy(self.ca.cert, certs / "ca.crt")
        # --insecure-policy: no signature policy to read (this host's /etc/containers is not ours).
        _run([SKOPEO, "--insecure-policy", "copy", "--dest-cert-dir", str(certs),
              f"oci:{layout.path}:{layout.tag}", f"docker://127.0.0.1:{self.port}/{reference}"])

    def requests(self):
        return self.log.read_text(errors="replace")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Layout:
    """An OCI image layout on disk holding one image: `path`, `tag`, and the digests a
    pull of it must give (`manifest_digest`, `config_digest`: CRI's image_ref)."""

    def __init__(self, path, tag, manifest_digest, config_digest):
        self.path, self.tag = path, tag
        self.manifest_digest, self.config_digest = manifest_digest, config_digest


def _blob(directory, data):
    digest = hashlib.sha256(data).hexdigest()
    (directory / "blobs/sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def node_arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def oci_image(path, files, tag="1.0", arch=None, cmd=("/hello.txt",), executables=()):
    """An OCI image layout (opencontainers/image-spec, image-layout.md) at `path` holding
    one image of one layer with `files` ({name: bytes}), for `arch` (the host's); `cmd` its
    config's Cmd, the files named in `executables` mode 0755 (the others 0644)."""
    path = pathlib.Path(path)
    (path / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o755 if name in executables else 0o644, 0
            tar.addfile(info, io.BytesIO(content))
    layer_tar = raw.getvalue()
    layer = _blob(path, gzip.compress(layer_tar, mtime=0))
    config = _blob(path, json.dumps({
        "architecture": arch or node_arch(), "os": "linux", "config": {"Cmd": list(cmd)},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer_tar).hexdigest()}"]},
    }, sort_keys=True).encode())
    manifest = _blob(path, json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}],
    }, sort_keys=True).encode())
    (path / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
        "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    return Layout(path, tag, manifest["digest"], config["digest"])


# ---- CRI over gRPC, hand-encoded ------------------------------------------------------------------


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string_field(number, text):
    data = text.encode()
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _message_field(number, message):
    return _varint(number << 3 | 2) + _varint(len(message)) + message


def _varint_field(number, value):
    return _varint(number << 3) + _varint(value)


def pull_request(image):
    """PullImageRequest{image: ImageSpec{image: `image`}}, no auth, no sandbox config."""
    spec = _string_field(1, image)
    return _varint(1 << 3 | 2) + _varint(len(spec)) + spec


def first_string(message):
    """Field 1 of a message whose field 1 is a string (PullImageResponse.image_ref)."""
    return kube_protobuf.fields(message).get(1, [b""])[0].decode()


class PullFailed(Exception):
    def __init__(self, image, code, details):
        super().__init__(f"PullImage {image}: {code}: {details}")
        self.image, self.code, self.details = image, code, details


def pull_image(socket_path, image, timeout=120):
    """The image_ref containerd's CRI image service answers for `image` (the path the
    kubelet pulls by); PullFailed with the gRPC status when it refuses."""
    import grpc

    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        call = channel.unary_unary(PULL_IMAGE, request_serializer=None, response_deserializer=None)
        try:
            return first_string(call(pull_request(image), timeout=timeout))
        except grpc.RpcError as err:
            raise PullFailed(image, err.code().name, err.details()) from None


def sandbox_request(name, uid, namespace="default"):
    """RunPodSandboxRequest{config: PodSandboxConfig{metadata: {name, uid, namespace},
    linux: {cgroup_parent, security_context: {namespace_options: {network: NODE}}}}}, no
    runtime_handler (the default runtime's, as for a pod that names no RuntimeClass). The
    cgroup parent is the slice the kubelet's systemd cgroup driver names for a BestEffort
    pod (kubepods-besteffort-pod<uid, - as _>.slice): runc's systemd driver takes nothing
    else. The node's network: no CNI configuration is needed for it (api.proto:
    PodSandboxConfig metadata = 1, linux = 8; LinuxPodSandboxConfig cgroup_parent = 1,
    security_context = 2; LinuxSandboxSecurityContext namespace_options = 1;
    NamespaceOption network = 1)."""
    metadata = _string_field(1, name) + _string_field(2, uid) + _string_field(3, namespace)
    slice_name = f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
    linux = _string_field(1, slice_name) + _message_field(2, _message_field(1, _varint_field(1, NAMESPACE_NODE)))
    return _message_field(1, _message_field(1, metadata) + _message_field(8, linux))


def _call(socket_path, method, request, timeout):
    import grpc

    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            return call(request, timeout=timeout)
        except grpc.RpcError as err:
            raise CriFailed(method, err.code().name, err.details()) from None


class CriFailed(Exception):
    def __init__(self, method, code, details):
        super().__init__(f"{method}: {code}: {details}")
        self.method, self.code, self.details = method, code, details


def run_pod_sandbox(socket_path, name, uid, timeout=240):
    """The pod sandbox ID containerd's CRI answers for a sandbox of the default runtime
    (RunPodSandboxResponse{pod_sandbox_id = 1}): the kubelet's first call for every pod."""
    return first_string(_call(socket_path, RUN_POD_SANDBOX, sandbox_request(name, uid), timeout))


def remove_pod_sandbox(socket_path, sandbox_id, timeout=120):
    """StopPodSandbox, then RemovePodSandbox (both: {pod_sandbox_id = 1})."""
    for method in (STOP_POD_SANDBOX, REMOVE_POD_SANDBOX):
        _call(socket_path, method, _string_field(1, sandbox_id), timeout)
