#!/usr/bin/env python3
"""Stand-in kubelet (stdlib only), packaged by the test emulator into the Kubernetes artifact.

`kubelet --version` prints `Kubernetes v<VERSION>`. Otherwise it reads the kubeconfig at
$FAKE_ROOT + --kubeconfig (JSON, or YAML when PyYAML is importable), authenticates like
client-go (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins):
a static token, or the user's exec plugin run with KUBERNETES_EXEC_INFO set, whose
ExecCredential must carry the configured apiVersion, cached until its expirationTimestamp
passes or the server answers 401. With the kubeconfig's CA it
POSTs its Node to `server` (name from --hostname-override, labels from --node-labels, taints
from --register-with-taints), then PATCHes status Ready=True every $FAKE_KUBELET_INTERVAL
seconds (default 2) until SIGTERM. Like the real one it registers once: a Node deleted
behind its back is not re-created. Problems are retried each interval (as systemd's
Restart=always would restart the real kubelet) and logged to $FAKE_STATE_DIR/kubelet.log;
its progress is in $FAKE_STATE_DIR/kubelet-status.json. A command in the kubeconfig with an
absolute path is run from $FAKE_ROOT when it exists there.

TLS bootstrap (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/;
kubernetes/kubernetes pkg/kubelet/certificate/bootstrap/bootstrap.go): with --bootstrap-kubeconfig,
when the --kubeconfig is missing or its client certificate is unreadable or expired, it makes an
EC P-256 key (kept in <cert-dir>/kubelet-client.key.tmp until issued, as the real one does) and a
CSR (CN system:node:<name>, O system:nodes) with the openssl CLI, POSTs a
certificates.k8s.io/v1 CertificateSigningRequest named node-csr-<digest> (signer
kubernetes.io/kube-apiserver-client-kubelet, usages digital signature + client auth) with the
bootstrap kubeconfig's token, polls it until issued ($FAKE_KUBELET_CSR_TIMEOUT s, default 60;
the real one watches, for up to an hour), stores cert+key as <cert-dir>/kubelet-client-<time>.pem
(0600) with the symlink kubelet-client-current.pem pointing at it (client-go
util/certificate/certificate_store.go; our link target is relative, the real one absolute), and
writes --kubeconfig (0600; cluster and CA from the bootstrap kubeconfig, client-certificate and
client-key = the symlink). --cert-dir defaults to /var/lib/kubelet/pki.
Rotation: rotateCertificates in the --config KubeletConfiguration (JSON, or YAML with PyYAML) or
--rotate-certificates (the flag wins, as kubelet flags do): at a deadline drawn uniformly in
70-90 % of the certificate's NotAfter - NotBefore (client-go util/certificate/certificate_manager.go
nextRotationDeadline), a new key and CSR (generateName csr-) authenticated by the current
certificate, then the symlink is switched; older files are kept, as the real store keeps them.
A certificate that expires anyway sends it back to TLS bootstrap (the real kubelet exits and is
restarted). kubelet-status.json has auth (x509, token, exec), bootstrapped, cert_serial,
cert_not_before, cert_not_after, rotation_deadline and rotations.

Its clock is the cluster's: the emulator's (tests/emulator/clock.py), which a test moves instead
of waiting. The stand-in reads it from the Date header of the apiserver's answers and judges
its certificate's expiry and rotation deadline, and dates its heartbeats, by it (`now`), as a
node whose clock is in sync with its cluster's would. How long it waits (the interval, the CSR
poll, how long the apiserver has been unreachable) stays on this machine's time.

A version listed in $FAKE_KUBELET_FAIL_VERSIONS (comma-separated) exits 1 at start: a
kubelet upgrade that does not come up (steps/kubelet_upgrade.py switches back).

Unlike the real one it gives up (exit 1) once the apiserver has been unreachable for
$FAKE_KUBELET_MAX_UNREACHABLE seconds (default 20) or its state directory is gone, so that a
kubelet a test forgot to stop does not outlive the emulator.
"""

import base64
import datetime
import email.utils
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

VERSION = "0.0.0"  # the emulator writes the artifact's version here
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")

_stop = False


class KubeletError(Exception):
    pass


# -- the node's clock: the cluster's --------------------------------------------------------

_clock_offset = 0.0  # the apiserver's Date minus this machine's time, as last learnt


