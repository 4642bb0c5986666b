"""The container runtime: runc, containerd, containerd's config and unit."""

from aks_flex_node.engine.step import INSTALL, Plan, Step, reload_units, restart
from aks_flex_node.steps import tracked
from aks_flex_node.steps.artifacts import ArtifactStep

BIN_DIR = "/usr/local/bin"
RUNC_PATH = BIN_DIR + "/runc"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_UNIT = "/etc/systemd/system/containerd.service"
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"
CONTAINERD_STATE_DIRS = ("/var/lib/containerd", "/opt/containerd")


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


def containerd_config(cfg):
    """config.toml in the version 2 schema, which containerd 1.6, 1.7 and 2.x all read.

    Table layout from the upstream agent (Azure/AKSFlexNode pkg/components/containerd/);
    systemd cgroups (kubelet uses the systemd driver); metrics on loopback by default (upstream's 0.0.0.0 exposes them to the network).
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""# Written by aks-flex-node; changes are overwritten at the next bootstrap.
version = 2
oom_score = 0

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
    help = "write containerd's config.toml and its systemd unit"
    branch = INSTALL
    needs = ("containerd", "runc")
    state_dirs = CONTAINERD_STATE_DIRS

    def check(self, ctx):
        plan = Plan()
        self.plan_dir(ctx, plan, "/etc/containerd")
        # containerd's own state (images, snapshots): made here, so that when this node
        # leaves, unbootstrap takes it along (and leaves a pre-existing one alone).
        for state_dir in CONTAINERD_STATE_DIRS:
            self.plan_dir(ctx, plan, state_dir, 0o711)
        tracked.plan_file(ctx, plan, self.name, CONTAINERD_CONFIG, containerd_config(ctx.config),
                          0o644, why="containerd's settings",
                          owes=(restart("containerd", f"{CONTAINERD_CONFIG} changed"),))
        tracked.plan_file(ctx, plan, self.name, CONTAINERD_UNIT, CONTAINERD_UNIT_TEXT, 0o644,
                          why="containerd's systemd unit",
                          owes=(reload_units(f"{CONTAINERD_UNIT} changed"),
                                restart("containerd", f"{CONTAINERD_UNIT} changed")))
        if not plan.actions:
            plan.noop_reason = "config.toml and unit as wanted"
        return plan
