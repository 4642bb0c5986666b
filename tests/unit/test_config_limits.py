"""Bounds on values: every key has a maximum length (the error names the key, the start of
the value and the limit), Azure's tag count, and a HIMDS endpoint on this machine only."""

import pytest

from aks_flex_node import config
from aks_flex_node.config import checks, spec
from tests.config_fixtures import load, make_root, only_problem, with_values


@pytest.fixture
def root(tmp_path):
    return make_root(tmp_path)


def test_every_configspec_type_has_a_length_bound():
    assert set(spec.CHECKS) <= set(checks.MAX_LENGTH)


@pytest.mark.parametrize("key", config.keys())
def test_a_value_over_its_bound_is_refused_by_length_with_a_short_message(root, key):
    size = 1 << 16  # over every bound
    problem = only_problem(root, with_values(**{key: "a" * size}), key)
    limit = checks.MAX_LENGTH[spec.configspec()[config.section_of(key)][key].partition("(")[0]]
    assert problem.expected == f"at most {limit} characters (this value has {size})"
    assert problem.value == "a" * 40 + "…"
    assert len(str(problem)) < 200


def test_a_megabyte_arc_location_is_refused(root):
    """The defect: a 1 MiB arc_location was accepted."""
    problem = only_problem(root, with_values(arc_location="westeurope" * 104858), "arc_location")
    assert problem.expected == "at most 32 characters (this value has 1048580)"
    assert problem.value == "westeurope" * 4 + "…"


@pytest.mark.parametrize("name", ["westeurope", "australiacentral2", "germanywestcentral", "australiasoutheast"])
def test_real_region_names_fit(root, name):
    assert load(root, with_values(arc_location=name)).arc_location == name


def test_a_location_over_32_characters_is_refused(root):
    problem = only_problem(root, with_values(arc_location="x" * 33), "arc_location")
    assert problem.expected == "at most 32 characters (this value has 33)"


def test_at_most_50_azure_tags(root):
    tags = ",".join(f"t{i}=v" for i in range(50))
    assert len(load(root, with_values(arc_tags=tags)).arc_tags) == 50
    problem = only_problem(root, with_values(arc_tags=tags + ",t50=v"), "arc_tags")
    assert problem.expected == "at most 50 Azure tags (there are 51)"


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:40342/metadata/identity/oauth2/token",
    "http://127.8.9.10:8080/x",
    "http://localhost:40342/metadata/identity/oauth2/token",
    "http://[::1]:40342/metadata/identity/oauth2/token",
])
def test_a_himds_endpoint_on_this_machine_is_accepted(root, url):
    assert load(root, with_values(himds_endpoint=url)).himds_endpoint == url


@pytest.mark.parametrize("url", [
    "http://10.0.0.5:40342/metadata/identity/oauth2/token",
    "http://himds.example.com:40342/metadata/identity/oauth2/token",
    "http://169.254.169.254/metadata/identity/oauth2/token",
    "http://localhost.example.com:40342/x",
])
def test_a_himds_endpoint_off_this_machine_is_refused(root, url):
    """The HIMDS challenge key goes in clear over http: it must not leave the machine."""
    problem = only_problem(root, with_values(himds_endpoint=url), "himds_endpoint")
    assert problem.value == url
    assert "on this machine: 127.0.0.0/8, [::1] or localhost" in problem.expected