def now():
    """Seconds since the epoch on this node's clock: this machine's time plus what the
    apiserver's Date header says the cluster's clock is ahead by."""
    return time.time() + _clock_offset


def learn_time(date):
    """Set the node's clock from an answer's Date header (RFC 9110 5.6.7, whole seconds). A
    difference under a second is the header's rounding, not a moved clock: ignored, so that
    an emulator whose clock nobody moved leaves this one on this machine's time."""
    global _clock_offset
    try:
        offset = email.utils.parsedate_to_datetime(date).timestamp() - time.time()
    except (TypeError, ValueError):
        return
    if abs(offset - _clock_offset) >= 1.0:
        _clock_offset = offset


def state_dir():
    return os.environ.get("FAKE_STATE_DIR")


def root_path(path):
    return os.path.join(os.environ.get("FAKE_ROOT", "/"), path.lstrip("/"))


def log(message):
    line = f"{datetime.datetime.now().strftime('%H:%M:%S.%f')[:-3]} kubelet[{os.getpid()}] {message}\n"
    d = state_dir()
    if d and os.path.isdir(d):
        with open(os.path.join(d, "kubelet.log"), "a") as f:
            f.write(line)
    else:
        sys.stderr.write(line)


def write_status(status):
    d = state_dir()
    if not d or not os.path.isdir(d):
        return
    path = os.path.join(d, "kubelet-status.json")
    with open(path + ".tmp", "w") as f:
        json.dump(status, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


BOOL_FLAGS = {"rotate-certificates"}  # pflag booleans: a bare flag is true and takes no value


def parse_args(argv):
    wanted = {"kubeconfig", "hostname-override", "node-labels", "register-with-taints", "node-ip",
              "bootstrap-kubeconfig", "cert-dir", "config"} | BOOL_FLAGS
    opts, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in BOOL_FLAGS and not eq:
                value = "true"
            elif not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value = argv[i + 1]
                i += 1
            if name in wanted:
                opts[name] = value
        i += 1
    return opts


def load_kubeconfig(path, what="kubeconfig"):
    real = root_path(path)
    try:
        with open(real) as f:
            text = f.read()
    except OSError as e:
        raise KubeletError(f"unable to load {what} {path} (at {real}): {e.strerror}")
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml  # only for YAML files; ours are JSON, which is YAML
    except ImportError:
        raise KubeletError(f"{what} {path} is not JSON and PyYAML is not available to read YAML")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeletError(f"{what} {path} is neither JSON nor valid YAML: {e}")


def _named(config, kind, name):
    for item in config.get(kind) or []:
        if item.get("name") == name:
            return item.get(kind[:-1]) or {}
    raise KubeletError(f"kubeconfig: no {kind[:-1]} named {name!r} in {kind}")


def resolve(config, kubeconfig_path):
    """(server, ssl_context, cluster, user_name, user) for the current context."""
    name = config.get("current-context")
    if not name:
        raise KubeletError("kubeconfig: current-context is not set")
    context = _named(config, "contexts", name)
    cluster = _named(config, "clusters", context.get("cluster"))
    user_name = context.get("user")
    user = _named(config, "users", user_name)
    server = cluster.get("server")
    if not server or not server.startswith("https://"):
        raise KubeletError(f"kubeconfig: cluster server {server!r} is not an https:// URL")
    if cluster.get("certificate-authority-data"):
        ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        ca = cluster["certificate-authority"]
        if not ca.startswith("/"):
            ca = os.path.join(os.path.dirname(kubeconfig_path), ca)
        ctx = ssl.create_default_context(cafile=root_path(ca))
    else:
        ctx = ssl.create_default_context()
    return server.rstrip("/"), ctx, cluster, user_name, user


def _parse_time(text):
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise KubeletError(f"exec plugin returned an invalid expirationTimestamp {text!r}: expected RFC 3339")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


class Credential:
    def __init__(self, user_name, user, cluster, kubeconfig_path, status):
        self.user_name, self.user, self.cluster = user_name, user, cluster
        self.kubeconfig_path = kubeconfig_path
        self.status = status
        self.token, self.expiry = None, None

    def client_certificate(self):
        """(certificate file, key file, temporary) as real paths, or None when the user has no
        client certificate. Inline *-data goes to a private temporary file (temporary=True: the
        caller removes it once ssl has loaded it)."""
        cert, key = self.user.get("client-certificate"), self.user.get("client-key")
        if cert or key:
            if not (cert and key):
                raise KubeletError(f"user {self.user_name!r}: client-certificate and client-key go together")
            return self._path(cert), self._path(key), False
        if self.user.get("client-certificate-data") and self.user.get("client-key-data"):
            fd, path = tempfile.mkstemp(prefix="kubelet-client-", suffix=".pem")
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(self.user["client-certificate-data"]))
                f.write(b"\n")
                f.write(base64.b64decode(self.user["client-key-data"]))
            return path, path, True
        return None

    def _path(self, path):
        if not path.startswith("/"):
            path = os.path.join(os.path.dirname(self.kubeconfig_path), path)
        return root_path(path)

    def kind(self):
        if self.user.get("token") or self.user.get("tokenFile"):
            return "token"
        return "exec" if "exec" in self.user else "x509"

    def get(self):
        """The bearer token, or None for a user that authenticates by client certificate only."""
        if self.user.get("token"):
            return self.user["token"]
        if self.user.get("tokenFile"):
            with open(root_path(self.user["tokenFile"])) as f:
                return f.read().strip()
        if "exec" not in self.user:
            if self.client_certificate_configured():
                return None
            raise KubeletError(f"user {self.user_name!r} has neither token, tokenFile, exec nor a client certificate")
        # client-go's credsExpired() is now().After(exp), with no skew margin (kubernetes/client-go
        # plugin/pkg/client/auth/exec/exec.go).
        if self.token is None or (self.expiry is not None and time.time() > self.expiry):
            self.token, self.expiry = self._run_plugin()
        return self.token

    def client_certificate_configured(self):
        return bool(self.user.get("client-certificate") or self.user.get("client-certificate-data"))

    def invalidate(self):
        self.token, self.expiry = None, None

    def _command(self, command):
        if command.startswith("/"):
            return root_path(command) if os.path.exists(root_path(command)) else command
        if "/" in command:  # relative to the kubeconfig's directory, as client-go does
            return root_path(os.path.join(os.path.dirname(self.kubeconfig_path), command))
        found = shutil.which(command)
        if not found:
            raise KubeletError(f"exec: executable {command} not found")
        return found

    def _run_plugin(self):
        spec = self.user["exec"]
        api_version = spec.get("apiVersion")
        if api_version not in EXEC_API_VERSIONS:
            raise KubeletError(f"exec plugin: invalid apiVersion {api_version!r}")
        if api_version.endswith("/v1") and not spec.get("interactiveMode"):
            raise KubeletError(f"interactiveMode must be specified for {self.user_name} to use exec "
                               "authentication plugin")
        if not spec.get("command"):
            raise KubeletError("exec plugin: command is empty")
        info = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        if spec.get("provideClusterInfo"):
            info["spec"]["cluster"] = {k: v for k, v in self.cluster.items()
                                       if k in ("server", "certificate-authority-data", "tls-server-name")}
        env = dict(os.environ)
        for item in spec.get("env") or []:
            env[item["name"]] = item["value"]
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        argv = [self._command(spec["command"])] + list(spec.get("args") or [])
        self.status["plugin_runs"] = self.status.get("plugin_runs", 0) + 1
        try:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        except OSError as e:
            raise KubeletError(f"exec: executable {spec['command']} could not run: {e}")
        except subprocess.TimeoutExpired:
            raise KubeletError(f"exec: executable {spec['command']} timed out after 60 s")
        if proc.stderr:
            log(f"exec plugin stderr: {proc.stderr.decode(errors='replace').strip()}")
        if proc.returncode != 0:
            raise KubeletError(f"exec: executable {spec['command']} failed with exit code {proc.returncode}")
        try:
            cred = json.loads(proc.stdout)
        except ValueError as e:
            raise KubeletError(f"exec plugin: decoding stdout: {e}")
        if cred.get("kind") != "ExecCredential":
            raise KubeletError(f"exec plugin: returned kind {cred.get('kind')!r}, expected ExecCredential")
        if cred.get("apiVersion") != api_version:
            raise KubeletError(f"exec plugin is configured to use API version {api_version}, plugin returned "
                               f"version {cred.get('apiVersion')}")
        status = cred.get("status")
        if not status:
            raise KubeletError("exec plugin didn't return a status field")
        if not status.get("token") and not (status.get("clientCertificateData") and status.get("clientKeyData")):
            raise KubeletError("exec plugin didn't return a token or cert/key pair")
        if not status.get("token"):
            raise KubeletError("exec plugin returned a client certificate: the stand-in kubelet supports tokens only")
        expiry = _parse_time(status["expirationTimestamp"]) if status.get("expirationTimestamp") else None
        log(f"exec plugin returned a token (expires {status.get('expirationTimestamp') or 'never'})")
        return status["token"], expiry


