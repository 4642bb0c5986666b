"""The maintainer-script matrix (Policy chapter 6): which invocations join, unjoin, or do
nothing. The scripts of debian/ run through debconf's real frontend on a throwaway root
(tests/deb/sandbox.py); the library runs for real. Azure is a closed loopback port, so a
join that starts fails fast in its preflight and is observable in status.json; whether a
join or an unjoin ran is read from the state the library leaves, never from a mock.
"""

import pytest

from aks_flex_node import config
from tests.deb import sandbox as sb_mod

TENANT = "0dad6e24-3327-44c9-8b75-3f34d6f1e6fb"
CLIENT = "d0c52b35-b60e-4f23-9a86-3622ae21b893"
CLUSTER = ("/subscriptions/93d23ebe-48c7-432a-8146-384c56a92ea6/resourceGroups/rg-aks"
           "/providers/Microsoft.ContainerService/managedClusters/aks-one")
# Nothing listens on port 9 of loopback: every Azure call is refused at once.
CLOSED = "https://127.0.0.1:9"


def preseed_join(sb, join="true", **answers):
    selections = {
        "join": ("boolean", join),
        "tenant_id": ("string", TENANT),
        "cluster_resource_id": ("string", CLUSTER),
        "auth_method": ("select", "service-principal"),
        "sp_client_id": ("string", CLIENT),
        "sp_client_secret": ("password", "s3cr3t-value"),
        "cloud": ("select", "custom"),
    }
    selections.update(answers)
    sb.preseed(selections)


def loopback_cloud(sb):
    """A configuration file edited by hand to point the custom cloud at a closed port."""
    config.write(sb_mod.CONF, {"cloud": "custom", "arm_endpoint": CLOSED, "authority_host": CLOSED},
                 root=str(sb.root))


def ran(sb):
    """Which operation the library ran last in this root: bootstrap, unbootstrap or None."""
    status = sb.status()
    return status and status.get("operation")


def joined_state(sb):
    sb.write_joined_ledger(CLUSTER)
    loopback_cloud(sb)
    secret = sb.path(sb_mod.SECRET)
    secret.write_text("s3cr3t-value\n")
    secret.chmod(0o600)
    config.write(sb_mod.CONF, {"tenant_id": TENANT, "cluster_resource_id": CLUSTER,
                               "auth_method": "service-principal", "sp_client_id": CLIENT,
                               "sp_client_secret_file": sb_mod.SECRET}, root=str(sb.root))


# ---- postinst ------------------------------------------------------------------------------


def test_postinst_configure_on_first_install_joins(sandbox):
    preseed_join(sandbox)
    loopback_cloud(sandbox)
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) == "bootstrap"
    # The join failed (Azure is unreachable): pending, and the agent started to retry it.
    assert sandbox.path(sb_mod.PENDING).exists()
    assert sandbox.status()["state"] == "pending"
    assert ["start", "aks-flex-node-agent.service"] in sandbox.invoked()
    assert "the join is pending" in result.stderr
    # Debconf's channel is stdout: the postinst and the library never print there.
    assert result.stdout == ""


def test_postinst_configure_on_upgrade_does_not_join(sandbox):
    preseed_join(sandbox)
    loopback_cloud(sandbox)
    result = sandbox.run("postinst", "configure", "0.0.9")
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert not sandbox.path(sb_mod.PENDING).exists()
    assert sandbox.invoked() == []
    # The configuration is still written from the answers.
    assert sandbox.conf_value("tenant_id") == TENANT


def test_postinst_configure_on_upgrade_finishes_a_pending_join(sandbox):
    preseed_join(sandbox)
    loopback_cloud(sandbox)
    sandbox.path(sb_mod.PENDING).parent.mkdir(parents=True)
    sandbox.path(sb_mod.PENDING).touch()
    result = sandbox.run("postinst", "configure", "0.0.9")
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) == "bootstrap"


