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

Unlike the real one it gives up (exit 1) once the apiserver has been unreachable for
$FAKE_KUBELET_MAX_UNREACHABLE seconds (default 20) or its state directory is gone, so that a
kubelet a test forgot to stop does not outlive the emulator.
"""

import base64
import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

VERSION = "0.0.0"  # the emulator writes the artifact's version here
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")

_stop = False


class KubeletError(Exception):
    pass


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


def parse_args(argv):
    wanted = {"kubeconfig", "hostname-override", "node-labels", "register-with-taints", "node-ip"}
    opts, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value = argv[i + 1]
                i += 1
            if name in wanted:
                opts[name] = value
        i += 1
    return opts


def load_kubeconfig(path):
    real = root_path(path)
    try:
        with open(real) as f:
            text = f.read()
    except OSError as e:
        raise KubeletError(f"unable to load kubeconfig {path} (at {real}): {e.strerror}")
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml  # only for YAML kubeconfigs; ours are JSON, which is YAML
    except ImportError:
        raise KubeletError(f"kubeconfig {path} is not JSON and PyYAML is not available to read YAML")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeletError(f"kubeconfig {path} is neither JSON nor valid YAML: {e}")


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

    def get(self):
        if self.user.get("token"):
            return self.user["token"]
        if self.user.get("tokenFile"):
            with open(root_path(self.user["tokenFile"])) as f:
                return f.read().strip()
        if "exec" not in self.user:
            raise KubeletError(f"user {self.user_name!r} has neither token, tokenFile nor exec")
        # client-go's credsExpired() is now().After(exp), with no skew margin (kubernetes/client-go
        # plugin/pkg/client/auth/exec/exec.go).
        if self.token is None or (self.expiry is not None and time.time() > self.expiry):
            self.token, self.expiry = self._run_plugin()
        return self.token

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
        headers = {"Authorization": f"Bearer {self.credential.get()}", "Accept": "application/json",
                   "User-Agent": f"kubelet/v{VERSION} (linux/amd64) stand-in"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=15) as resp:
                self.contact["at"] = time.time()
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            self.contact["at"] = time.time()
            if e.code == 401:
                self.credential.invalidate()  # re-run the plugin for the next request (client-go exec.go)
            try:
                return e.code, json.loads(e.read() or b"null")
            except ValueError:
                return e.code, None


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
            "status": {"nodeInfo": {"kubeletVersion": f"v{VERSION}", "operatingSystem": "linux",
                                    "architecture": "amd64", "containerRuntimeVersion": "containerd://stand-in"},
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


def run(opts):
    interval = float(os.environ.get("FAKE_KUBELET_INTERVAL", "2"))
    max_unreachable = float(os.environ.get("FAKE_KUBELET_MAX_UNREACHABLE", "20"))
    contact = {"at": time.time()}  # the apiserver's last answer (any HTTP status counts)
    name = (opts.get("hostname-override") or socket.gethostname()).lower()
    kubeconfig_path = opts.get("kubeconfig")
    status = {"pid": os.getpid(), "node": name, "registered": False, "heartbeats": 0, "plugin_runs": 0,
              "last_status": None, "last_error": None, "version": VERSION}
    client, registered = None, False
    log(f"starting: node {name}, kubeconfig {kubeconfig_path}")
    while not _stop:
        d = state_dir()
        if d and not os.path.isdir(d):
            break  # the test that started us has gone (its temp dir is removed): don't linger
        try:
            if not kubeconfig_path:
                raise KubeletError("no --kubeconfig given")
            if client is None:
                config = load_kubeconfig(kubeconfig_path)
                server, ctx, cluster, user_name, user = resolve(config, kubeconfig_path)
                client = ApiClient(server, ctx, Credential(user_name, user, cluster, kubeconfig_path, status), contact)
                status["server"] = server
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
                patch = {"status": {"conditions": [_ready("True", "KubeletReady", "kubelet is posting ready status")]}}
                code, body = client.call("PATCH", f"/api/v1/nodes/{name}/status", patch,
                                         "application/strategic-merge-patch+json")
                status["last_status"] = code
                if code == 200:
                    status["heartbeats"] += 1
                    status["last_error"] = None
                else:
                    raise KubeletError(f"error updating node status: HTTP {code}: {(body or {}).get('message')}")
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
        deadline = time.time() + interval
        while not _stop and time.time() < deadline:
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
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