class ApiClient:
    def __init__(self, server, ctx, credential, contact):
        self.server, self.credential = server, credential
        self.contact = contact  # {"at": time of the last HTTP answer from the apiserver}
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                  urllib.request.HTTPSHandler(context=ctx))

    def call(self, method, path, body=None, content_type="application/json"):
        headers = {"Accept": "application/json", "User-Agent": f"kubelet/v{VERSION} (linux/amd64) stand-in"}
        token = self.credential.get()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=15) as resp:
                self.contact["at"] = time.time()
                learn_time(resp.headers.get("Date"))
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            self.contact["at"] = time.time()
            learn_time(e.headers.get("Date"))
            if e.code == 401:
                self.credential.invalidate()  # re-run the plugin for the next request (client-go exec.go)
            try:
                return e.code, json.loads(e.read() or b"null")
            except ValueError:
                return e.code, None


# -- client certificates: openssl CLI, the certificate store, TLS bootstrap, rotation ---------

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
# pkg/kubelet/certificate/bootstrap/bootstrap.go requestNodeCertificate: an ECDSA key needs no
# key encipherment.
CSR_USAGES = ["digital signature", "client auth"]
CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
DEFAULT_CERT_DIR = "/var/lib/kubelet/pki"
PAIR_PREFIX = "kubelet-client"