@pytest.mark.parametrize("arc_agent_status, joins", [
    ("install ok unpacked", False),         # apt's one run: dpkg configures it after us
    ("install ok half-configured", False),  # its postinst failed or runs
    ("install ok installed", True),
])
@pytest.mark.parametrize("on_join_failure", ["retry-in-background", "fail-install"])
def test_postinst_leaves_the_join_to_the_agent_until_the_arc_agent_is_configured(
        sandbox, arc_agent_status, joins, on_join_failure):
    with open(sandbox.path("/var/lib/dpkg/status"), "a") as status:
        status.write(f"\nPackage: azcmagent\nStatus: {arc_agent_status}\nVersion: 1.50.0\n"
                     "Architecture: amd64\nMaintainer: M <m@example.org>\nDescription: Arc agent\n")
    preseed_join(sandbox, on_join_failure=("select", on_join_failure))
    loopback_cloud(sandbox)
    result = sandbox.run("postinst", "configure", "")
    if joins:
        assert ran(sandbox) == "bootstrap", result.stderr
        return
    # No attempt that could only fail at the first token; the agent joins once himdsd answers.
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert sandbox.path(sb_mod.PENDING).exists()
    assert ["start", "aks-flex-node-agent.service"] in sandbox.invoked()
    assert "(azcmagent) is unpacked but not configured yet" in result.stderr


@pytest.mark.parametrize("args, env", [
    (("configure", "0.1.0"), {"DEBCONF_RECONFIGURE": "1"}),  # dpkg-reconfigure today
    (("reconfigure", "0.1.0"), {}),  # and as debconf-devel(7) says it may one day call it
])
def test_postinst_reconfigure_joins(sandbox, args, env):
    preseed_join(sandbox)
    loopback_cloud(sandbox)
    result = sandbox.run("postinst", *args, env=env)
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) == "bootstrap"


def test_postinst_with_join_false_writes_the_configuration_and_does_not_join(sandbox):
    preseed_join(sandbox, join="false")
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert sandbox.invoked() == []
    assert sandbox.conf_value("cluster_resource_id") == CLUSTER
    assert "join is false" in result.stderr


def test_postinst_join_false_cancels_a_pending_join(sandbox):
    preseed_join(sandbox, join="false")
    sandbox.path(sb_mod.PENDING).parent.mkdir(parents=True)
    sandbox.path(sb_mod.PENDING).touch()
    result = sandbox.run("postinst", "configure", "0.0.9")
    assert result.returncode == 0, result.stderr
    assert not sandbox.path(sb_mod.PENDING).exists()
    assert ran(sandbox) is None


@pytest.mark.parametrize("args", [
    ("abort-upgrade", "0.1.0"),
    ("abort-remove",),
    ("abort-remove", "in-favour", "other-package", "1.0"),
    ("abort-deconfigure", "in-favour", "other-package", "1.0"),
    ("abort-deconfigure", "in-favour", "other-package", "1.0", "removing", "aks-flex-node", "0.1.0"),
])
def test_postinst_error_unwinding_does_nothing(sandbox, args):
    preseed_join(sandbox)
    result = sandbox.run("postinst", *args)
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert not sandbox.path(sb_mod.CONF).exists()
    assert sandbox.invoked() == []


def test_postinst_fail_install_mode_fails_and_leaves_no_pending_join(sandbox):
    preseed_join(sandbox, on_join_failure=("select", "fail-install"))
    loopback_cloud(sandbox)
    result = sandbox.run("postinst", "configure", "")
    assert result.returncode != 0
    assert ran(sandbox) == "bootstrap"
    assert sandbox.status()["state"] == "failed"  # nothing retries it
    assert not sandbox.path(sb_mod.PENDING).exists()
    assert "fail-install" in result.stderr
    assert sandbox.invoked() == []


@pytest.mark.parametrize("script", ["postinst", "prerm", "postrm"])
def test_an_unknown_argument_is_an_error(sandbox, script):
    result = sandbox.run(script, "frobnicate")
    assert result.returncode == 1
    assert "unknown argument 'frobnicate'" in result.stderr


