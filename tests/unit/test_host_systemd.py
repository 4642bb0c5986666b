"""Host.run_system and Systemd against stand-in executables that keep unit state in files."""

import logging
import re

import pytest

from aks_flex_node.host import HOST_BIN_ENV, CommandError, Host, SkippedRun, unit_name

# A systemctl stand-in: records each call, keeps enabled/active units as lines in files,
# answers is-active/is-enabled with systemctl's exit codes (0 yes, 3 inactive, 1 disabled).
SYSTEMCTL = r"""#!/bin/sh
echo "systemctl $*" >> "$CALLS"
for unit in "$@"; do :; done
state="$STATE_DIR"
touch "$state/active" "$state/enabled"
drop() { grep -vxF "$unit" "$state/$1" > "$state/$1.new"; mv "$state/$1.new" "$state/$1"; }
case "$1" in
  is-active)
    if grep -qxF "$unit" "$state/active"; then [ "$2" = --quiet ] || echo active; exit 0; fi
    [ "$2" = --quiet ] || echo inactive; exit 3 ;;
  is-enabled)
    if grep -qxF "$unit" "$state/enabled"; then [ "$2" = --quiet ] || echo enabled; exit 0; fi
    [ "$2" = --quiet ] || echo disabled; exit 1 ;;
  start|restart)
    if [ -e "$state/broken-$unit" ]; then
      echo "Job for $unit failed because the control process exited with error code." >&2
      exit 1
    fi
    drop active; echo "$unit" >> "$state/active" ;;
  stop) drop active ;;
  enable) drop enabled; echo "$unit" >> "$state/enabled"
          if [ "$2" = --now ]; then drop active; echo "$unit" >> "$state/active"; fi ;;
  disable) drop enabled; if [ "$2" = --now ]; then drop active; fi ;;
  show)
    # systemctl show without a manager to ask (a chroot) fails, as the real one does.
    if [ -e "$state/no-manager" ]; then echo "Failed to connect to bus: Host is down" >&2; exit 1; fi
    shift; first=1
    for u in "$@"; do
      case "$u" in -*) continue ;; esac
      [ -n "$first" ] || echo; first=
      if grep -qxF "$u" "$state/active"; then echo ActiveState=active; else echo ActiveState=inactive; fi
      if grep -qxF "$u" "$state/enabled"; then echo UnitFileState=enabled; else echo UnitFileState=disabled; fi
    done ;;
esac
exit 0
"""