def openssl(args, data=None):
    """Run the openssl CLI (stdlib-only stand-in; openssl comes with ca-certificates on Debian),
    with no configuration file, so nothing of the host's openssl.cnf ends up in our requests."""
    binary = shutil.which("openssl")
    if not binary:
        raise KubeletError("openssl not found on PATH: the stand-in kubelet needs it for its client certificates")
    try:
        proc = subprocess.run([binary, *args], input=data, capture_output=True, timeout=30,
                              env={**os.environ, "OPENSSL_CONF": "/dev/null"})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KubeletError(f"openssl {args[0]} could not run: {e}")
    if proc.returncode != 0:
        raise KubeletError(f"openssl {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def cert_info(pem):
    """serial (hex), not_before and not_after (epoch seconds) of the first certificate in `pem`."""
    out = openssl(["x509", "-noout", "-serial", "-startdate", "-enddate"], pem).decode()
    fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    try:
        return {"serial": fields["serial"].strip().lower(),
                "not_before": ssl.cert_time_to_seconds(fields["notBefore"].strip()),
                "not_after": ssl.cert_time_to_seconds(fields["notAfter"].strip())}
    except (KeyError, ValueError) as e:
        raise KubeletError(f"cannot read the client certificate's dates: {e}")


def _iso(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_private(real_path, data):
    """Atomically write `data` readable by the owner only (0600) from the first byte on."""
    tmp = f"{real_path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, real_path)


class CertStore:
    """client-go util/certificate/certificate_store.go with pairNamePrefix kubelet-client:
    <dir>/kubelet-client-<time>.pem holds the certificate then the key, and
    <dir>/kubelet-client-current.pem is a symlink to the one in use."""

    def __init__(self, cert_dir):
        self.dir = cert_dir  # node path
        self.current = f"{cert_dir.rstrip('/')}/{PAIR_PREFIX}-current.pem"  # node path
        self.key_tmp = f"{cert_dir.rstrip('/')}/{PAIR_PREFIX}.key.tmp"

    def current_pem(self):
        """The current pair's PEM, or None when there is none (or it cannot be read)."""
        try:
            with open(root_path(self.current), "rb") as f:
                return f.read()
        except OSError:
            return None

    def update(self, cert_pem, key_pem):
        real_dir = root_path(self.dir)
        os.makedirs(real_dir, mode=0o755, exist_ok=True)
        name = f"{PAIR_PREFIX}-{time.strftime('%Y-%m-%d-%H-%M-%S', time.localtime(now()))}.pem"  # node's clock
        _write_private(os.path.join(real_dir, name), cert_pem.rstrip(b"\n") + b"\n" + key_pem)
        updated = os.path.join(real_dir, f"{PAIR_PREFIX}-updated.pem")
        try:
            os.unlink(updated)
        except FileNotFoundError:
            pass
        os.symlink(name, updated)  # relative: the same link works under any FAKE_ROOT
        os.replace(updated, root_path(self.current))
        return name


def new_key():
    """A new EC P-256 private key (PKCS#8 PEM)."""
    return openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])


