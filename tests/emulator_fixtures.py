"""Pytest fixtures and helpers around the Azure emulator and the host-command stand-ins.

tests/conftest.py imports these (`from tests.emulator_fixtures import *`):

  emulator        session-scoped running emulator (an `Emulator`); shared, so prefer...
  fresh_emulator  the same emulator, reset to its profile's initial world for this test
  fake_host       a FakeHost(root, state_dir, env) for one test, wired to fresh_emulator;
                  kills whatever the fake systemctl started when the test ends

  start_emulator(state_dir, profile="default", extra_args=()) -> Emulator   (a context-free start)
  fake_env(emulator, root, state_dir) -> dict   the environment for our CLI under test
  stop_fake_units(state_dir)                    kill processes the fake systemctl launched
"""

import json
import os
import pathlib
import select
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.emulator import constants

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
FAKES_BIN = REPO_ROOT / "tests" / "fakes" / "bin"
START_TIMEOUT = 20

__all__ = ["Emulator", "EmulatorError", "FakeHost", "emulator", "fresh_emulator", "fake_host", "fake_env",
           "start_emulator", "stop_fake_units", "FAKES_BIN"]


class EmulatorError(Exception):
    pass


# The public cloud's authority host (MSAL's WELL_KNOWN_AUTHORITY_HOSTS, msal/authority.py).
PUBLIC_AUTHORITY_HOST = "login.microsoftonline.com"


def entra_by_public_name():
    """True when the installed azure-identity cannot turn off MSAL's instance discovery
    (1.7.0, Ubuntu 22.04's): the library then accepts only Entra ID's own authority hosts
    (aks_flex_node/azure/auth.py), so the tests name the public one and route it here by name
    (tests/sitehook/emulator_routes.py)."""
    from azure.identity import ClientSecretCredential

    from aks_flex_node.azure import sdk_compat

    return sdk_compat.instance_discovery_switch(ClientSecretCredential) is None


def routes_hook():
    """The module that routes names to the emulator (tests/sitehook/emulator_routes.py), as
    every Python process of the Ubuntu venvs loads it (a .pth file the Makefile writes)."""
    hook = sys.modules.get("emulator_routes")
    if hook is None:
        raise EmulatorError(
            "this azure-identity cannot turn off MSAL's instance discovery, so the tests configure "
            f"https://{PUBLIC_AUTHORITY_HOST} and route its name to the emulator; that needs "
            "tests/sitehook/emulator_routes.py loaded in every Python process: run the suite through "
            "`make test-ubuntu-jammy`, whose venv loads it")
    return hook