# ---- prerm ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("remove",),
    ("deconfigure", "in-favour", "other-package", "1.0", "removing", "aks-flex-node", "0.1.0"),
])
def test_prerm_remove_and_deconfigure_unjoin(sandbox, args):
    joined_state(sandbox)
    result = sandbox.run("prerm", *args)
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) == "unbootstrap"
    assert sandbox.status()["state"] == "unjoined"
    assert not sandbox.path(sb_mod.LEDGER).exists()


@pytest.mark.parametrize("args", [("upgrade", "0.2.0"), ("failed-upgrade", "0.1.0")])
def test_prerm_upgrade_keeps_the_node_joined(sandbox, args):
    joined_state(sandbox)
    result = sandbox.run("prerm", *args)
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert sandbox.path(sb_mod.LEDGER).exists()


def test_prerm_remove_of_a_node_that_never_joined_does_nothing(sandbox):
    sandbox.path(sb_mod.PENDING).parent.mkdir(parents=True)
    sandbox.path(sb_mod.PENDING).touch()
    result = sandbox.run("prerm", "remove")
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert not sandbox.path(sb_mod.PENDING).exists()  # no retry after the package is gone


def test_prerm_remove_never_blocks_on_a_broken_configuration(sandbox):
    joined_state(sandbox)
    sandbox.set_conf_value("tenant_id", "not-a-uuid")
    result = sandbox.run("prerm", "remove")
    assert result.returncode == 0
    assert "cannot unjoin" in result.stderr and "tenant_id" in result.stderr
    assert sandbox.path(sb_mod.LEDGER).exists()  # what is left stays listed


def test_prerm_escape_hatch_skips_the_unjoin(sandbox):
    joined_state(sandbox)
    result = sandbox.run("prerm", "remove", env={"AKS_FLEX_NODE_UNJOIN": "skip"})
    assert result.returncode == 0, result.stderr
    assert ran(sandbox) is None
    assert "stays joined" in result.stderr


# ---- postrm --------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("remove",), ("upgrade", "0.2.0"), ("failed-upgrade", "0.1.0"), ("abort-install",),
    ("abort-install", "0.0.9"), ("abort-upgrade", "0.0.9"), ("disappear", "other-package", "1.0"),
])
def test_postrm_keeps_configuration_and_state_except_on_purge(sandbox, args):
    preseed_join(sandbox, join="false")
    assert sandbox.run("postinst", "configure", "").returncode == 0
    joined_state(sandbox)
    result = sandbox.run("postrm", *args)
    assert result.returncode == 0, result.stderr
    assert sandbox.path(sb_mod.CONF).exists()
    assert sandbox.path(sb_mod.SECRET).exists()
    assert sandbox.path(sb_mod.LEDGER).exists()
    assert sandbox.get("tenant_id") == TENANT


def test_postrm_purge_removes_everything(sandbox):
    preseed_join(sandbox, join="false")
    assert sandbox.run("postinst", "configure", "").returncode == 0
    joined_state(sandbox)
    conf = sandbox.path(sb_mod.CONF)
    (conf.parent / "aks-flex-node.conf.ucf-dist").write_text("left by ucf\n")
    assert str(conf) in sandbox.ucf_registry() and str(conf) in sandbox.ucf_hashfile()
    result = sandbox.run("postrm", "purge")
    assert result.returncode == 0, result.stderr
    assert not conf.parent.exists()  # config, secret, ucf copies: the whole directory
    assert not sandbox.path(sb_mod.STATE).exists()
    assert str(conf) not in sandbox.ucf_registry()
    assert str(conf) not in sandbox.ucf_hashfile()
    # db_purge: no question of ours is left in the debconf database.
    for path in sandbox.db_files():
        if path.name.startswith("config.dat") and not path.name.endswith("-old"):
            assert "aks-flex-node/" not in path.read_text()
    assert sandbox.get("tenant_id") is None
