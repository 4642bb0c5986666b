"""The emulator process: one App, several listeners, one JSON line on stdout, exit 0 on SIGTERM.

Listeners (all on 127.0.0.1):
  main       HTTPS  ARM, Entra (authority), /artifacts, /_emulator (admin)
  himds      HTTP   the Arc HIMDS token endpoint (plain HTTP like the real one on :40342)
  apiserver  HTTPS  one per cluster, so each cluster's kubeconfig points at its own server
"""

import argparse
import json
import os
import signal
import ssl
import sys
import threading
import time
import traceback

from tests.emulator import (admin, agentpools, apiserver, arm, artifacts, cluster_pki, constants, entra, faults,
                            himds, profiles, state as state_mod, throttling, tls, wan)
from tests.emulator.httpbase import DROP, EmulatorServer, HttpError, Response


class App:
    def __init__(self, state_dir, profile="default", himds_key_dir=None, resume=False):
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.ca, self.pki = tls.ensure_pki(self.state_dir)
        with open(self.pki["ca"], "rb") as f:
            self.ca_pem = f.read()
        self.himds_key_dir = os.path.abspath(himds_key_dir or os.path.join(self.state_dir, "himds-keys"))
        os.makedirs(self.himds_key_dir, mode=0o700, exist_ok=True)
        self._log = open(os.path.join(self.state_dir, "emulator.log"), "a", buffering=1)
        self._log_lock = threading.Lock()
        self.state = state_mod.State(self.state_dir, profile)
        if resume and os.path.exists(self.state.path):
            self.state.load()
        self.mirror = artifacts.Mirror()
        self.link = wan.Link()  # the node's link to the artifact host (artifact_rate)
        self.servers = {}
        self.apiservers = {}  # cluster id (lower) -> EmulatorServer
        self.port_base = 0
        self._threads = []
        # Requests a "hold" fault rule caught wait here for the next release (faults.py).
        self._holds = threading.Condition()
        self._releases = 0

        self.server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_tls.load_cert_chain(self.pki["cert"], self.pki["key"])
        # The apiserver also takes client certificates (optional: many clients send a token).
        # The handshake checks the chain only; kubeauth judges the dates on the emulator's clock
        # (the real server's TLS layer only requests the certificate: tls.RequestClientCert in
        # k8s.io/apiserver pkg/server/secure_serving.go; its x509 authenticator verifies it).
        self.apiserver_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.apiserver_tls.load_cert_chain(self.pki["cert"], self.pki["key"])
        self.apiserver_tls.load_verify_locations(self.pki["ca"])
        self.apiserver_tls.verify_mode = ssl.CERT_OPTIONAL
        self.apiserver_tls.verify_flags |= tls.NO_CHECK_TIME

    # -- listeners -------------------------------------------------------------------------

    def _listen(self, port, kind, ctx, cluster_id=None, fallback=True):
        try:
            server = EmulatorServer(port, self, kind, ctx, cluster_id)
        except OSError:
            if not fallback or port == 0:
                raise
            server = EmulatorServer(0, self, kind, ctx, cluster_id)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                  name=f"serve-{kind}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return server

    def start(self, port_base=0, himds_port=None, resume=False):
        self.port_base = port_base
        recorded = self.state.data.get("ports", {}) if resume else {}

        def port_for(name, offset):
            if port_base:
                return port_base + offset
            return recorded.get(name, 0)

        self.servers["main"] = self._listen(port_for("main", 0), "main", self.server_tls, fallback=not port_base)
        hport = himds_port if himds_port is not None else port_for("himds", 1)
        self.servers["himds"] = self._listen(hport, "himds", None, fallback=himds_port is None and not port_base)
        with self.state.lock:
            self.state.data["ports"] = {"main": self.servers["main"].port, "himds": self.servers["himds"].port}
            for cl in list(self.state.data["clusters"].values()):
                self.ensure_apiserver(cl["id"], resume=resume)
            self.state.save()

    def ensure_apiserver(self, cluster_id, resume=True):
        key = cluster_id.lower()
        if key not in self.apiservers:
            ports = self.state.data.setdefault("apiserver_ports", {})
            if self.port_base:
                port = self.port_base + 2 + len(self.apiservers)
            else:
                port = ports.get(key, 0) if resume else 0
            server = self._listen(port, "apiserver", lambda: cluster_pki.apiserver_context(self, cluster_id),
                                  cluster_id=cluster_id,
                                  fallback=not self.port_base)
            self.apiservers[key] = server
            ports[key] = server.port
            self.state.mark_dirty()
        return self.apiservers[key].url

    def apiserver_url(self, cluster_id):
        server = self.apiservers.get(cluster_id.lower())
        return server.url if server else None

    def endpoints(self):
        main = self.servers["main"].url
        return {
            "arm": main,
            "authority": main,
            "himds": f"{self.servers['himds'].url}{himds.TOKEN_PATH}",
            "artifacts": f"{main}/artifacts",
            "apiserver": self.apiserver_url(constants.CLUSTER_ID) or next(iter(self.apiservers.values())).url,
            "apiservers": {cl["id"]: self.apiserver_url(cl["id"]) for cl in self.state.data["clusters"].values()},
            "admin": f"{main}/_emulator",
            "ca_bundle": self.pki["ca"],
            "himds_key_dir": self.himds_key_dir,
            "state_dir": self.state_dir,
            "pid": os.getpid(),
        }

    def release_holds(self):
        """Let every request a "hold" rule is holding go on (DELETE /_emulator/faults, a reset)."""
        with self._holds:
            self._releases += 1
            self._holds.notify_all()

    def stop(self):
        self.release_holds()
        servers = list(self.servers.values()) + list(self.apiservers.values())
        stoppers = [threading.Thread(target=s.shutdown) for s in servers]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(timeout=5)
        for s in servers:
            s.server_close()
        self.state.forget_himds_keys()
        self.state.save()
        self._log.close()

    # -- requests --------------------------------------------------------------------------

    def log(self, message):
        with self._log_lock:
            if not self._log.closed:
                self._log.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    @staticmethod
    def classify(server, req):
        if server.kind in ("himds", "apiserver"):
            return server.kind
        first = req.lower[0] if req.lower else ""
        if first == "_emulator":
            return "admin"
        if first == "artifacts":
            return "artifacts"
        if first in ("subscriptions", "providers"):
            return "arm"
        return "entra"

    def _dispatch(self, server, req):
        if req.kind in ("arm", "apiserver"):
            # The RP's work moves with the world's requests, no thread of its own: Machine
            # operations, pool upgrades, the stale-Node fallback (agentpools.settle).
            agentpools.settle(self.state)
        if req.kind == "admin":
            return admin.handle(self, req)
        if req.kind == "artifacts":
            return artifacts.handle(self, req)
        if req.kind == "arm":
            return arm.handle(self, req)
        if req.kind == "entra":
            return entra.handle(self, req)
        if req.kind == "himds":
            return himds.handle(self, req)
        return apiserver.handle(self, server, req)

    def handle(self, server, req):
        state = self.state
        req.kind = self.classify(server, req)
        req.detail = None
        started = time.time()
        req.log_entry = None
        # The WAN profile's round trip (wan.py): the client waits it; nothing is locked meanwhile.
        wait = wan.delay(state.settings, req.kind, req.method, req.path)
        if wait > 0:
            time.sleep(wait)
        rule = None
        if req.kind != "admin":
            with state.lock:  # a release (admin, under this lock) comes before or after, never between
                rule = faults.take(state.data["faults"], req)
                if rule is not None:
                    state.data["fault_hits"] += 1
                    state.mark_dirty()
                    released = self._releases
        if rule is not None and rule.get("hold"):
            with self._holds:
                self._holds.wait_for(lambda: self._releases != released)
        if rule is not None and rule.get("delay"):
            time.sleep(rule["delay"])
        if rule is not None and rule.get("drop"):
            self._record(req, None, started, fault="drop")
            return DROP
        if rule is not None and rule.get("respond"):
            response = faults.canned_response(rule["respond"])
        else:
            try:
                with state.lock:
                    response = self._dispatch(server, req)
            except HttpError as e:
                response = e.response
            except Exception:
                self.log(f"internal error on {req.method} {req.target}:\n{traceback.format_exc()}")
                response = Response.json(500, {"error": {"code": "EmulatorInternalError",
                                                         "message": traceback.format_exc(limit=1)}})
        if rule is not None and rule.get("corrupt"):
            response.body = faults.corrupt(response.body)
        if rule is not None and "truncate" in rule:
            response.truncate = rule["truncate"]
        if rule is not None and rule.get("set"):
            response.body = faults.set_fields(response.body, rule["set"])
        if req.kind == "arm":
            for key, value in arm.common_headers(req, state).items():
                response.headers.setdefault(key, value)
        self._record(req, response.status, started, fault=_fault_name(rule))
        if req.kind == "arm":
            with state.lock:
                throttling.record(state, req, response.status, started)
        with state.lock:
            state.save_if_dirty()
        return response

    def finished(self, req):
        """The request's answer is written (or dropped): its end in the request log."""
        entry = getattr(req, "log_entry", None)
        if entry is not None:
            with self.state.lock:
                entry["ended"] = time.time()

    def _record(self, req, status, started, fault=None):
        # "time" and "ended": when the request arrived and when its answer's last byte went
        # (finished); a chain of requests is read from both (tests/request_chains.py).
        now = time.time()
        req.log_entry = {
            "time": started,
            "ended": now,
            "server": req.kind,
            "method": req.method,
            "path": req.path,
            "query": req.query_string,
            "api_version": req.q("api-version"),
            "status": status,
            "client_request_id": req.header("x-ms-client-request-id") or req.header("client-request-id"),
            "user_agent": req.header("User-Agent"),
            "fault": fault,
            "detail": req.detail,
            "duration_ms": round((now - started) * 1000, 1),
        }
        self.state.log_request(req.log_entry)