def _csr_for(key_real_path, node_name):
    subject = f"/O=system:nodes/CN=system:node:{node_name}"
    csr_pem = openssl(["req", "-new", "-key", key_real_path, "-subj", subject])
    public = openssl(["pkey", "-in", key_real_path, "-pubout", "-outform", "DER"])
    return csr_pem, public


def digested_name(public_der, node_name, usages):
    """digestedName in pkg/kubelet/certificate/bootstrap/bootstrap.go: the same key, subject
    and usages give the same CSR name, so a restarted kubelet finds its earlier CSR."""
    h = hashlib.new("sha512_256")
    for part in [public_der, f"system:node:{node_name}".encode(), b"system:nodes"] + [u.encode() for u in usages]:
        h.update(base64.urlsafe_b64encode(part).rstrip(b"=") + b"|")
    return "node-csr-" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def request_certificate(client, key_real_path, node_name, name=None):
    """POST a CSR for the key in `key_real_path` and wait for its certificate (PEM bytes);
    client-go util/certificate/csr/csr.go RequestCertificate + WaitForCertificate."""
    csr_pem, public = _csr_for(key_real_path, node_name)
    meta = {"name": name} if name else {"generateName": "csr-"}
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": meta,
            "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": KUBELET_CLIENT_SIGNER,
                     "usages": CSR_USAGES}}
    code, csr = client.call("POST", CSR_PATH, body)
    if code == 409 and name:
        # A CSR of an earlier attempt with the same key: wait for it (csr.go ensureCompatible
        # compares the public keys; the signatures differ, ECDSA being randomised).
        code, csr = client.call("GET", f"{CSR_PATH}/{name}")
        if code == 200:
            theirs = openssl(["req", "-noout", "-pubkey"], base64.b64decode(csr["spec"]["request"]))
            if theirs != openssl(["pkey", "-in", key_real_path, "-pubout"]):
                raise KubeletError(f"certificate signing request {name} exists for another key")
    if code not in (200, 201):
        raise KubeletError(f"cannot create certificate signing request: HTTP {code}: {(csr or {}).get('message')}")
    name = csr["metadata"]["name"]
    log(f"certificate signing request {name} created")
    deadline = time.time() + float(os.environ.get("FAKE_KUBELET_CSR_TIMEOUT", "60"))
    while True:
        conditions = {c.get("type") for c in (csr.get("status") or {}).get("conditions") or []
                      if c.get("status", "True") == "True"}
        if "Denied" in conditions or "Failed" in conditions:
            verdict = "denied" if "Denied" in conditions else "failed"
            raise KubeletError(f"certificate signing request {name} is {verdict}")
        if (csr.get("status") or {}).get("certificate"):
            return base64.b64decode(csr["status"]["certificate"])
        if _stop or time.time() > deadline:
            raise KubeletError(f"timed out waiting for certificate signing request {name} to be issued")
        time.sleep(0.25)
        code, got = client.call("GET", f"{CSR_PATH}/{name}")
        if code != 200:
            raise KubeletError(f"cannot read certificate signing request {name}: HTTP {code}: "
                               f"{(got or {}).get('message')}")
        csr = got


def kubeconfig_still_valid(path):
    """isClientConfigStillValid (bootstrap.go): the kubeconfig loads and carries a client
    certificate that is readable and not expired."""
    try:
        config = load_kubeconfig(path)
        _, _, cluster, user_name, user = resolve(config, path)
        files = Credential(user_name, user, cluster, path, {}).client_certificate()
        if files is None:
            return False
        with open(files[0], "rb") as f:
            pem = f.read()
        if files[2]:
            os.unlink(files[0])
        return now() < cert_info(pem)["not_after"]
    except (KubeletError, OSError, ValueError, KeyError, TypeError):
        return False


