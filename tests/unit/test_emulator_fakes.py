"""The host-command stand-ins in tests/fakes/bin: azcmagent, systemctl, sysctl, modprobe, swapoff."""

import json
import os
import subprocess

import pytest

from tests.emulator import constants as C
from tests.emulator_fixtures import FAKES_BIN, fake_env
from tests.fake_command_fixtures import run, write_config
from tests.waiting import wait_for

MACHINE_ID = f"/subscriptions/{C.SUBSCRIPTION_ID}/resourceGroups/{C.ARC_RG}/providers/Microsoft.HybridCompute/machines/"


# -- azcmagent --------------------------------------------------------------------------------------


def test_connect_creates_the_machine_binds_himds_and_show_reports_it(fake_host):
    emu = fake_host.emulator
    token = emu.arm_token()
    proc = run(fake_host, "azcmagent", "connect", "--config", write_config(fake_host, **{"access-token": token}))
    assert proc.returncode == 0, proc.stderr
    machine = emu.state()["machines"][0]
    assert machine["id"] == MACHINE_ID + "fake-node" and machine["tags"] == {"env": "test", "owner": "ci"}
    assert emu.state()["himds"]["bound_machine"] == machine["id"]

    shown = json.loads(run(fake_host, "azcmagent", "show", "-j").stdout)
    assert shown["status"] == "Connected" and shown["resourceId"] == machine["id"]
    assert (shown["resourceName"], shown["resourceGroup"], shown["subscriptionId"], shown["tenantId"],
            shown["location"]) == ("fake-node", C.ARC_RG, C.SUBSCRIPTION_ID, C.TENANT_ID, C.LOCATION)
    assert shown["agentVersion"] == C.AZCMAGENT_VERSION
    assert "Agent Status                : Connected" in run(fake_host, "azcmagent", "show").stdout
    # The token went in the file, never on argv, and the call record holds no secret.
    calls = (fake_host.state_dir / "calls.jsonl").read_text()
    assert token not in calls and fake_host.calls("azcmagent")[0][:2] == ["azcmagent", "connect"]

    again = run(fake_host, "azcmagent", "connect", "--config", write_config(fake_host, **{"access-token": token}))
    assert again.returncode == 1 and "already connected" in again.stderr


def test_connect_with_service_principal_credentials_in_the_config(fake_host):
    proc = run(fake_host, "azcmagent", "connect", "--resource-name", "sp-node", "--config",
               write_config(fake_host, **{"service-principal-id": C.SP_CLIENT_ID,
                                          "service-principal-secret": C.SP_CLIENT_SECRET}))
    assert proc.returncode == 0, proc.stderr
    assert [m["name"] for m in fake_host.emulator.state()["machines"]] == ["sp-node"]  # the flag wins


@pytest.mark.parametrize("argv", [["--access-token", "emuat.x"], ["--access-token=emuat.x"],
                                  ["-p", "hunter2"], ["--service-principal-secret", "hunter2"]])
def test_connect_refuses_a_secret_on_the_command_line(fake_host, argv):
    proc = run(fake_host, "azcmagent", "connect", *argv, "--config", write_config(fake_host))
    assert proc.returncode == 1 and "refusing a secret on the command line" in proc.stderr
    assert fake_host.emulator.state()["machines"] == []
    recorded = (fake_host.state_dir / "calls.jsonl").read_text()
    assert "emuat.x" not in recorded and "hunter2" not in recorded and "<redacted>" in recorded


def test_connect_refuses_a_config_others_can_read_and_names_missing_keys(fake_host):
    token = fake_host.emulator.arm_token()
    proc = run(fake_host, "azcmagent", "connect", "--config",
               write_config(fake_host, mode=0o644, **{"access-token": token}))
    assert proc.returncode == 1 and "mode 0o644" in proc.stderr and "0600" in proc.stderr
    proc = run(fake_host, "azcmagent", "connect", "--config",
               write_config(fake_host, "partial.json", **{"access-token": token, "location": None,
                                                          "tenant-id": None}))
    assert proc.returncode == 1 and "tenant-id, location" in proc.stderr


def test_connect_with_a_bad_token_fails_with_the_arm_error(fake_host):
    proc = run(fake_host, "azcmagent", "connect", "--config", write_config(fake_host, **{"access-token": "emuat.bad"}))
    assert proc.returncode == 1 and "HTTP 401" in proc.stderr and "InvalidAuthenticationToken" in proc.stderr
    assert json.loads(run(fake_host, "azcmagent", "show", "--json").stdout)["status"] == "Disconnected"


