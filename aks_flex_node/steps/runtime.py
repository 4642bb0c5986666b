"""The container runtime: runc, containerd, containerd's config and unit, and its proxy."""

import json
import os

from aks_flex_node.engine.step import INSTALL, Plan, Step, reload_units, restart
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.http_policy import ProxySettingError
from aks_flex_node.steps import gpu, tracked
from aks_flex_node.steps.artifacts import ArtifactStep
from aks_flex_node.steps.kinds import Kind

BIN_DIR = "/usr/local/bin"
RUNC_PATH = BIN_DIR + "/runc"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_UNIT = "/etc/systemd/system/containerd.service"
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"
CONTAINERD_STATE_DIRS = ("/var/lib/containerd", "/opt/containerd")
PROXY_NAME = "aks-flex-node-proxy"


def proxy_paths(unit):
    """(drop-in, environment file) giving `unit` the run's proxy. Both live in the unit's
    drop-in directory: systemd merges only its *.conf files (systemd.unit(5)), so the
    .env file is read only where the drop-in names it."""
    directory = f"/etc/systemd/system/{unit}.service.d"
    return f"{directory}/{PROXY_NAME}.conf", f"{directory}/{PROXY_NAME}.env"


def proxy_dropin(env_path):
    # EnvironmentFile=, not Environment=: "environment variables set for a unit are exposed
    # to unprivileged clients via D-Bus IPC" (systemd.exec(5)), and the proxy URL may hold
    # a password; the file is 0600 and systemd reads it as root.
    return ("# Written by aks-flex-node from https_proxy and no_proxy in its config.\n"
            "[Service]\n"
            f"EnvironmentFile={env_path}\n").encode()


def plan_service_proxy(ctx, plan, step, unit):
    """Hand the run's HttpPolicy to a Go service (containerd, the kubelet): HTTPS_PROXY,
    HTTP_PROXY and NO_PROXY (both spellings) in a 0600 environment file its drop-in names.
    A change owes the unit's restart (the drop-in also a daemon-reload). Without a proxy
    both are absent: what an earlier run wrote is removed (or what was there restored)."""
    dropin, env_path = proxy_paths(unit)
    try:
        environment = ctx.http_policy.environment_file(ctx.config.cluster_domain)
    except ProxySettingError as err:
        raise FlexNodeError(str(err), remedy="change https_proxy or no_proxy in the config") from None
    env_owes = (restart(unit, f"{env_path} changed"),)
    dropin_owes = (reload_units(f"{dropin} changed"), restart(unit, f"{dropin} changed"))
    if environment is not None:
        # The environment file first: the drop-in never names a file that is not there.
        tracked.plan_file(ctx, plan, step, env_path, environment, 0o600,
                          why=f"{unit}'s proxy (https_proxy, no_proxy)", owes=env_owes)
        tracked.plan_file(ctx, plan, step, dropin, proxy_dropin(env_path), 0o644,
                          why=f"{unit} reads its proxy from {env_path}", owes=dropin_owes)
        return
    removed = False
    for path, owes in ((dropin, dropin_owes), (env_path, env_owes)):
        entry = ctx.ledger.get(Kind.FILE, path)
        if entry is None:
            continue
        removed = True
        for action in tracked.plan_undo_paths(ctx, [entry]).actions:
            plan.add(action.what, "the config has no https_proxy any more", action.run, owes=owes)
    # The drop-in directory, when writing the drop-in made it (and it is empty by then).
    directory = ctx.ledger.get(Kind.PARENT_DIR, os.path.dirname(dropin))
    if removed and directory is not None:
        for action in tracked.plan_undo_paths(ctx, [directory]).actions:
            plan.add(action.what, "it held only the proxy drop-in", action.run)