def bootstrap(opts, node_name, client_for, status):
    """LoadClientCert (bootstrap.go): get a client certificate with the bootstrap kubeconfig's
    credentials and write --kubeconfig to use it."""
    kubeconfig_path, bootstrap_path = opts["kubeconfig"], opts["bootstrap-kubeconfig"]
    store = CertStore(opts.get("cert-dir") or DEFAULT_CERT_DIR)
    config = load_kubeconfig(bootstrap_path, "bootstrap kubeconfig")
    server, ctx, cluster, user_name, user = resolve(config, bootstrap_path)
    current = store.current_pem()
    valid = False
    if current:
        try:
            valid = now() < cert_info(current)["not_after"]
        except KubeletError:
            valid = False
    if valid:
        log(f"using the certificate in {store.current}")
    else:
        log(f"TLS bootstrap with {bootstrap_path}")
        client = client_for(server, ctx, Credential(user_name, user, cluster, bootstrap_path, status))
        key_real = root_path(store.key_tmp)
        # The key survives a failed attempt, so that a restarted kubelet asks again with the
        # same key and finds its earlier CSR (bootstrap.go); an unreadable one is replaced.
        try:
            _, public = _csr_for(key_real, node_name)
        except KubeletError:
            os.makedirs(os.path.dirname(key_real), mode=0o755, exist_ok=True)
            _write_private(key_real, new_key())
            _, public = _csr_for(key_real, node_name)
        with open(key_real, "rb") as f:
            key_pem = f.read()
        cert_pem = request_certificate(client, key_real, node_name, digested_name(public, node_name, CSR_USAGES))
        log(f"client certificate issued: {store.update(cert_pem, key_pem)}")
        os.unlink(key_real)
        status["bootstrapped"] = True
    if cluster.get("certificate-authority-data"):
        ca_data = cluster["certificate-authority-data"]
    elif cluster.get("certificate-authority"):
        ca = cluster["certificate-authority"]
        ca = ca if ca.startswith("/") else os.path.join(os.path.dirname(bootstrap_path), ca)
        with open(root_path(ca), "rb") as f:
            ca_data = base64.b64encode(f.read()).decode()
    else:
        ca_data = None
    new_cluster = {"server": server}
    if ca_data:
        new_cluster["certificate-authority-data"] = ca_data
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "default-context",
                  "clusters": [{"name": "default-cluster", "cluster": new_cluster}],
                  "contexts": [{"name": "default-context",
                                "context": {"cluster": "default-cluster", "user": "default-auth",
                                            "namespace": "default"}}],
                  "users": [{"name": "default-auth",
                             "user": {"client-certificate": store.current, "client-key": store.current}}]}
    real = root_path(kubeconfig_path)
    os.makedirs(os.path.dirname(real), mode=0o755, exist_ok=True)
    _write_private(real, json.dumps(kubeconfig, indent=1).encode())
    log(f"wrote {kubeconfig_path} with client certificate {store.current}")


def rotation_deadline(info):
    """nextRotationDeadline: NotBefore + 70-90 % (uniformly jittered) of the lifetime."""
    total = info["not_after"] - info["not_before"]
    return info["not_before"] + total * random.uniform(0.7, 0.9)


def rotate(client, store, node_name):
    """rotateCerts (certificate_manager.go): a new key, a CSR sent with the current
    certificate, the store switched to the new pair."""
    key_pem = new_key()
    real_dir = root_path(store.dir)
    os.makedirs(real_dir, mode=0o755, exist_ok=True)
    fd, key_real = tempfile.mkstemp(prefix=f"{PAIR_PREFIX}-rotating-", suffix=".key", dir=real_dir)  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        cert_pem = request_certificate(client, key_real, node_name)
    finally:
        os.unlink(key_real)
    return store.update(cert_pem, key_pem)


def rotation_enabled(opts):
    """rotateCertificates from the KubeletConfiguration (--config), the flag overriding it."""
    flag = opts.get("rotate-certificates")
    if flag is not None:
        return flag.lower() in ("true", "1", "t")
    if not opts.get("config"):
        return False
    config = load_kubeconfig(opts["config"], "kubelet config file") or {}
    if config.get("kind") not in (None, "KubeletConfiguration"):
        raise KubeletError(f"kubelet config file {opts['config']}: kind {config.get('kind')!r}, "
                           "expected KubeletConfiguration")
    return bool(config.get("rotateCertificates"))


def _now():
    return _iso(now())


def _read_first_line(path, default):
    try:
        with open(path) as f:
            return f.readline().strip() or default
    except OSError:
        return default