def test_disconnect_local_only_and_with_azure(fake_host):
    emu = fake_host.emulator
    config = write_config(fake_host, **{"access-token": emu.arm_token()})
    assert run(fake_host, "azcmagent", "connect", "--config", config).returncode == 0

    local = run(fake_host, "azcmagent", "disconnect", "--force-local-only")
    assert local.returncode == 0
    state = emu.state()
    assert state["himds"]["bound_machine"] is None
    assert [m["status"] for m in state["machines"]] == ["Disconnected"]  # still in Azure, heartbeat gone
    assert json.loads(run(fake_host, "azcmagent", "show", "-j").stdout)["status"] == "Disconnected"
    assert run(fake_host, "azcmagent", "disconnect", "--force-local-only").returncode == 0  # idempotent

    assert run(fake_host, "azcmagent", "connect", "--resource-name", "second", "--config", config).returncode == 0
    gone = run(fake_host, "azcmagent", "disconnect", "--config", config)
    assert gone.returncode == 0, gone.stderr
    assert [m["name"] for m in emu.state()["machines"]] == ["fake-node"]  # "second" deleted in Azure
    nothing = run(fake_host, "azcmagent", "disconnect", "--config", config)
    assert nothing.returncode == 1 and "not connected" in nothing.stderr


def test_azcmagent_version_and_unknown_verbs(fake_host):
    assert run(fake_host, "azcmagent", "version").stdout.strip() == f"azcmagent version {C.AZCMAGENT_VERSION}"
    proc = run(fake_host, "azcmagent", "frobnicate")
    assert proc.returncode == 1 and "unknown command 'frobnicate'" in proc.stderr


# -- systemctl ---------------------------------------------------------------------------------------


def unit(host, name, text, directory="/etc/systemd/system"):
    path = host.path(f"{directory}/{name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_systemctl_tracks_unit_state_like_systemd(fake_host):
    assert run(fake_host, "systemctl", "start", "ghost").returncode == 5
    assert "Unit ghost.service not found." in run(fake_host, "systemctl", "start", "ghost").stderr
    assert run(fake_host, "systemctl", "enable", "ghost.service").returncode == 1

    unit(fake_host, "containerd.service", "[Service]\nExecStart=/usr/bin/containerd\n", "/lib/systemd/system")
    assert run(fake_host, "systemctl", "daemon-reload").returncode == 0
    assert run(fake_host, "systemctl", "enable", "--now", "containerd").returncode == 0
    active = run(fake_host, "systemctl", "is-active", "containerd")
    assert (active.returncode, active.stdout.strip()) == (0, "active")
    assert run(fake_host, "systemctl", "is-enabled", "containerd").stdout.strip() == "enabled"
    assert run(fake_host, "systemctl", "show", "-p", "ActiveState", "--value", "containerd").stdout == "active\n"

    assert run(fake_host, "systemctl", "disable", "--now", "containerd.service").returncode == 0
    inactive = run(fake_host, "systemctl", "is-active", "containerd")
    assert (inactive.returncode, inactive.stdout.strip()) == (3, "inactive")
    disabled = run(fake_host, "systemctl", "is-enabled", "containerd")
    assert (disabled.returncode, disabled.stdout.strip()) == (1, "disabled")

    run(fake_host, "systemctl", "mask", "containerd")
    masked = run(fake_host, "systemctl", "start", "containerd")
    assert masked.returncode == 1 and "masked" in masked.stderr
    state = fake_host.fake_state("systemd.json")
    assert state["daemon_reloads"] == 1 and state["units"]["containerd.service"]["masked"] is True
    assert ["systemctl", "enable", "--now", "containerd"] in fake_host.calls("systemctl")


def test_systemctl_launches_a_unit_with_systemd_expansion_and_stops_it(fake_host):
    script = fake_host.path("/usr/local/bin/demo")
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$FAKE_STATE_DIR/demo-argv\"\n"
                      "echo \"$DEMO_MODE\" > \"$FAKE_STATE_DIR/demo-env\"\nexec sleep 60\n")
    script.chmod(0o755)
    unit(fake_host, "demo.service", "[Unit]\nDescription=demo\n[Service]\nEnvironmentFile=/etc/default/demo\n"
                                     "EnvironmentFile=-/etc/default/missing\nExecStart=/bin/false\n")
    unit(fake_host, "demo.service.d/10-exec.conf",
         '[Service]\nEnvironment="DEMO_MODE=drop in" OTHER=1\nExecStart=\nExecStart=-/usr/local/bin/demo \\\n'
         '  --labels="${LABELS}" $FLAGS --literal "two words"\n')
    fake_host.path("/etc/default").mkdir(parents=True)
    fake_host.path("/etc/default/demo").write_text('LABELS="a=b,c=d"\nFLAGS="--v=2  --x=y"\n# comment\n')
    env = {"FAKE_SYSTEMD_LAUNCH": "demo.service"}
    proc = run(fake_host, "systemctl", "start", "demo", env=env)
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda: (fake_host.state_dir / "demo-env").exists(), timeout=30)
    argv = (fake_host.state_dir / "demo-argv").read_text().splitlines()
    assert argv == ["--labels=a=b,c=d", "--v=2", "--x=y", "--literal", "two words"]
    assert (fake_host.state_dir / "demo-env").read_text().strip() == "drop in"
    record = fake_host.fake_state("systemd.json")["units"]["demo.service"]
    pid = record["pid"]
    assert os.path.exists(f"/proc/{pid}") and record["argv"][0] == str(script)

    assert run(fake_host, "systemctl", "stop", "demo", env=env).returncode == 0
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
    assert fake_host.fake_state("systemd.json")["units"]["demo.service"]["pid"] is None


