"""StrictModes (sshd_config(5)) for the configuration: a file it is read from, or a file or
command it names, that someone other than root could change is refused, with the chmod or
chown that fixes it. Real files under a temp root; the tests run as root (chown)."""

import os

import pytest

from aks_flex_node import config
from aks_flex_node.errors import ConfigError
from tests.config_fixtures import make_root, secret_file, sp, with_values, write_conf

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")

NOBODY = 65534


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def problems(root, sections=None, **kwargs):
    with pytest.raises(ConfigError) as excinfo:
        config.load(root=str(root), **kwargs)
    assert excinfo.value.exit_code == 2
    return [str(p) for p in excinfo.value.problems]


def test_a_config_file_anyone_can_write_owned_by_nobody_is_refused(root):
    """The defect: a 0666 file owned by nobody was accepted, and it names commands root runs."""
    path = write_conf(root, with_values())
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o666)
    found = problems(root)
    assert f"config file = '{path}': expected a file owned by root (its owner is uid {NOBODY}): chown root: {path}" \
        in found
    assert f"config file = '{path}': expected a file only its owner can write (mode 0666 lets its group and " \
           f"others change it): chmod go-w {path}" in found
    os.chown(path, 0, 0)
    path.chmod(0o644)  # readable by all is fine: the config holds no secret
    assert config.load(root=str(root)).tenant_id


@pytest.mark.parametrize("mode", [0o620, 0o602])
def test_a_config_file_its_group_or_others_can_write_is_refused(root, mode):
    path = write_conf(root, with_values())
    path.chmod(mode)
    (found,) = problems(root)
    assert found.endswith(f"chmod go-w {path}")


def test_a_directory_others_can_write_to_is_refused_unless_sticky(root):
    write_conf(root, with_values())
    directory = root / "etc/aks-flex-node"
    directory.chmod(0o777)
    (found,) = problems(root)
    assert f"({directory} has mode 0777, so its group and others can replace what is in it): " \
           f"chmod go-w {directory}" in found
    directory.chmod(0o1777)  # sticky: nobody else can rename or unlink root's file (unlink(2))
    assert config.load(root=str(root)).tenant_id
    directory.chmod(0o755)
    os.chown(directory, NOBODY, 0)
    (found,) = problems(root)
    assert f"({directory} is owned by uid {NOBODY}): chown root: {directory}" in found


def test_only_directories_inside_the_root_prefix_are_checked(root):
    write_conf(root, with_values())
    root.chmod(0o777)  # the image builder's own directory: not ours to judge
    try:
        assert config.load(root=str(root)).tenant_id
    finally:
        root.chmod(0o755)


def test_a_symlinked_config_is_checked_where_it_leads(root):
    elsewhere = root / "srv/shared"
    elsewhere.mkdir(parents=True)
    elsewhere.chmod(0o777)
    link = write_conf(root, with_values())
    target = elsewhere / "aks.conf"
    link.rename(target)
    link.symlink_to(target)
    (found,) = problems(root)
    assert f"({elsewhere} has mode 0777" in found and found.endswith(f"chmod go-w {elsewhere}")


def test_a_secret_file_in_a_directory_others_can_write_to_is_refused(root):
    path = secret_file(root, name="sp-secret")
    (root / "etc/aks-flex-node").chmod(0o777)
    write_conf(root, sp(sp_client_secret_file=path))
    found = problems(root)
    # the configuration file itself is in the same directory
    assert any(f.startswith("config file = ") for f in found)
    assert any(f.startswith(f"sp_client_secret_file = '{path}'") and "chmod go-w" in f for f in found)


def test_a_ca_bundle_others_can_change_is_refused(root):
    """It decides whom the Azure calls trust."""
    ca = root / "etc/ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    ca.chmod(0o666)
    write_conf(root, with_values(ca_bundle="/etc/ca.pem"))
    (found,) = problems(root)
    assert found.startswith("ca_bundle = '/etc/ca.pem'") and found.endswith(f"chmod go-w {ca}")
    ca.chmod(0o644)
    assert config.load(root=str(root)).ca_bundle == "/etc/ca.pem"


@pytest.mark.parametrize("key", ["azcmagent", "exec_plugin_command"])
def test_a_command_others_can_change_is_refused_when_it_is_there(root, key):
    write_conf(root, with_values(**{key: "/opt/bin/tool"}))
    assert config.load(root=str(root))[key] == "/opt/bin/tool"  # not installed yet: fine
    tool = root / "opt/bin/tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o777)
    (found,) = problems(root)
    assert found.startswith(f"{key} = '/opt/bin/tool'") and found.endswith(f"chmod go-w {tool}")
    tool.chmod(0o755)
    assert config.load(root=str(root))[key] == "/opt/bin/tool"


def test_an_upstream_config_json_anyone_can_write_is_refused(root):
    path = root / "etc/aks-flex-node/config.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    path.chmod(0o646)
    with pytest.raises(ConfigError) as excinfo:
        config.load_upstream_json("/etc/aks-flex-node/config.json", root=str(root))
    assert [p.key for p in excinfo.value.problems] == ["config file"]
    assert excinfo.value.problems[0].expected.endswith(f"chmod go-w {path}")


def test_the_packaged_file_mode_passes(root):
    """debian/postinst writes the configuration with ucf and then chmod 0600, owned by
    root, in /etc/aks-flex-node made 0755 by mkdir -p under dpkg's umask 022."""
    path = write_conf(root, with_values())
    path.chmod(0o600)
    (root / "etc/aks-flex-node").chmod(0o755)
    assert config.load(root=str(root)).tenant_id
