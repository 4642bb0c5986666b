"""KubeVersion: the one parser and order of Kubernetes versions (SemVer 2.0.0 with a "v")."""

import pytest

from aks_flex_node.kubeversion import KubeVersion, VersionError


@pytest.mark.parametrize("text, expected, shown", [
    ("1.30.4", KubeVersion(1, 30, 4), "1.30.4"),
    ("v1.31.2", KubeVersion(1, 31, 2), "1.31.2"),
    (" v1.31.2\n", KubeVersion(1, 31, 2), "1.31.2"),  # a gitVersion as read
    ("v1.32.0-rc.1", KubeVersion(1, 32, 0, "rc.1"), "1.32.0-rc.1"),
    ("v1.29.7-eks-1234", KubeVersion(1, 29, 7, "eks-1234"), "1.29.7-eks-1234"),
    ("v1.30.4+aks.1", KubeVersion(1, 30, 4), "1.30.4"),  # build metadata is not part of the version
    ("1.32", KubeVersion(1, 32), "1.32"),
])
def test_parse_and_show(text, expected, shown):
    assert KubeVersion.parse(text) == expected and str(expected) == shown


@pytest.mark.parametrize("text", ["", "1", "latest", "1.x.3", "v1.30.4 ; rm", "١.30.4", "1.30.4-", "1.30.4-rc..1",
                                  "12345.0.0", None, 1.3])
def test_what_is_not_a_version_is_refused_naming_the_value(text):
    with pytest.raises(VersionError) as err:
        KubeVersion.parse(text)
    assert str(err.value) == f"{text!r}: expected a Kubernetes version MAJOR.MINOR.PATCH such as 1.31.2"


@pytest.mark.parametrize("lower, higher", [
    ("1.30.4", "1.30.5"),
    ("1.30.9", "1.31.0"),
    ("1.9.0", "1.10.0"),  # numbers, not text
    ("1.31.0-rc.1", "1.31.0"),  # a pre-release before its release
    ("1.31.0-rc.2", "1.31.0-rc.10"),  # numeric identifiers compare as numbers
    ("1.31.0-1", "1.31.0-alpha"),  # numeric identifiers sort before text ones
    ("1.31.0-alpha", "1.31.0-alpha.1"),  # a longer set of identifiers sorts later
    ("1.31", "1.31.0"),  # the minor line before its first patch
])
def test_order(lower, higher):
    low, high = KubeVersion.parse(lower), KubeVersion.parse(higher)
    assert low < high and high > low and low != high and sorted([high, low]) == [low, high]


def test_a_release_has_a_patch_and_no_suffix():
    assert KubeVersion.parse_release("v1.30.4") == KubeVersion(1, 30, 4)
    for text in ("1.31", "1.31.0-rc.1"):
        with pytest.raises(VersionError) as err:
            KubeVersion.parse_release(text)
        assert f"{text!r}: expected a Kubernetes release MAJOR.MINOR.PATCH" in str(err.value)


def test_the_release_a_vendors_version_is_of():
    assert str(KubeVersion.parse("v1.29.7-eks-1234").without_suffix) == "1.29.7"
    assert KubeVersion.parse("1.32").without_suffix == KubeVersion(1, 32)
