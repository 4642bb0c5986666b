"""debconf behaviour of the package, through debconf's own tools on a private database:
a preseeded noninteractive install joins (against the Azure emulator), a bad preseed ends
with a message and no join, hand edits survive a reconfigure, the secret leaves debconf.
"""

import os
import shutil
import socket
import ssl
import stat

import pytest

from aks_flex_node import config
from tests import digest_fixtures, harness
from tests.deb import sandbox as sb_mod
from tests.deb.test_maintscripts import CLIENT, CLUSTER, TENANT, loopback_cloud, preseed_join
from tests.deb.conftest import require_tools
from tests.deb.test_templates import documented_preseeds
from tests.emulator import constants as C
from tests.emulator_fixtures import fake_env

SECRET = "s3cr3t-value"


def files_holding(root, needle):
    """Every file under root whose bytes contain needle."""
    found = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                if needle.encode() in f.read():
                    found.append(path)
    return found


# ---- a preseeded install, against the emulator ---------------------------------------------


@pytest.fixture
def emulated_node(fake_host, tmp_path):
    """The sandbox on the fake host's root, with what the join needs that debconf does not
    ask: the emulator's endpoints and CA in the configuration, as an admin would put them."""
    require_tools("debconf-set-selections", "debconf-communicate", "po2debconf", "ucf", "ucfr")
    sb = sb_mod.Sandbox(tmp_path)
    root = str(sb.root)
    harness.prepare_root(root)
    keys = sb.path("/var/opt/azcmagent/tokens")
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.symlink_to(fake_host.emulator.himds_key_dir)
    wrapper = harness.exec_plugin_wrapper(str(tmp_path))
    sb.path(harness.CA_PATH).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fake_host.emulator.ca_bundle, sb.path(harness.CA_PATH))
    emu = fake_host.emulator
    config.write(sb_mod.CONF, {
        "cloud": "custom", "arm_endpoint": emu.arm, "authority_host": emu.authority,
        "ca_bundle": harness.CA_PATH, "himds_endpoint": emu.himds, "artifact_mirror": emu.artifacts,
        # preflight probes the pause image's registry (image-registry): the emulator answers.
        "pause_image": emu.pause_image,
        "artifact_digests_file": digest_fixtures.write_digests(root),
        "node_ready_timeout": "60", "exec_plugin_command": wrapper,
    }, root=root)
    env = fake_env(emu, sb.root, sb.fake_state)
    sb.extra_env = {k: env[k] for k in ("FAKE_AZURE_ARM", "FAKE_AZURE_CA_BUNDLE", "NO_PROXY", "no_proxy")}
    sb.extra_env["PATH"] = f"{sb.hostbin}:{sb_mod.debtools.SYSPATH}"
    sb.emulator = emu
    return sb