@pytest.fixture
def node(tmp_path):
    """A Host on a temp root whose live-system commands are the stand-ins above."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    calls = tmp_path / "calls"
    calls.touch()
    host = Host(root=root, env={
        "PATH": "/usr/bin:/bin",
        HOST_BIN_ENV: str(bin_dir),
        "CALLS": str(calls),
        "STATE_DIR": str(state),
    })
    host.calls = lambda: calls.read_text().splitlines()
    host.state = state
    return host


def test_unit_names_get_service_suffix_when_they_have_none():
    assert unit_name("kubelet") == "kubelet.service"
    assert unit_name("systemd-nspawn@kube1") == "systemd-nspawn@kube1.service"
    assert unit_name("containerd.service") == "containerd.service"
    assert unit_name("kubepods.slice") == "kubepods.slice"
    assert unit_name("network-online.target") == "network-online.target"


@pytest.mark.parametrize("bad", ["", "-kubelet", "--now", "a b", "../x", "x;y", None, 3])
def test_bad_unit_names_are_rejected(bad):
    with pytest.raises(ValueError, match=rf"unit = {repr(bad).replace('.', '[.]')}: expected"):
        unit_name(bad)


def test_enable_now_then_queries_answer_yes(node):
    sd = node.systemd
    assert not sd.is_enabled("kubelet") and not sd.is_active("kubelet")  # codes 1, 3: answers
    sd.enable("kubelet", now=True)
    assert sd.is_enabled("kubelet") and sd.is_active("kubelet")
    assert node.calls() == [
        "systemctl is-enabled kubelet.service",
        "systemctl is-active kubelet.service",
        "systemctl enable --now kubelet.service",
        "systemctl is-enabled kubelet.service",
        "systemctl is-active kubelet.service",
    ]


def test_states_of_several_units_take_one_systemctl_call(node):
    sd = node.systemd
    sd.enable("kubelet", now=True)
    sd.enable("containerd")
    assert sd.states(["containerd", "kubelet", "himdsd"]) == {
        "containerd": (True, False), "kubelet": (True, True), "himdsd": (False, False)}
    assert node.calls()[-1:] == [
        "systemctl show --property=UnitFileState,ActiveState containerd.service kubelet.service himdsd.service"]


def test_states_without_a_manager_to_ask_fall_back_to_is_enabled_and_is_active(node, tmp_path):
    node.systemd.enable("kubelet", now=True)
    (tmp_path / "state" / "no-manager").touch()
    assert node.systemd.states(["kubelet", "containerd"]) == {"kubelet": (True, True), "containerd": (False, False)}
    assert [c.split()[1] for c in node.calls()[-5:]] == ["show", "is-enabled", "is-active", "is-enabled", "is-active"]


def test_lifecycle_calls_and_state(node):
    sd = node.systemd
    sd.daemon_reload()
    sd.enable("containerd")
    assert sd.is_enabled("containerd") and not sd.is_active("containerd")
    sd.start("containerd")
    assert sd.is_active("containerd")
    sd.restart("containerd")
    sd.stop("containerd")
    assert not sd.is_active("containerd")
    sd.disable("containerd", now=True)
    assert not sd.is_enabled("containerd")
    mutating = [c for c in node.calls() if " is-" not in c]
    assert mutating == [
        "systemctl daemon-reload",
        "systemctl enable containerd.service",
        "systemctl start containerd.service",
        "systemctl restart containerd.service",
        "systemctl stop containerd.service",
        "systemctl disable --now containerd.service",
    ]


def test_a_failed_start_is_an_error_naming_the_unit(node):
    (node.state / "broken-kubelet.service").touch()
    with pytest.raises(CommandError) as caught:
        node.systemd.start("kubelet")
    message = str(caught.value)
    assert "systemctl start kubelet.service` failed with exit code 1" in message
    assert "Job for kubelet.service failed" in message


def test_stand_ins_learn_the_root(node, tmp_path):
    probe = tmp_path / "bin" / "sysctl"
    probe.write_text('#!/bin/sh\necho "$AKS_FLEX_NODE_ROOT"\n')
    probe.chmod(0o755)
    assert node.run_system(["sysctl", "--system"]).stdout.strip() == str(node.root)


def test_command_without_a_stand_in_falls_back_to_path(node):
    assert node.run_system(["echo", "hi"]).stdout == "hi\n"
    assert node.which("systemctl").endswith("/bin/systemctl")
    assert node.which("systemctl").startswith(node.env[HOST_BIN_ENV])


def test_root_prefix_without_stand_ins_skips_and_logs(tmp_path, caplog):
    calls = tmp_path / "calls"
    host = Host(root=tmp_path / "image", env={"PATH": "/usr/bin:/bin", "CALLS": str(calls)})
    caplog.set_level(logging.INFO, logger="aks_flex_node.host")
    result = host.run_system(["systemctl", "enable", "--now", "kubelet.service"])
    assert result == (0, "", "") and isinstance(result, SkippedRun) and result.skipped
    assert f"skipped (root prefix {tmp_path / 'image'}): systemctl enable --now kubelet.service" \
        in [r.getMessage() for r in caplog.records]
    # Queries under image building answer "no", so a plan still lists the changes.
    assert host.systemd.is_active("kubelet") is False
    assert host.systemd.is_enabled("kubelet") is False
    host.systemd.restart("kubelet")
    assert not calls.exists()


def test_host_bin_that_is_not_a_directory_skips_with_a_warning(tmp_path, caplog):
    host = Host(root=tmp_path, env={HOST_BIN_ENV: str(tmp_path / "missing")})
    caplog.set_level(logging.INFO, logger="aks_flex_node.host")
    assert host.run_system(["modprobe", "overlay"]).skipped
    assert any("is not a directory" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)


def test_skip_log_redacts_secrets(tmp_path, caplog):
    host = Host(root=tmp_path, env={})
    caplog.set_level(logging.INFO, logger="aks_flex_node.host")
    host.run_system(["azcmagent", "connect", "--secret", "pa55"], secrets=["pa55"])
    assert all("pa55" not in r.getMessage() for r in caplog.records)
    assert any("--secret ***" in r.getMessage() for r in caplog.records)


def test_live_root_runs_from_path_and_ignores_stand_ins(tmp_path):
    on_path, stand_ins = tmp_path / "path", tmp_path / "stand-ins"
    for d, word in ((on_path, "real"), (stand_ins, "stand-in")):
        d.mkdir()
        (d / "sysctl").write_text(f"#!/bin/sh\necho {word}\n")
        (d / "sysctl").chmod(0o755)
    host = Host("/", env={"PATH": str(on_path), HOST_BIN_ENV: str(stand_ins)})
    assert host.run_system(["sysctl", "--system"]).stdout == "real\n"
    assert host.which("sysctl") == str(on_path / "sysctl")


def test_run_system_rejects_bad_argv_even_when_skipping(tmp_path):
    with pytest.raises(TypeError, match=re.escape(repr("swapoff -a"))):  # the string refused
        Host(root=tmp_path, env={}).run_system("swapoff -a")
