"""The debconf templates, their translations' template, and the documented preseed interface."""

import re
import shutil
import subprocess

import pytest

from aks_flex_node import config
from aks_flex_node.maintainer import debconf_answers
from tests.deb import debtools
from tests.deb.conftest import require_tools

# The public preseed interface (issue 3): question -> (type, default or None, Choices-C).
QUESTIONS = {
    "join": ("boolean", "false", None),
    "subscription_id": ("string", "", None),
    "tenant_id": ("string", None, None),
    "cloud": ("select", "AzurePublicCloud",
              ["AzurePublicCloud", "AzureUSGovernment", "AzureChinaCloud", "custom"]),
    "cluster_resource_id": ("string", None, None),
    "resource_group": ("string", "", None),
    "location": ("string", "", None),
    "machine_name": ("string", "", None),
    "tags": ("string", "", None),
    "auth_method": ("select", "service-principal", ["service-principal", "azure-cli", "managed-identity"]),
    "sp_client_id": ("string", None, None),
    "sp_client_secret": ("password", None, None),
    "kubernetes_version": ("string", "", None),
    # Only legacy: "minimal" cannot work on Azure (issue 11); a preseeded one is refused.
    "role_preset": ("select", "legacy", ["legacy"]),
    "on_join_failure": ("select", "retry-in-background", ["retry-in-background", "fail-install"]),
    # Issue 11: how the machine joins, and what the agent-pool and bootstrap-token modes need.
    "join_mode": ("select", "arc", ["arc", "agent-pool", "bootstrap-token"]),
    "agent_pool": ("string", None, None),
    "bootstrap_token_file": ("string", None, None),
    "api_server": ("string", None, None),
    "cluster_ca_file": ("string", None, None),
}


def parse_templates(text):
    """{name: {field: value}} from an RFC 822 templates file (continuation lines joined)."""
    templates = {}
    for stanza in re.split(r"\n\s*\n", text.strip()):
        fields, last = {}, None
        for line in stanza.splitlines():
            if line.startswith(" ") and last:
                fields[last] += "\n" + line[1:]
            else:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        templates[fields["Template"]] = fields
    return templates


@pytest.fixture(scope="module")
def templates():
    return parse_templates((debtools.DEBIAN / "templates").read_text())


def split_choices(text):
    return [c.strip() for c in text.split(",")]


def test_every_question_of_the_preseed_interface_is_there(templates):
    for name, (kind, default, choices) in QUESTIONS.items():
        template = templates[f"aks-flex-node/{name}"]
        assert template["Type"] == kind, name
        if default is not None:
            assert template.get("Default", "") == default, name
        else:
            assert "Default" not in template, name
        if choices:
            assert split_choices(template["Choices-C"]) == choices, name
            # Translatable labels, one per stable value.
            assert len(split_choices(template["__Choices"])) == len(choices), name
            assert template.get("Default", choices[0]) in choices


def test_every_template_is_translatable_and_styled(templates):
    for name, template in templates.items():
        assert "_Description" in template and "Description" not in template, name
        short = template["_Description"].split("\n")[0]
        assert len(short) <= 75, name
        if template["Type"] == "boolean":
            assert short.endswith("?"), name
        elif template["Type"] in ("string", "password", "select"):
            assert short.endswith(":"), name
        assert "Choices" not in template, name  # __Choices, never an untranslatable list
        text = template["_Description"].lower()
        for phrase in ("please enter", "do you want", "click", "i will"):
            assert phrase not in text, (name, phrase)


def test_only_templates_are_used_that_exist(templates):
    """Every question the scripts and the library name is a template."""
    used = set()
    for script in ("config", "postinst"):
        text = (debtools.DEBIAN / script).read_text()
        used |= set(re.findall(r'db_\w+\s+(?:"?\$?\w+"?\s+)?"?aks-flex-node/([a-z_/]+)', text))
        used |= set(re.findall(r"^\s*ask (\w+)", text, re.M))
    for module in ("maintscript.py", "debconf_channel.py", "debconf_answers.py"):
        library = (debtools.REPO / "aks_flex_node" / "maintainer" / module).read_text()
        used |= set(re.findall(r'(?:q|info)\("([a-z_/]+)"', library))
    used |= set(debconf_answers.QUESTION_KEYS) | {debconf_answers.SECRET_QUESTION}
    assert {"join", "invalid", "tenant_id", "on_join_failure", "progress/phase"} <= used
    assert sorted(u for u in used if f"aks-flex-node/{u}" not in templates) == []


def test_the_question_to_key_map_is_the_same_in_sh_and_python():
    text = (debtools.DEBIAN / "config").read_text()
    block = re.search(r'QUESTION_KEYS="([^"]*)"', text).group(1)
    pairs = dict(pair.split(":") for pair in block.split())
    assert pairs == debconf_answers.QUESTION_KEYS
    for key in pairs.values():
        config.section_of(key)  # a real configuration key