class Emulator:
    """A running emulator process: its endpoints and a small stdlib client for the admin API."""

    def __init__(self, endpoints, process, state_dir):
        self.endpoints = endpoints
        self.process = process
        self.state_dir = pathlib.Path(state_dir)
        self.clock_moved = False  # advance_clock sets it; fresh_emulator rewinds and clears it
        self.arm = endpoints["arm"]
        # Where the emulator serves Entra ID, and the authority clients are configured with:
        # the same URL, except on an azure-identity that accepts only Entra ID's own hosts
        # (Ubuntu 22.04's), where it is the public cloud's, routed here by name.
        self.entra = endpoints["authority"]
        self.authority = f"https://{PUBLIC_AUTHORITY_HOST}" if entra_by_public_name() else self.entra
        self.route_entra()
        self.himds = endpoints["himds"]
        self.artifacts = endpoints["artifacts"]
        self.apiserver = endpoints["apiserver"]
        self.apiservers = endpoints["apiservers"]
        self.admin_url = endpoints["admin"]
        self.ca_bundle = endpoints["ca_bundle"]
        self.himds_key_dir = endpoints["himds_key_dir"]
        self.pid = endpoints["pid"]
        self.ssl_context = ssl.create_default_context(cafile=self.ca_bundle)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   urllib.request.HTTPSHandler(context=self.ssl_context))

    # -- raw HTTP ------------------------------------------------------------------------

    def http(self, method, url, body=None, headers=None, form=None):
        """(status, headers, parsed JSON or text) for any emulator URL; never raises on HTTP errors."""
        headers = dict(headers or {})
        data = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=30) as resp:
                status, resp_headers, raw = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            status, resp_headers, raw = e.code, e.headers, e.read()
        ctype = resp_headers.get("Content-Type", "")
        payload = raw
        if "json" in ctype and raw:
            payload = json.loads(raw)
        elif ctype.startswith("text/"):
            payload = raw.decode()
        return status, resp_headers, payload

    def admin(self, method, path, body=None):
        status, _, payload = self.http(method, f"{self.admin_url}/{path.lstrip('/')}", body)
        if status >= 400:
            raise EmulatorError(f"admin {method} {path}: HTTP {status}: {payload}")
        return payload

    # -- the admin API ---------------------------------------------------------------------

    def state(self):
        return self.admin("GET", "state")

    def faults(self, rules):
        """Append fault rules (see tests/emulator/faults.py); returns all rules in force."""
        return self.admin("POST", "faults", rules)

    def clear_faults(self):
        return self.admin("DELETE", "faults")

    def reset(self):
        return self.admin("POST", "reset")

    def settings(self, **changes):
        return self.admin("POST", "settings", changes)

    def advance_clock(self, seconds):
        """Move the emulator's world `seconds` ahead (tests/emulator/clock.py); returns its clock.
        fresh_emulator puts it back after the test (the next one must meet no skew)."""
        self.clock_moved = True
        return self.admin("POST", "clock", {"advance": seconds})

    def bind_himds(self, machine_id):
        return self.admin("POST", "himds/bind", {"machine_id": machine_id})

    def add_cluster(self, **spec):
        """Add a cluster (name, resource_group, ...); returns {"id", "apiserver"}."""
        return self.admin("POST", "clusters", spec)

    def add_agent_pool(self, **spec):
        """Add an agent pool (cluster_id, name, [type, mode, max_pods, labels, taints]); returns {"id"}."""
        return self.admin("POST", "agentpools", spec)

    def upgrade_pool(self, cluster_id, pool, version):
        """`az aks nodepool upgrade` as the RP runs it (tests/emulator/pool_operations.py);
        returns the operation's id for pool_operation()."""
        return self.admin("POST", "agentpools/upgrade",
                          {"cluster_id": cluster_id, "pool": pool, "version": version})["operation"]

    def rollback_pool(self, cluster_id, pool):
        """`az aks nodepool rollback`: each Machine's spec from before the last upgrade; the
        operation's id."""
        return self.admin("POST", "agentpools/rollback", {"cluster_id": cluster_id, "pool": pool})["operation"]

    def pool_operation(self, op_id):
        """{"id", "kind", "pool_id", "version", "status" (InProgress, Succeeded, Failed),
        "machines": {name: phase}, "error": None or {"code", "message", "machine"}}."""
        return self.admin("GET", f"agentpools/operations/{op_id}")

    def remove_role_assignments(self, principal_id, scope=None):
        """Delete the principal's role assignments (at `scope` only, when given) through ARM as
        the operator, as `az role assignment delete` would; returns how many went."""
        removed = 0
        for a in self.state()["role_assignments"]:
            if a["principal_id"].lower() != principal_id.lower() or (
                    scope is not None and a["scope"].lower() != scope.lower()):
                continue
            status, _, body = self.arm_call(
                "DELETE", f"{a['scope'].rstrip('/')}/providers/Microsoft.Authorization/roleAssignments/{a['name']}",
                "2022-04-01")
            if status not in (200, 204):
                raise EmulatorError(f"role assignment {a['name']}: DELETE answered {status}: {body}")
            removed += 1
        return removed

    def mint_token(self, principal_id, audience=constants.AKS_SERVER_APP_ID, lifetime=3600):
        return self.admin("POST", "tokens", {"principal_id": principal_id, "audience": audience,
                                             "lifetime": lifetime})["access_token"]

    def throttling(self, since=0):
        """ARM throttling (tests/emulator/throttling.py): figures, bucket levels, the 429 count
        and the ledger of subscription-level ARM calls from entry `since` on."""
        return self.admin("GET", f"throttling?since={since}")

    def requests(self, server=None, method=None, path_contains=None):
        """The request log, filtered."""
        out = []
        for r in self.state()["requests"]:
            if server and r["server"] != server:
                continue
            if method and r["method"] != method.upper():
                continue
            if path_contains and path_contains.lower() not in r["path"].lower():
                continue
            out.append(r)
        return out

    def apiserver_for(self, cluster_id):
        for cl in self.state()["clusters"]:
            if cl["id"].lower() == cluster_id.lower():
                return cl["apiserver"]
        raise EmulatorError(f"no cluster {cluster_id} in the emulator")

    # -- convenience for tests that talk to Azure directly --------------------------------

    def arm_token(self, client_id=constants.SP_CLIENT_ID, secret=constants.SP_CLIENT_SECRET,
                  scope=constants.ARM_SCOPE):
        status, _, body = self.http("POST", f"{self.entra}/{constants.TENANT_ID}/oauth2/v2.0/token",
                                    form={"grant_type": "client_credentials", "client_id": client_id,
                                          "client_secret": secret, "scope": scope})
        if status != 200:
            raise EmulatorError(f"token request failed: HTTP {status}: {body}")
        return body["access_token"]

    def arm_call(self, method, path, api_version, body=None, token=None):
        """(status, headers, body) of an ARM call as the operator SP (or with `token`)."""
        token = token or self.arm_token()
        sep = "&" if "?" in path else "?"
        return self.http(method, f"{self.arm}{path}{sep}api-version={api_version}", body,
                         {"Authorization": f"Bearer {token}"})

    def credential_kwargs(self, credential_class=None):
        """Keyword arguments for an azure-identity credential (`credential_class`, by default
        ClientSecretCredential) pointed at the emulator: the installed release's keyword that
        turns instance discovery off (sdk_compat.instance_discovery_switch), or none when the
        authority is routed by name (see __init__)."""
        from azure.identity import ClientSecretCredential

        from aks_flex_node.azure import sdk_compat

        self.route_entra()
        kwargs = {"authority": self.authority, "connection_verify": self.ca_bundle}
        if not self.routed:
            kwargs.update(sdk_compat.instance_discovery_switch(credential_class or ClientSecretCredential))
        return kwargs

    @property
    def pause_image(self):
        """A pause image reference on this emulator (its registry answers /v2/ for preflight's
        image-registry check: a test node's containerd pulls nothing)."""
        return f"{self.arm.split('://', 1)[1].rstrip('/')}/oss/kubernetes/pause:3.9"

    @property
    def routed(self):
        """Whether clients reach this emulator's Entra ID by the public authority's name."""
        return self.authority != self.entra

    def route_entra(self, environ=None):
        """Resolve the public authority's name to this emulator, in `environ` (default: this
        process's, which the CLI's environment copies). Nothing when it is not routed."""
        if not self.routed:
            return
        port = urllib.parse.urlsplit(self.entra).port
        routes_hook().route(PUBLIC_AUTHORITY_HOST, "127.0.0.1", port, os.environ if environ is None else environ)

    def mgmt_kwargs(self):
        """Keyword arguments for the azure-mgmt-* clients pointed at the emulator."""
        return {"base_url": self.arm, "credential_scopes": [constants.ARM_SCOPE],
                "connection_verify": self.ca_bundle}

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self, timeout=10):
        """SIGTERM, then wait; returns the exit code (SIGKILL after `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        return self.process.returncode


def start_emulator(state_dir, profile="default", extra_args=(), env=None):
    """Start `python -m tests.emulator` (this interpreter) and wait for its JSON line."""
    state_dir = pathlib.Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + child_env["PYTHONPATH"]
                                                if child_env.get("PYTHONPATH") else "")
    argv = [sys.executable, "-m", "tests.emulator", "--state-dir", str(state_dir), "--profile", profile,
            "--exit-with-parent", *extra_args]
    stderr = open(state_dir / "stderr.log", "ab")
    process = subprocess.Popen(argv, cwd=REPO_ROOT, env=child_env, stdout=subprocess.PIPE, stderr=stderr,
                               stdin=subprocess.DEVNULL)
    stderr.close()
    deadline = time.time() + START_TIMEOUT
    line = b""
    while time.time() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
        elif process.poll() is not None:
            break
    if not line.endswith(b"\n"):
        process.kill()
        process.wait()
        err = (state_dir / "stderr.log").read_text(errors="replace")
        raise EmulatorError(f"the emulator did not start (exit {process.returncode}); stderr:\n{err}")
    return Emulator(json.loads(line), process, state_dir)


def fake_env(emulator, root, state_dir):
    """The environment to give our CLI (as a subprocess) so that the stand-ins and the emulator
    are what it finds: fakes first on PATH, AKS_FLEX_NODE_HOST_BIN, FAKE_* for the stand-ins,
    no proxy for loopback, and no REQUESTS_CA_BUNDLE (the CA must come from our config)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                        "http_proxy", "AZURE_AUTHORITY_HOST", "IDENTITY_ENDPOINT", "IMDS_ENDPOINT")}
    env.update({
        "PATH": f"{FAKES_BIN}{os.pathsep}{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
        "AKS_FLEX_NODE_HOST_BIN": str(FAKES_BIN),
        "FAKE_STATE_DIR": str(state_dir),
        "FAKE_ROOT": str(root),
        "FAKE_AZURE_ARM": emulator.arm,
        "FAKE_AZURE_CA_BUNDLE": emulator.ca_bundle,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    })
    emulator.route_entra(env)
    return env


