"""tools/host-packages.py: reading a release's Packages index for the names the Makefile installs."""

import importlib.util
import pathlib

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "host-packages.py"
spec = importlib.util.spec_from_file_location("host_packages", TOOL)
host_packages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(host_packages)

INDEX = """Package: mmdebstrap
Version: 1.5.7-1
Architecture: all

Package: tinyproxy-bin
Version: 1.11.2-1
Provides: tinyproxy-binary (= 1.11.2)

Package: python3-azure
Version: 20250603+git-1
Provides: python3-azure-identity (= 1.23.1), python3-azure-mgmt-hybridcompute
"""


def test_a_name_counts_when_a_package_has_it_or_provides_it():
    offered = host_packages.names_in(INDEX)
    assert {"mmdebstrap", "tinyproxy-bin", "tinyproxy-binary", "python3-azure", "python3-azure-identity",
            "python3-azure-mgmt-hybridcompute"} == offered
    assert host_packages.missing(["mmdebstrap", "python3-azure-identity", "nosuchpackage", "tinyproxy"],
                                 offered) == ["nosuchpackage", "tinyproxy"]