def test_a_preseeded_noninteractive_install_joins(emulated_node):
    sb = emulated_node
    sb.preseed({
        "join": ("boolean", "true"),
        "tenant_id": ("string", C.TENANT_ID),
        "cluster_resource_id": ("string", C.CLUSTER_ID),
        "auth_method": ("select", "service-principal"),
        "sp_client_id": ("string", C.SP_CLIENT_ID),
        "sp_client_secret": ("password", C.SP_CLIENT_SECRET),
        "machine_name": ("string", "edge-7"),
        "tags": ("string", "site=lyon"),
        "cloud": ("select", "custom"),
    })
    result = sb.run("postinst", "configure", "", env=sb.extra_env)
    assert result.returncode == 0, result.stderr
    # Joined within the postinst's join timeout (AKS_FLEX_NODE_JOIN_TIMEOUT): the run
    # succeeded and nothing was left pending for the agent (below).
    status = sb.status()
    assert status["operation"] == "bootstrap" and status["state"] == "succeeded", result.stderr
    # Azure: the Arc machine has the preseeded name and tags; the node registered Ready.
    [machine] = sb.emulator.state()["machines"]
    assert machine["name"] == "edge-7"
    nodes = {n["metadata"]["name"]: n for n in sb.emulator.state()["nodes"].get(C.CLUSTER_NAME, [])}
    ready = [c for c in nodes["edge-7"]["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    # The package's side: no pending join, the agent started, the secret in its own file only.
    assert not sb.path(sb_mod.PENDING).exists()
    assert ["start", "aks-flex-node-agent.service"] in sb.invoked()
    assert sb.conf_value("arc_tags") == "site=lyon"
    assert sb.conf_value("sp_client_secret_file") == sb_mod.SECRET
    holders = files_holding(sb.root, C.SP_CLIENT_SECRET)
    assert holders == [str(sb.path(sb_mod.SECRET))], holders
    assert stat.S_IMODE(os.stat(holders[0]).st_mode) == 0o600
    assert "Joining" not in result.stdout and result.stdout == ""

    # apt remove: the prerm takes the node out of the cluster and removes the Arc machine.
    result = sb.run("prerm", "remove", env=sb.extra_env)
    assert result.returncode == 0, result.stderr
    assert sb.status()["operation"] == "unbootstrap" and sb.status()["state"] == "unjoined", result.stderr
    assert sb.emulator.state()["machines"] == []
    assert "edge-7" not in {n["metadata"]["name"] for n in
                            sb.emulator.state()["nodes"].get(C.CLUSTER_NAME, [])}
    assert not sb.path(sb_mod.LEDGER).exists()


# ---- a bad preseed ------------------------------------------------------------------------


def run_traced(sb, *args, **kw):
    """sb.run with debconf's protocol traced (DEBCONF_DEBUG=developer): the result, its
    stderr without the trace, and the questions the scripts put (INPUT), in order, as
    (priority, question). How often a question was put shows whether the config script's
    loop ended, with no clock involved."""
    env = {**kw.pop("env", {}), "DEBCONF_DEBUG": "developer"}
    result = sb.run(*args, env=env, **kw)
    trace, rest = [], []
    for line in result.stderr.splitlines(keepends=True):
        (trace if line.startswith("debconf (developer): ") else rest).append(line)
    result.stderr = "".join(rest)
    inputs = [tuple(line.split()[4:6]) for line in trace
              if line.startswith("debconf (developer): <-- INPUT ")]
    return result, inputs


def times_asked(inputs, question):
    return sum(1 for _priority, name in inputs if name == f"aks-flex-node/{question}")


def test_an_invalid_preseed_ends_without_hanging_with_the_message_and_without_a_join(sandbox):
    preseed_join(sandbox, tenant_id=("string", "not-a-uuid"))
    loopback_cloud(sandbox)
    result, inputs = run_traced(sandbox, "postinst", "configure", "")  # a hang: 300 s, then red
    # The config script's loop broke at once: the question was put once, and the error
    # note that comes before asking again never was.
    assert times_asked(inputs, "tenant_id") == 1, inputs
    assert times_asked(inputs, "invalid") == 0, inputs
    assert result.returncode == 0, result.stderr
    assert sandbox.status() is None  # no join was started
    assert not sandbox.path(sb_mod.PENDING).exists()
    # The message names the question, the value and what is expected.
    assert "aks-flex-node/tenant_id" in result.stderr
    assert "'not-a-uuid'" in result.stderr and "expected a UUID" in result.stderr
    assert "dpkg-reconfigure aks-flex-node" in result.stderr
    # The answer is in the file, for the admin to fix by hand.
    assert sandbox.conf_value("tenant_id") == "not-a-uuid"


def test_an_invalid_preseed_fails_the_install_in_fail_install_mode(sandbox):
    preseed_join(sandbox, cluster_resource_id=("string", "/subscriptions/nope"),
                 on_join_failure=("select", "fail-install"))
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == 2
    assert "aks-flex-node/cluster_resource_id" in result.stderr
    assert sandbox.status() is None


def nothing_written(sb):
    """No configuration, no secret on disk or in debconf, no join started or left pending."""
    assert not sb.path(sb_mod.CONF).exists()
    assert not sb.path(sb_mod.SECRET).exists()
    assert sb.get("sp_client_secret") == ""
    assert not [p for p in sb.db_files() if SECRET.encode() in p.read_bytes()]
    assert sb.status() is None
    assert not sb.path(sb_mod.STATE).exists()


def test_a_value_that_cannot_be_written_is_refused_not_dropped(sandbox):
    # Before: the tags were left out of the file and the join ran without them.
    preseed_join(sandbox, tags=("string", "env=edge#oops"), on_join_failure=("select", "fail-install"))
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == 2, result.stderr
    assert "aks-flex-node/tags = 'env=edge#oops'" in result.stderr and "'#'" in result.stderr
    nothing_written(sandbox)


@pytest.mark.parametrize("question, value, choices", [
    ("auth_method", "password", "service-principal, azure-cli, managed-identity"),
    ("role_preset", "admin", "legacy"),
    ("join_mode", "agentpool", "arc, agent-pool, bootstrap-token"),
    ("cloud", "AzureMars", "AzurePublicCloud, AzureUSGovernment, AzureChinaCloud, custom"),
    ("on_join_failure", "sometimes", "retry-in-background, fail-install"),
])
def test_a_select_answer_that_is_not_a_choice_is_refused(sandbox, question, value, choices):
    # debconf itself would put the first choice in its place, in silence, and the join ran
    # with it: the config script keeps it from INPUT, the postinst refuses it.
    answers = {"on_join_failure": ("select", "fail-install"), question: ("select", value)}
    preseed_join(sandbox, **answers)
    result = sandbox.run("postinst", "configure", "", timeout=60)
    # fail-install, or on_join_failure itself refused: the install fails, as the postinst
    # lets only retry-in-background finish.
    assert result.returncode == 2, result.stderr
    assert f"aks-flex-node/{question} = '{value}': expected one of {choices}" in result.stderr
    assert sandbox.get(question) == value  # not replaced by debconf
    nothing_written(sandbox)


def test_a_select_answer_that_is_not_a_choice_is_refused_in_retry_mode_without_a_pending_join(sandbox):
    preseed_join(sandbox, role_preset=("select", "admin"), on_join_failure=("select", "retry-in-background"))
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "aks-flex-node/role_preset = 'admin'" in result.stderr
    nothing_written(sandbox)


# ---- issue 11: the minimal preset is gone, join modes ----------------------------------------


@pytest.mark.parametrize("mode, code", [("fail-install", 2), ("retry-in-background", 0)])
def test_a_preseeded_minimal_role_preset_is_refused_and_points_at_agent_pool_mode(sandbox, mode, code):
    # Before: "minimal" was a choice, and the join gave the Arc identity a role without
    # DataActions, so the kubelet got 403. Now it is refused, never replaced by legacy.
    preseed_join(sandbox, role_preset=("select", "minimal"), on_join_failure=("select", mode))
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == code, result.stderr
    assert "aks-flex-node/role_preset = 'minimal': expected legacy" in result.stderr
    assert "join_mode = agent-pool" in result.stderr
    assert sandbox.get("role_preset") == "minimal"  # not replaced by debconf's first choice
    nothing_written(sandbox)


def test_a_file_that_still_says_minimal_is_refused_on_reconfigure(sandbox):
    # A file written when "minimal" was a choice: the config script copies it into debconf,
    # and the postinst refuses it; the file stays as it is, for the admin to fix.
    install_without_join(sandbox)
    sandbox.set_conf_value("role_preset", "minimal")
    before = sandbox.path(sb_mod.CONF).read_bytes()
    sandbox.preseed({"join": ("boolean", "true"), "on_join_failure": ("select", "fail-install")})
    result = sandbox.run("postinst", "configure", "0.1.0", env={"DEBCONF_RECONFIGURE": "1"}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "aks-flex-node/role_preset = 'minimal'" in result.stderr and "join_mode = agent-pool" in result.stderr
    assert sandbox.path(sb_mod.CONF).read_bytes() == before
    assert sandbox.status() is None


def seed_documented(sb, mode, **answers):
    """docs/preseed.md's example for `mode`, with `answers` on top."""
    seeded = dict(documented_preseeds()[mode])
    seeded.update(answers)
    sb.preseed(seeded)


def test_the_documented_agent_pool_preseed_configures_agent_pool_mode(sandbox):
    seed_documented(sandbox, "agent-pool", join=("boolean", "false"))
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == 0, result.stderr
    assert sandbox.conf_value("join_mode") == "agent-pool"
    assert sandbox.conf_value("agent_pool") == "flexpool"
    assert sandbox.conf_value("auth_method") == "service-principal"
    assert sandbox.conf_value("sp_client_secret_file") == sb_mod.SECRET
    assert sandbox.get("sp_client_secret") == ""
    # The library takes the result as it is.
    cfg = config.load(root=str(sandbox.root))
    assert cfg.join_mode == "agent-pool" and cfg.agent_pool == "flexpool"


BOOTSTRAP_TOKEN = "k8sabc.zyxwvutsrqponmlk"


def write_bootstrap_files(sb):
    token = sb.path("/etc/aks-flex-node/bootstrap-token")
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text(BOOTSTRAP_TOKEN + "\n")
    token.chmod(0o600)
    cafile = ssl.get_default_verify_paths().cafile
    ca = open(cafile, "rb").read() if cafile and os.path.isfile(cafile) else \
        b"-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n"
    sb.path("/etc/aks-flex-node/cluster-ca.crt").write_bytes(ca)


def test_the_documented_bootstrap_token_preseed_asks_no_credential_and_loads(sandbox):
    write_bootstrap_files(sandbox)
    seed_documented(sandbox, "bootstrap-token", join=("boolean", "false"))
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == 0, result.stderr
    assert sandbox.conf_value("join_mode") == "bootstrap-token"
    assert sandbox.conf_value("bootstrap_token_file") == "/etc/aks-flex-node/bootstrap-token"
    assert sandbox.conf_value("api_server") == "https://aks-edge-dns-12345678.hcp.westeurope.azmk8s.io:443"
    # No Azure credential: the [auth] keys are left as the shipped file has them, no secret.
    assert sandbox.conf_value("auth_method") == ""
    assert not sandbox.path(sb_mod.SECRET).exists()
    # The token is in its own file only, never in debconf's database.
    assert files_holding(sandbox.root, BOOTSTRAP_TOKEN) == [str(sandbox.path("/etc/aks-flex-node/bootstrap-token"))]
    assert config.load(root=str(sandbox.root)).join_mode == "bootstrap-token"


def test_switching_from_agent_pool_to_arc_leaves_no_agent_pool_key(sandbox):
    seed_documented(sandbox, "agent-pool", join=("boolean", "false"),
                    api_server=("string", "10.1.0.4:6443"))
    assert sandbox.run("postinst", "configure", "", timeout=60).returncode == 0
    assert sandbox.conf_value("api_server") == "10.1.0.4:6443"  # an override, kept in agent-pool mode
    sandbox.set_conf_value("join_mode", "arc")
    sandbox.preseed({"tags": ("string", "site=lyon")})
    reconfigure(sandbox)
    # The library refuses these with join_mode = arc: render-config empties them.
    assert sandbox.conf_value("agent_pool") == "" and sandbox.conf_value("api_server") == ""
    assert sandbox.conf_value("arc_tags") == "site=lyon"
    assert config.load(root=str(sandbox.root)).join_mode == "arc"


def test_switching_to_agent_pool_empties_the_arc_only_keys(sandbox):
    install_without_join(sandbox, tags=("string", "site=lyon"), location=("string", "westeurope"))
    assert sandbox.conf_value("arc_tags") == "site=lyon"
    # The file wins over a new preseed (docs/preseed.md#file-wins): the mode is edited there.
    sandbox.set_conf_value("join_mode", "agent-pool")
    sandbox.preseed({"agent_pool": ("string", "flexpool")})
    reconfigure(sandbox)
    assert sandbox.conf_value("join_mode") == "agent-pool"
    assert sandbox.conf_value("arc_tags") == "" and sandbox.conf_value("arc_location") == ""
    config.load(root=str(sandbox.root))


def agent_pool_loopback_cloud(sb):
    """loopback_cloud's file, in agent-pool mode (the file's join_mode wins over a preseed)."""
    loopback_cloud(sb)
    sb.set_conf_value("join_mode", "agent-pool")


def test_a_preseeded_azure_cli_in_agent_pool_mode_is_refused_saying_why(sandbox):
    seed_documented(sandbox, "agent-pool", auth_method=("select", "azure-cli"),
                    on_join_failure=("select", "fail-install"))
    agent_pool_loopback_cloud(sandbox)
    result = sandbox.run("postinst", "configure", "", timeout=60)
    assert result.returncode == 2, result.stderr
    assert "aks-flex-node/auth_method (auth_method in /etc/aks-flex-node/aks-flex-node.conf): 'azure-cli'" \
        in result.stderr
    assert "service-principal or managed-identity with join_mode = agent-pool" in result.stderr
    assert "Azure CLI login is a person's" in result.stderr
    assert sandbox.status() is None and not sandbox.path(sb_mod.PENDING).exists()


def test_a_bad_agent_pool_name_is_named_with_the_library_message(sandbox):
    seed_documented(sandbox, "agent-pool", agent_pool=("string", "Flex_Pool"),
                    on_join_failure=("select", "fail-install"))
    agent_pool_loopback_cloud(sandbox)
    result, inputs = run_traced(sandbox, "postinst", "configure", "")  # a hang: 300 s, then red
    # The config script's loop broke at once: asked once, no error note to ask again.
    assert times_asked(inputs, "agent_pool") == 1, inputs
    assert times_asked(inputs, "invalid") == 0, inputs
    assert result.returncode == 2, result.stderr
    assert "aks-flex-node/agent_pool (agent_pool in /etc/aks-flex-node/aks-flex-node.conf): 'Flex_Pool'" \
        in result.stderr
    assert "a lowercase letter, then up to 11 lowercase letters or digits" in result.stderr
    assert sandbox.status() is None


def test_an_interactive_agent_pool_install_re_asks_azure_cli_and_a_bad_pool_name(sandbox):
    # Teletype: a select is answered by its number. join_mode 2 = agent-pool; auth_method
    # 2 = azure-cli (refused, with why), then 1 = service principal.
    # join = no, at threshold medium: what a join would need is asked, nothing of low priority.
    answers = ["no", "2", TENANT, CLUSTER, "Flex_Pool", "flexpool", "2", "1", CLIENT, SECRET]
    result = sandbox.run("postinst", "configure", "", env={"DEBIAN_FRONTEND": "teletype", "DEBIAN_PRIORITY": "medium"},
                         input="\n".join(answers) + "\n", timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
    screen = result.stdout
    assert "How the machine joins the cluster:" in screen
    assert screen.count("Name of the Flex Node agent pool:") == 2
    assert 'The value "Flex_Pool" cannot be used' in screen
    assert screen.count("How to authenticate to Azure for the join:") == 2
    assert 'The value "azure-cli" cannot be used' in screen
    assert "Azure CLI login is a person's" in screen
    # Arc-only questions and the bootstrap overrides (low priority) were not asked.
    assert "Tags of the Arc machine:" not in screen and "File holding the bootstrap token:" not in screen
    assert sandbox.conf_value("join_mode") == "agent-pool"
    assert sandbox.conf_value("agent_pool") == "flexpool"
    assert sandbox.conf_value("auth_method") == "service-principal"


@pytest.mark.parametrize("value", ["soon", "-1", "0", "inf", "nan", "1e9", "\u0666\u0660", "86401", "60\n"])
@pytest.mark.parametrize("mode, code", [("retry-in-background", 0), ("fail-install", 2)])
def test_a_bad_join_timeout_is_refused_before_anything_is_marked(sandbox, value, mode, code):
    # Before: it was read after the pending mark, which then stayed behind, and fail-install
    # exited 1 (a join failure) instead of 2 (a bad input).
    preseed_join(sandbox, on_join_failure=("select", mode))
    loopback_cloud(sandbox)
    before = sandbox.path(sb_mod.CONF).read_bytes()
    result = sandbox.run("postinst", "configure", "", timeout=60,
                         env={"AKS_FLEX_NODE_JOIN_TIMEOUT": value})
    assert result.returncode == code, result.stderr
    assert f"AKS_FLEX_NODE_JOIN_TIMEOUT = {value!r}" in result.stderr
    assert sandbox.path(sb_mod.CONF).read_bytes() == before
    assert not sandbox.path(sb_mod.STATE).exists()  # no pending mark, no status, no lock
    assert not sandbox.path(sb_mod.SECRET).exists()
    assert sandbox.get("sp_client_secret") == ""


# ---- reconfigure, hand edits, the secret ----------------------------------------------------


def install_without_join(sb, **answers):
    preseed_join(sb, join="false", **{"cloud": ("select", "AzurePublicCloud"), **answers})
    result = sb.run("postinst", "configure", "")
    assert result.returncode == 0, result.stderr
    return result


def reconfigure(sb, **env):
    # dpkg-reconfigure runs the config script, then `postinst configure <version>` with
    # DEBCONF_RECONFIGURE=1 (dpkg-reconfigure(8)); debconf's frontend runs the config
    # script before the postinst, as here.
    result = sb.run("postinst", "configure", "0.1.0", env={"DEBCONF_RECONFIGURE": "1", **env})
    assert result.returncode == 0, result.stderr
    return result


def test_a_hand_edited_value_survives_a_reconfigure(sandbox):
    install_without_join(sandbox)
    other_subscription = "11111111-2222-3333-4444-555555555555"
    sandbox.set_conf_value("subscription_id", other_subscription)
    sandbox.set_conf_value("machine_name", "edited-by-hand")
    sandbox.set_conf_value("max_pods", "42")  # a key debconf does not ask about
    # A later preseed of a different value loses against the file (debconf-devel(7), "Config file
    # handling"; docs/preseed.md#file-wins).
    sandbox.preseed({"machine_name": ("string", "from-preseed")})
    reconfigure(sandbox)
    assert sandbox.conf_value("subscription_id") == other_subscription
    assert sandbox.conf_value("machine_name") == "edited-by-hand"
    assert sandbox.conf_value("max_pods") == "42"
    # debconf now holds the file's values, so the next dialog shows them.
    assert sandbox.get("machine_name") == "edited-by-hand"
    assert stat.S_IMODE(os.stat(sandbox.path(sb_mod.CONF)).st_mode) == 0o600


def test_the_secret_is_in_no_debconf_database_and_no_world_readable_file(sandbox):
    install_without_join(sandbox)
    secret_file = sandbox.path(sb_mod.SECRET)
    assert secret_file.read_text() == SECRET + "\n"
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    assert files_holding(sandbox.root, SECRET) == [str(secret_file)]
    assert sandbox.get("sp_client_secret") == ""
    assert sandbox.debconf("FGET aks-flex-node/sp_client_secret seen") == ["0 false"]
    assert sandbox.conf_value("sp_client_secret_file") == sb_mod.SECRET


def test_an_upgrade_keeps_the_stored_secret(sandbox):
    install_without_join(sandbox)
    result = sandbox.run("postinst", "configure", "0.0.9")
    assert result.returncode == 0, result.stderr
    assert sandbox.path(sb_mod.SECRET).read_text() == SECRET + "\n"
    assert sandbox.conf_value("sp_client_secret_file") == sb_mod.SECRET


def test_a_new_secret_on_reconfigure_replaces_the_stored_one(sandbox):
    install_without_join(sandbox)
    sandbox.preseed({"sp_client_secret": ("password", "rotated-secret")})
    reconfigure(sandbox)
    assert sandbox.path(sb_mod.SECRET).read_text() == "rotated-secret\n"
    assert files_holding(sandbox.root, "rotated-secret") == [str(sandbox.path(sb_mod.SECRET))]


def test_switching_to_azure_cli_drops_the_service_principal(sandbox):
    install_without_join(sandbox)
    sandbox.set_conf_value("auth_method", "azure-cli")
    reconfigure(sandbox)
    assert sandbox.conf_value("auth_method") == "azure-cli"
    assert sandbox.conf_value("sp_client_id") == ""
    assert sandbox.conf_value("sp_client_secret_file") == ""
    assert not sandbox.path(sb_mod.SECRET).exists()
    config.load(root=str(sandbox.root))  # and the result is a valid configuration


def test_reconfigure_to_another_cluster_leaves_the_old_one_first(sandbox):
    old_cluster = CLUSTER.replace("aks-one", "aks-old")
    install_without_join(sandbox)
    loopback_cloud(sandbox)
    sandbox.write_joined_ledger(old_cluster)
    sandbox.preseed({"join": ("boolean", "true")})
    result = reconfigure(sandbox)
    assert f"leaving {old_cluster} first" in result.stderr
    assert not sandbox.path(sb_mod.LEDGER).exists()  # the old join was undone
    assert sandbox.status()["operation"] == "bootstrap"  # then the new join ran
    assert sandbox.status()["cluster_resource_id"].lower() == CLUSTER.lower()


def test_the_config_script_reads_the_existing_file_before_asking(sandbox):
    install_without_join(sandbox)
    sandbox.set_conf_value("tenant_id", "99999999-8888-7777-6666-555555555555")
    result = sandbox.run("config", "configure", "0.1.0")
    assert result.returncode == 0, result.stderr
    assert sandbox.get("tenant_id") == "99999999-8888-7777-6666-555555555555"
    assert sandbox.get("sp_client_id") == CLIENT


def test_an_interactive_install_re_asks_an_invalid_answer_and_shows_progress(sandbox):
    # debconf's teletype frontend reads the answers from stdin: the same questions, error
    # template and progress bar a dialog user sees.
    loopback_cloud(sandbox)
    answers = ["yes", "1", "not-a-uuid", TENANT, CLUSTER, "1", CLIENT, SECRET]
    result = sandbox.run("postinst", "configure", "", env={"DEBIAN_FRONTEND": "teletype"},
                         input="\n".join(answers) + "\n", timeout=60)
    assert result.returncode == 0, result.stderr
    screen = result.stdout
    assert screen.count("Microsoft Entra tenant ID:") == 2  # asked again after the error
    assert "How the machine joins the cluster:" in screen  # asked first, at high priority
    assert 'The value "not-a-uuid" cannot be used' in screen
    assert "Client secret of the service principal:" in screen
    assert SECRET not in screen  # a password is not echoed
    assert "Joining the AKS cluster" in screen  # the progress bar's title
    assert sandbox.get("tenant_id") == TENANT
    assert sandbox.status()["operation"] == "bootstrap"
    # Only what the join needs was asked: optional questions stay at medium priority.
    assert "Subscription of the Arc machine:" not in screen


def test_a_join_that_hangs_is_cut_off_and_left_pending(sandbox):
    # Azure accepts the connection and never answers: the join must not hold dpkg's lock.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    silent = f"https://127.0.0.1:{listener.getsockname()[1]}"
    try:
        preseed_join(sandbox)
        config.write(sb_mod.CONF, {"cloud": "custom", "arm_endpoint": silent, "authority_host": silent},
                     root=str(sandbox.root))
        # Cut off by the postinst after its join timeout (3 s), not ended by the library's own
        # connection timeouts and retries: the message says which. A postinst that waited for
        # the join would outlast the 300 s ceiling (TimeoutExpired) or not say so.
        result = sandbox.run("postinst", "configure", "", env={"AKS_FLEX_NODE_JOIN_TIMEOUT": "3"},
                             timeout=300)
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr
    assert "did not finish within 3 s" in result.stderr
    assert sandbox.path(sb_mod.PENDING).exists()
    assert ["start", "aks-flex-node-agent.service"] in sandbox.invoked()


def test_a_configuration_file_broken_by_hand_is_reported_not_overwritten(sandbox):
    install_without_join(sandbox)
    conf = sandbox.path(sb_mod.CONF)
    broken = conf.read_text().replace("[cluster]", "[cluster\nthis line is not a key")
    conf.write_text(broken)
    preseed_join(sandbox)  # join = true, so the postinst checks the file
    result = reconfigure(sandbox)
    assert conf.read_text() == broken
    assert "left as it is" in result.stderr and "line" in result.stderr
    assert "not joining" in result.stderr
    assert sandbox.status() is None