def _pid_alive(pid, starttime):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == starttime


def stop_fake_units(state_dir):
    """Kill every process the fake systemctl launched (recorded in systemd.json); returns their pids."""
    path = pathlib.Path(state_dir) / "systemd.json"
    if not path.exists():
        return []
    killed = []
    units = json.loads(path.read_text()).get("units", {})
    for record in units.values():
        pid, starttime = record.get("pid"), record.get("starttime")
        if pid and _pid_alive(pid, starttime):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            killed.append(pid)
    deadline = time.time() + 5
    for record in units.values():
        while record.get("pid") in killed and _pid_alive(record["pid"], record.get("starttime")) \
                and time.time() < deadline:
            time.sleep(0.05)
        if record.get("pid") in killed and _pid_alive(record["pid"], record.get("starttime")):
            os.killpg(record["pid"], signal.SIGKILL)
    return killed


def scratch_node(emulator, base, config=None, digests=()):
    """A scratch node as tests/conftest.py's `node` makes it, on `emulator`, under `base`
    (a second node beside a test's own, the bench's nodes): a harness.Node with `fake` and
    `wrapper` set."""
    from tests import harness  # harness is the nodes' module; this one is the emulator's

    fake = FakeHost(emulator, base)
    root = str(fake.root)
    harness.prepare_root(root)
    keys = os.path.join(root, "var/opt/azcmagent/tokens")
    os.makedirs(os.path.dirname(keys), exist_ok=True)
    os.symlink(emulator.himds_key_dir, keys)
    wrapper = harness.exec_plugin_wrapper(str(base))
    harness.write_config(root, emulator, wrapper, extra=config, digests=digests)
    node = harness.Node(root, str(fake.state_dir), emulator, fake.env)
    node.fake, node.wrapper = fake, wrapper
    return node


