"""The preflight OS check claims exactly the releases the project proves (docs/testing.md):
Debian 12 and 13, Ubuntu 22.04, 24.04 and 26.04; an older or a newer release of either, or one
without a version (Debian testing), is warned about, a derivative is called untested,
anything else is refused."""

import types

import pytest

from aks_flex_node.steps.preflight import checks as preflight
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
    'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n',
    'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="26.04"\nPRETTY_NAME="Ubuntu 26.04 LTS"\n',
])
def test_measured_releases_pass(tmp_path, os_release):
    assert _check(tmp_path, os_release) is None


@pytest.mark.parametrize("os_release, name", [
    ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="20.04"\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n', "Ubuntu 20.04.6 LTS"),
    ('ID=debian\nVERSION_ID="11"\nPRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\n', "Debian GNU/Linux 11 (bullseye)"),
])
def test_an_older_release_is_older_than_tested(tmp_path, os_release, name):
    finding = _check(tmp_path, os_release)
    assert finding.severity == preflight.WARNING
    assert f"{name} is older than we test" in finding.message
    assert finding.remedy == "use Debian 12 or 13, or Ubuntu 22.04, 24.04 or 26.04"


@pytest.mark.parametrize("os_release, name, like", [
    ('ID=debian\nVERSION_ID="14"\nPRETTY_NAME="Debian GNU/Linux 14 (forky)"\n', "Debian GNU/Linux 14 (forky)",
     "Debian 13"),
    # Debian testing and unstable have no VERSION_ID (os-release(5): "may be omitted").
    ('ID=debian\nVERSION_CODENAME=forky\nPRETTY_NAME="Debian GNU/Linux forky/sid"\n', "Debian GNU/Linux forky/sid",
     "Debian 13"),
    ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="25.04"\nPRETTY_NAME="Ubuntu 25.04"\n', "Ubuntu 25.04", "Ubuntu 26.04"),
    ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="26.10"\nPRETTY_NAME="Ubuntu 26.10"\n', "Ubuntu 26.10", "Ubuntu 26.04"),
])
def test_a_release_nothing_proves_is_warned_about_not_refused(tmp_path, os_release, name, like):
    finding = _check(tmp_path, os_release)
    assert finding.severity == preflight.WARNING
    assert f"{name} is not a release we test" in finding.message
    assert f"as far as it matches {like}; tested: Debian 12 or 13, or Ubuntu 22.04, 24.04 or 26.04" in finding.remedy


def test_a_derivative_is_untested_not_silently_passed(tmp_path):
    finding = _check(tmp_path, 'ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_ID="22"\n'
                               'PRETTY_NAME="Linux Mint 22"\n')
    assert finding.severity == preflight.WARNING
    assert "Linux Mint 22 is not tested" in finding.message


def test_another_family_is_refused(tmp_path):
    finding = _check(tmp_path, 'ID=fedora\nVERSION_ID=40\nPRETTY_NAME="Fedora Linux 40"\n')
    assert finding.severity == preflight.ERROR
    assert "unsupported OS Fedora Linux 40" in finding.message
