"""The preflight OS check claims exactly the releases the suite measured (docs/ubuntu.md):
Debian 12 and Ubuntu 24.04 and newer; Ubuntu 22.04 (whose SDKs fail the suite) is warned
about, a derivative is called untested, anything else is refused."""

import types

import pytest

from aks_flex_node import preflight
from aks_flex_node.host.root import Host


def _check(tmp_path, os_release):
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "os-release").write_text(os_release)
    ctx = types.SimpleNamespace(host=Host(root=str(tmp_path), env={"PATH": "/usr/bin:/bin"}))
    return preflight.check_os(ctx)


@pytest.mark.parametrize("os_release", [
    'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    'ID=debian\nVERSION_ID="13"\n',
    'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n',
])
def test_measured_releases_pass(tmp_path, os_release):
    assert _check(tmp_path, os_release) is None


def test_ubuntu_22_04_is_older_than_tested(tmp_path):
    finding = _check(tmp_path, 'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n'
                               'PRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    assert finding.severity == preflight.WARNING
    assert "Ubuntu 22.04.4 LTS is older than we test" in finding.message
    assert "Ubuntu 24.04 or newer" in finding.remedy


def test_a_derivative_is_untested_not_silently_passed(tmp_path):
    finding = _check(tmp_path, 'ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_ID="22"\n'
                               'PRETTY_NAME="Linux Mint 22"\n')
    assert finding.severity == preflight.WARNING
    assert "Linux Mint 22 is not tested" in finding.message


def test_another_family_is_refused(tmp_path):
    finding = _check(tmp_path, 'ID=fedora\nVERSION_ID=40\nPRETTY_NAME="Fedora Linux 40"\n')
    assert finding.severity == preflight.ERROR
    assert "unsupported OS Fedora Linux 40" in finding.message