def test_systemctl_start_fails_when_the_executable_is_missing(fake_host):
    unit(fake_host, "kubelet.service", "[Service]\nExecStart=/usr/local/bin/kubelet --v=2\n")
    proc = run(fake_host, "systemctl", "start", "kubelet")
    assert proc.returncode == 1 and "/usr/local/bin/kubelet is missing" in proc.stderr
    is_active = run(fake_host, "systemctl", "is-active", "kubelet")
    assert (is_active.returncode, is_active.stdout.strip()) == (3, "failed")


# -- kernel stand-ins and fault files ----------------------------------------------------------------------


def test_sysctl_modprobe_swapoff_record_the_kernel_state(fake_host):
    conf = fake_host.path("/etc/sysctl.d/999-sysctl-aks.conf")
    conf.parent.mkdir(parents=True)
    conf.write_text("# Kubernetes\nnet.ipv4.ip_forward = 1\nvm.overcommit_memory=1\n")
    system = run(fake_host, "sysctl", "--system")
    assert system.returncode == 0 and "* Applying /etc/sysctl.d/999-sysctl-aks.conf ..." in system.stdout
    assert run(fake_host, "sysctl", "-n", "net.ipv4.ip_forward").stdout.strip() == "1"
    assert run(fake_host, "modprobe", "overlay", "br_netfilter").returncode == 0
    assert run(fake_host, "modprobe", "-r", "overlay").returncode == 0
    assert run(fake_host, "swapoff", "-a").returncode == 0
    kernel = fake_host.fake_state("kernel.json")
    assert kernel["sysctl"] == {"net.ipv4.ip_forward": "1", "vm.overcommit_memory": "1"}
    assert kernel["sysctl_system_runs"] == 1 and kernel["modules"] == ["br_netfilter"] and kernel["swap"] == "off"
    assert fake_host.calls("swapoff") == [["swapoff", "-a"]]


@pytest.mark.parametrize("command,argv", [("modprobe", ["overlay"]), ("sysctl", ["--system"]),
                                          ("swapoff", ["-a"]), ("systemctl", ["daemon-reload"]),
                                          ("azcmagent", ["show", "-j"])])
def test_fault_files_make_a_stand_in_fail(fake_host, command, argv):
    fake_host.fail(command, "modprobe: FATAL: Module overlay not found.")
    proc = run(fake_host, command, *argv)
    assert proc.returncode == 1 and proc.stderr == "modprobe: FATAL: Module overlay not found.\n"
    assert fake_host.calls(command) == [[command, *argv]]  # recorded even when failing


def test_verb_specific_fault_file(fake_host):
    unit(fake_host, "kubelet.service", "[Service]\nExecStart=/bin/true\n")
    fake_host.fail("systemctl", "Failed to restart kubelet.service", verb="restart")
    assert run(fake_host, "systemctl", "daemon-reload").returncode == 0
    assert run(fake_host, "systemctl", "restart", "kubelet").returncode == 1


def test_stand_ins_need_their_state_dir(fake_host, tmp_path):
    env = {k: v for k, v in fake_host.env.items() if k != "FAKE_STATE_DIR"}
    proc = subprocess.run([str(FAKES_BIN / "modprobe"), "overlay"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "FAKE_STATE_DIR is not set" in proc.stderr


def test_fake_env_puts_the_stand_ins_first_and_drops_the_ca_override(fresh_emulator, tmp_path, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    env = fake_env(fresh_emulator, tmp_path / "root", tmp_path / "state")
    assert env["PATH"].split(os.pathsep)[0] == str(FAKES_BIN) == env["AKS_FLEX_NODE_HOST_BIN"]
    assert "REQUESTS_CA_BUNDLE" not in env and env["NO_PROXY"] == "127.0.0.1,localhost"
    assert (env["FAKE_ROOT"], env["FAKE_STATE_DIR"]) == (str(tmp_path / "root"), str(tmp_path / "state"))
    assert (env["FAKE_AZURE_ARM"], env["FAKE_AZURE_CA_BUNDLE"]) == (fresh_emulator.arm, fresh_emulator.ca_bundle)
    which = subprocess.run(["sh", "-c", "command -v systemctl"], env=env, capture_output=True, text=True)
    assert which.stdout.strip() == str(FAKES_BIN / "systemctl")