def test_templates_pot_is_current(tmp_path):
    require_tools("debconf-updatepo")
    work = tmp_path / "debian"
    shutil.copytree(debtools.DEBIAN / "po", work / "po")
    shutil.copy(debtools.DEBIAN / "templates", work / "templates")
    subprocess.run(["debconf-updatepo"], cwd=tmp_path, check=True, capture_output=True,
                   env=debtools.system_env())

    def strip(text):
        return [line for line in text.splitlines() if not line.startswith('"POT-Creation-Date')]

    assert strip((work / "po/templates.pot").read_text()) == \
        strip((debtools.DEBIAN / "po/templates.pot").read_text()), \
        "debian/po/templates.pot is stale: run debconf-updatepo"


def test_docs_and_the_example_preseed_cover_every_question():
    doc = (debtools.REPO / "docs" / "preseed.md").read_text()
    example = (debtools.REPO / "examples" / "preseed.txt").read_text()
    seeded = {}
    for line in example.splitlines():
        if line and not line.startswith("#"):
            owner, question, kind, *value = line.split(None, 3)
            assert owner == "aks-flex-node"
            seeded[question.split("/", 1)[1]] = (kind, value[0] if value else "")
    for name, (kind, _default, choices) in QUESTIONS.items():
        assert f"`{name}`" in doc, f"docs/preseed.md does not document {name}"
        assert seeded[name][0] == kind, name
        if choices:
            assert seeded[name][1] in choices, name
    # The example's answers make a valid configuration (the secret's file aside).
    values = {key: seeded[q][1] for q, key in debconf_answers.QUESTION_KEYS.items()}
    with pytest.raises(Exception) as err:
        config.from_values(values)
    assert [p.key for p in err.value.problems] == ["sp_client_secret_file"]


def documented_preseeds():
    """The preseed examples of docs/preseed.md, by join mode: {mode: {question: (type, value)}}."""
    doc = (debtools.REPO / "docs" / "preseed.md").read_text()
    examples = {}
    for block in re.findall(r"```\n(aks-flex-node .*?)```", doc, re.S):
        seeded = {}
        for line in block.splitlines():
            owner, question, kind, *value = line.split(None, 3)
            assert owner == "aks-flex-node" and question.startswith("aks-flex-node/"), line
            seeded[question.split("/", 1)[1]] = (kind, value[0] if value else "")
        examples[seeded.get("join_mode", ("select", "arc"))[1]] = seeded
    return examples


def test_docs_show_a_preseed_for_each_join_mode_with_known_questions_and_choices():
    examples = documented_preseeds()
    assert sorted(examples) == ["agent-pool", "arc", "bootstrap-token"]
    for mode, seeded in examples.items():
        for name, (kind, value) in seeded.items():
            assert name in QUESTIONS, f"{mode}: no question {name}"
            assert kind == QUESTIONS[name][0], (mode, name)
            if QUESTIONS[name][2]:
                assert value in QUESTIONS[name][2], (mode, name, value)
    # Each mode's example answers what that mode needs, and nothing of another mode.
    assert examples["agent-pool"]["agent_pool"] == ("string", "flexpool")
    assert examples["agent-pool"]["auth_method"][1] != "azure-cli"
    assert {"bootstrap_token_file", "api_server", "cluster_ca_file"} <= set(examples["bootstrap-token"])
    assert "auth_method" not in examples["bootstrap-token"]
    for mode in ("agent-pool", "bootstrap-token"):
        assert not {"resource_group", "location", "tags", "role_preset"} & set(examples[mode]), mode


@pytest.mark.parametrize("example", sorted((debtools.REPO / "examples" / "cloud-init").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_the_cloud_init_examples_answer_known_questions_with_valid_values(example):
    """Each cloud-init example's debconf_selections: our package's questions only, each with
    its template's type and one of its choices, and never the secret (it is a 0600 file;
    cloud-init logs its apt config: examples/cloud-init/README.md)."""
    import yaml

    selections = yaml.safe_load(example.read_text())["apt"]["debconf_selections"]
    seeded = {}
    for line in "".join(selections.values()).splitlines():
        owner, question, kind, *value = line.split(None, 3)
        assert owner == "aks-flex-node" and question.startswith("aks-flex-node/"), line
        seeded[question.split("/", 1)[1]] = (kind, value[0] if value else "")
    assert "sp_client_secret" not in seeded
    assert seeded["join"] == ("boolean", "true")
    for name, (kind, value) in seeded.items():
        assert name in QUESTIONS, f"{example.name}: no question {name}"
        expected_kind, _default, choices = QUESTIONS[name]
        assert kind == expected_kind, f"{example.name}: {name} is a {expected_kind}, not a {kind}"
        if choices:
            assert value in choices, f"{example.name}: {name} = {value!r}, expected one of {choices}"