def system_info():
    """NodeSystemInfo's fields that the API marks required (k8s.io/api core/v1 types.go), as a
    kubelet fills them: the machine's ID, the boot's, the kernel, the OS image. kubeProxyVersion
    is deprecated and left empty by kubelets since 1.31 (KEP-4004)."""
    machine_id = _read_first_line(root_path("/etc/machine-id"), "")
    if not machine_id:  # a scratch root has none: a stable stand-in from the node's name
        machine_id = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:32]
    os_image = "Linux"
    try:
        with open(root_path("/etc/os-release")) as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    os_image = line.split("=", 1)[1].strip().strip('"') or os_image
    except OSError:
        pass
    return {"machineID": machine_id, "systemUUID": machine_id,
            "bootID": _read_first_line("/proc/sys/kernel/random/boot_id", "00000000-0000-0000-0000-000000000000"),
            "kernelVersion": os.uname().release, "osImage": os_image, "kubeProxyVersion": ""}


def node_info():
    """status.nodeInfo as this kubelet reports it: at registration and in every status update
    (kubernetes pkg/kubelet/nodestatus/setters.go VersionInfo), so a restarted kubelet of
    another version shows its own version."""
    return {"kubeletVersion": f"v{VERSION}", "operatingSystem": "linux", "architecture": "amd64",
            "containerRuntimeVersion": "containerd://stand-in", **system_info()}


def node_object(name, opts):
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}
    for pair in filter(None, opts.get("node-labels", "").split(",")):
        key, _, value = pair.partition("=")
        labels[key.strip()] = value.strip()
    taints = []
    for spec in filter(None, opts.get("register-with-taints", "").split(",")):
        kv, _, effect = spec.partition(":")
        key, _, value = kv.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        taints.append(taint)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"nodeInfo": node_info(),
                       "conditions": [_ready("False", "KubeletNotReady", "kubelet is starting")]}}
    if taints:
        node["spec"]["taints"] = taints
    if opts.get("node-ip"):
        node["status"]["addresses"] = [{"type": "InternalIP", "address": opts["node-ip"]}]
    return node


def _ready(status, reason, message):
    now = _now()
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now}


def connect(opts, name, status, contact, rotate_on):
    """An ApiClient per --kubeconfig, after TLS bootstrap when it is needed; returns (client,
    cert_info of the client certificate or None)."""
    kubeconfig_path = opts["kubeconfig"]
    if opts.get("bootstrap-kubeconfig") and not kubeconfig_still_valid(kubeconfig_path):
        bootstrap(opts, name, lambda server, ctx, cred: ApiClient(server, ctx, cred, contact), status)
    config = load_kubeconfig(kubeconfig_path)
    server, ctx, cluster, user_name, user = resolve(config, kubeconfig_path)
    credential = Credential(user_name, user, cluster, kubeconfig_path, status)
    files = credential.client_certificate()
    store = CertStore(opts.get("cert-dir") or DEFAULT_CERT_DIR)
    if files and rotate_on and store.current_pem():
        # The certificate manager's store prefers its current pair over the kubeconfig's files
        # (client-go util/certificate/certificate_store.go Current).
        if files[2]:
            os.unlink(files[0])
        files = (root_path(store.current), root_path(store.current), False)
    info = None
    if files:
        try:
            with open(files[0], "rb") as f:
                info = cert_info(f.read())
            ctx.load_cert_chain(files[0], files[1])
        except (OSError, ssl.SSLError) as e:
            raise KubeletError(f"cannot load the client certificate of user {user_name!r}: {e}")
        finally:
            if files[2]:
                os.unlink(files[0])
        status.update(cert_serial=info["serial"], cert_not_before=_iso(info["not_before"]),
                      cert_not_after=_iso(info["not_after"]))
    status.update(auth=credential.kind(), server=server)
    return ApiClient(server, ctx, credential, contact), info