def _fault_name(rule):
    if rule is None:
        return None
    if "truncate" in rule:
        return "truncate"
    for key in ("respond", "corrupt", "drop", "set"):
        if rule.get(key):
            return key
    return "hold" if rule.get("hold") and not rule.get("delay") else "delay"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m tests.emulator",
                                description="Loopback emulator of the Azure services aks-flex-node talks to.")
    p.add_argument("--state-dir", required=True, help="where ca.pem, state.json and the log live")
    p.add_argument("--profile", default="default", choices=sorted(profiles.PROFILES))
    p.add_argument("--himds-key-dir", help="where HIMDS challenge key files go (default STATE_DIR/himds-keys)")
    p.add_argument("--port-base", type=int, default=0,
                   help="0: ephemeral ports; N: main N, HIMDS N+1, apiservers N+2...")
    p.add_argument("--himds-port", type=int, help="HIMDS port (the real one is 40342)")
    p.add_argument("--resume", action="store_true", help="continue from STATE_DIR/state.json, on the same ports if free")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit when the parent process goes away (tests: no stray emulators)")
    return p.parse_args(argv)


def main(argv=None):
    # Before anything is announced: a parent that reads the endpoints and exits at once would
    # otherwise be gone (this process already re-parented) by the time it is asked for.
    parent = os.getppid()
    args = parse_args(argv)
    app = App(args.state_dir, args.profile, args.himds_key_dir, resume=args.resume)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    app.start(args.port_base, args.himds_port, resume=args.resume)
    sys.stdout.write(json.dumps(app.endpoints()) + "\n")
    sys.stdout.flush()
    app.log(f"serving: {json.dumps(app.endpoints())}")
    while not stop.wait(0.25):
        if args.exit_with_parent and os.getppid() != parent:
            app.log("parent went away; exiting")
            break
    app.stop()
    return 0