class RuncStep(ArtifactStep):
    # No restart: containerd's shims exec runc for each container, so a new runc is used
    # by the next container without restarting anything.
    name = "runc"
    help = "install runc (the OCI runtime containerd calls)"
    needs = ("cluster",)
    artifact = "runc"
    version_key = "runc_version"
    dest_dir = BIN_DIR
    single_file = "runc"


class ContainerdBinariesStep(ArtifactStep):
    name = "containerd"
    help = "install containerd, ctr and the runc shim"
    needs = ("cluster",)
    artifact = "containerd"
    version_key = "containerd_version"
    dest_dir = BIN_DIR
    restarts = "containerd"

    def dest_name(self, member):
        # Release tarballs hold bin/<tool>; older ones also ship shims v1 we don't need.
        parts = member.lstrip("./").split("/")
        if len(parts) == 2 and parts[0] == "bin" and parts[1]:
            return parts[1]
        return None


def containerd_config(cfg, imports=()):
    """config.toml in the version 2 schema, which containerd 1.6, 1.7 and 2.x all read.

    Table layout from the upstream agent (Azure/AKSFlexNode pkg/components/containerd/);
    systemd cgroups (kubelet uses the systemd driver); metrics on loopback by default (upstream's 0.0.0.0 exposes them to the network).
    `imports`: drop-ins of ours containerd merges over this file (containerd-config.toml(5),
    `imports`; steps/gpu.py's NVIDIA runtime). Without any, the file is as it always was.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    # A top-level key: before the first table (TOML v1.0.0, "Table").
    imported = f"imports = {json.dumps(list(imports))}\n" if imports else ""
    return f"""# Written by aks-flex-node; changes are overwritten at the next bootstrap.
version = 2
{imported}oom_score = 0

[{cri}]
  sandbox_image = "{cfg.pause_image}"

[{cri}.containerd]
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{RUNC_PATH}"
  SystemdCgroup = true

[{cri}.cni]
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"

[{cri}.registry]
  config_path = "/etc/containerd/certs.d"

[metrics]
  address = "{cfg.containerd_metrics_address}"
""".encode()


CONTAINERD_UNIT_TEXT = f"""# Written by aks-flex-node.
[Unit]
Description=containerd container runtime (managed by aks-flex-node)
Documentation=https://containerd.io
After=network.target local-fs.target

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart={BIN_DIR}/containerd --config {CONTAINERD_CONFIG}
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
""".encode()


class ContainerdConfigStep(tracked.OwnsPaths, Step):
    name = "containerd-config"
    help = "write containerd's config.toml, its systemd unit and its proxy drop-in"
    branch = INSTALL
    needs = ("containerd", "runc", "gpu")  # gpu: its drop-in is there before config.toml imports it
    state_dirs = CONTAINERD_STATE_DIRS

    def check(self, ctx):
        plan = Plan()
        self.plan_dir(ctx, plan, "/etc/containerd")
        # containerd's own state (images, snapshots): made here, so that when this node
        # leaves, unbootstrap takes it along (and leaves a pre-existing one alone).
        for state_dir in CONTAINERD_STATE_DIRS:
            self.plan_dir(ctx, plan, state_dir, 0o711)
        imports = (gpu.DROPIN,) if gpu.runtime_wanted(ctx)[0] else ()
        tracked.plan_file(ctx, plan, self.name, CONTAINERD_CONFIG, containerd_config(ctx.config, imports),
                          0o644, why="containerd's settings",
                          owes=(restart("containerd", f"{CONTAINERD_CONFIG} changed"),))
        tracked.plan_file(ctx, plan, self.name, CONTAINERD_UNIT, CONTAINERD_UNIT_TEXT, 0o644,
                          why="containerd's systemd unit",
                          owes=(reload_units(f"{CONTAINERD_UNIT} changed"),
                                restart("containerd", f"{CONTAINERD_UNIT} changed")))
        plan_service_proxy(ctx, plan, self.name, "containerd")
        if not plan.actions:
            plan.noop_reason = "config.toml, unit and proxy settings as wanted"
        return plan