def run(opts):
    interval = float(os.environ.get("FAKE_KUBELET_INTERVAL", "2"))
    max_unreachable = float(os.environ.get("FAKE_KUBELET_MAX_UNREACHABLE", "20"))
    contact = {"at": time.time()}  # the apiserver's last answer (any HTTP status counts)
    name = (opts.get("hostname-override") or socket.gethostname()).lower()
    kubeconfig_path = opts.get("kubeconfig")
    status = {"pid": os.getpid(), "node": name, "registered": False, "heartbeats": 0, "plugin_runs": 0,
              "last_status": None, "last_error": None, "version": VERSION, "auth": None,
              "bootstrapped": False, "rotations": 0, "cert_serial": None, "cert_not_before": None,
              "cert_not_after": None, "rotation_deadline": None}
    client, registered, cert, deadline, rotate_on = None, False, None, None, None
    log(f"starting: node {name}, kubeconfig {kubeconfig_path}"
        + (f", bootstrap kubeconfig {opts['bootstrap-kubeconfig']}" if opts.get("bootstrap-kubeconfig") else ""))
    while not _stop:
        d = state_dir()
        if d and not os.path.isdir(d):
            break  # the test that started us has gone (its temp dir is removed): don't linger
        try:
            if not kubeconfig_path:
                raise KubeletError("no --kubeconfig given")
            if rotate_on is None:
                rotate_on = rotation_enabled(opts)
            if client is not None and cert and now() >= cert["not_after"]:
                log("the client certificate has expired")  # the real kubelet exits and is restarted
                client = None
            if client is None:
                client, cert = connect(opts, name, status, contact, rotate_on)
                deadline = rotation_deadline(cert) if cert and rotate_on else None
                status["rotation_deadline"] = _iso(deadline) if deadline else None
            if not registered:
                code, body = client.call("POST", "/api/v1/nodes", node_object(name, opts))
                status["last_status"] = code
                if code in (201, 409):
                    registered = True
                    status["registered"] = True
                    log(f"registered node {name} ({'created' if code == 201 else 'already existed'})")
                else:
                    raise KubeletError(f"unable to register node {name}: HTTP {code}: {(body or {}).get('message')}")
            if registered:
                patch = {"status": {"nodeInfo": node_info(),
                                    "conditions": [_ready("True", "KubeletReady", "kubelet is posting ready status")]}}
                code, body = client.call("PATCH", f"/api/v1/nodes/{name}/status", patch,
                                         "application/strategic-merge-patch+json")
                status["last_status"] = code
                if code == 200:
                    status["heartbeats"] += 1
                    status["last_error"] = None
                else:
                    raise KubeletError(f"error updating node status: HTTP {code}: {(body or {}).get('message')}")
            if deadline is not None and now() >= deadline:
                log("rotating the client certificate")
                issued = rotate(client, CertStore(opts.get("cert-dir") or DEFAULT_CERT_DIR), name)
                status["rotations"] += 1
                client, cert = connect(opts, name, status, contact, rotate_on)
                deadline = rotation_deadline(cert)
                status["rotation_deadline"] = _iso(deadline)
                log(f"client certificate rotated: {issued}, serial {cert['serial']}")
        except KubeletError as e:
            status["last_error"] = str(e)
            log(str(e))
            if not registered:
                client = None  # read the kubeconfig again next time, as a restarted kubelet would
        except (urllib.error.URLError, OSError) as e:
            status["last_error"] = f"connection to the apiserver failed: {e}"
            log(status["last_error"])
        if status["last_error"] and time.time() - contact["at"] > max_unreachable:
            log(f"no answer from the apiserver for over {max_unreachable:g} s: giving up")
            write_status(status)
            return 1
        write_status(status)
        # The real certificate manager rotates on a timer set to its deadline
        # (certificate_manager.go): waking only every `interval` could sleep through the
        # whole window between the deadline and the certificate's expiry when it is short.
        # (A deadline already past, a rotation that failed, waits the interval as before.)
        # The deadline is on the node's clock, the wait on this machine's: a test that moves
        # the clock past the deadline is seen at the next wake, after the next answer's Date.
        wake = time.time() + interval
        if deadline is not None and client is not None and now() < deadline:
            wake = min(wake, time.time() + deadline - now())
        while not _stop and time.time() < wake:
            time.sleep(0.05)
    log("stopping")
    return 0


def main(argv):
    if "--version" in argv or "--version=true" in argv:
        print(f"Kubernetes v{VERSION}")
        return 0

    def on_term(*_):
        global _stop
        _stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if VERSION in os.environ.get("FAKE_KUBELET_FAIL_VERSIONS", "").split(","):
        # A kubelet of a version that cannot start here (as one refusing a configuration
        # field its version removed): it exits at once, and systemd's unit turns failed.
        log(f"kubelet v{VERSION}: failing at start ($FAKE_KUBELET_FAIL_VERSIONS)")
        return 1
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