class FakeHost:
    """A scratch node: `root` (FAKE_ROOT), `state_dir` (FAKE_STATE_DIR) and the `env` for our CLI."""

    def __init__(self, emulator, base):
        self.root = base / "root"
        self.state_dir = base / "fake-state"
        self.root.mkdir(parents=True)
        self.state_dir.mkdir(parents=True)
        self.emulator = emulator
        self.env = fake_env(emulator, self.root, self.state_dir)

    def path(self, node_path):
        return self.root / node_path.lstrip("/")

    def calls(self, command=None):
        """The recorded invocations of the stand-ins (argv lists), optionally of one command."""
        path = self.state_dir / "calls.jsonl"
        if not path.exists():
            return []
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e["argv"] for e in entries if command is None or e["command"] == command]

    def fake_state(self, name):
        """A stand-in's state file (systemd.json, kernel.json, azcmagent.json...) or {}."""
        path = self.state_dir / name
        return json.loads(path.read_text()) if path.exists() else {}

    def fail(self, command, message="injected failure", verb=None):
        """Make a stand-in exit 1 with `message` on stderr (optionally only for one verb)."""
        (self.state_dir / f"fail-{command}{'-' + verb if verb else ''}").write_text(message)

    def stop_units(self):
        return stop_fake_units(self.state_dir)


# One emulator per pytest process, however many modules import the fixture (tests/conftest.py
# re-exports it, and a test module may import it too): reference-counted, stopped by the last user.
_shared = {"emulator": None, "users": 0}


@pytest.fixture(scope="session")
def emulator(tmp_path_factory):
    if _shared["emulator"] is None:
        _shared["emulator"] = start_emulator(tmp_path_factory.mktemp("emulator"))
    _shared["users"] += 1
    yield _shared["emulator"]
    _shared["users"] -= 1
    if _shared["users"] == 0:
        _shared["emulator"].stop()
        _shared["emulator"] = None


@pytest.fixture
def fresh_emulator(emulator):
    emulator.reset()
    emulator.route_entra()  # back to this emulator, after a test that started its own
    yield emulator
    emulator.clear_faults()
    if emulator.clock_moved:  # one request more only for a test that moved it
        emulator.admin("DELETE", "clock")
        emulator.clock_moved = False


@pytest.fixture
def fake_host(fresh_emulator, tmp_path):
    host = FakeHost(fresh_emulator, tmp_path)
    yield host
    host.stop_units()
