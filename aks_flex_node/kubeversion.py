"""The Kubernetes version: one type, one parser, one order.

Every version of Kubernetes we read (kubernetes_version in the configuration, an agent pool's
orchestrator version, the API server's gitVersion, a Node's kubeletVersion, `upgrade --to`,
the directory a kubelet is installed in) is a KubeVersion, parsed here and compared here, as
kubeadm does with k8s.io/apimachinery/pkg/util/version (ParseSemantic, ParseGeneric).

The grammar is Semantic Versioning 2.0.0's with Kubernetes' leading "v": MAJOR.MINOR.PATCH,
an optional pre-release ("-rc.1", or a vendor's "-eks-1234") and build ("+abc") suffix. The
patch may be missing ("1.32": a minor line, as `upgrade --to 1.32` is refused with). ASCII
digits only: \\d would take other scripts' digits. Order is SemVer's: a pre-release sorts
before its release (1.31.0-rc.1 < 1.31.0), pre-release identifiers compare numerically when
both are numbers, else as text; build metadata is ignored.

The kubelet's version-skew policy is here too (kubernetes.io/releases/version-skew-policy/#kubelet):
the kubelet must not be newer than kube-apiserver, and may be up to three minor versions older
(two before kube-apiserver 1.25). Minor versions are what the policy speaks of: a patch release
of the API server's minor is allowed whatever its patch number. `aks-flex-node upgrade`
(commands/upgrade.py) plans with it and the kubelet-upgrade phase (steps/kubelet_upgrade.py)
checks it again before it switches.

Standard library only and cheap to import: `token` and `version` must not pay for the SDK.
"""

import functools
import re
from dataclasses import dataclass

from aks_flex_node.errors import PreflightError, UsageError

_FORM = re.compile(r"v?([0-9]{1,4})\.([0-9]{1,4})(?:\.([0-9]{1,4}))?"
                   r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?", re.ASCII)
EXPECTED = "a Kubernetes version MAJOR.MINOR.PATCH such as 1.31.2"


class VersionError(ValueError):
    """Not a Kubernetes version; the message names the value and what was expected."""


@functools.total_ordering
@dataclass(frozen=True, eq=True)
class KubeVersion:
    major: int
    minor: int
    patch: int = None  # None: a minor line ("1.32")
    pre: str = ""  # the pre-release suffix without its "-", "" for a release

    @classmethod
    def parse(cls, text):
        match = _FORM.fullmatch(text.strip()) if isinstance(text, str) else None
        if not match:
            raise VersionError(f"{text!r}: expected {EXPECTED}")
        major, minor, patch, pre = match.groups()
        return cls(int(major), int(minor), None if patch is None else int(patch), pre or "")

    @classmethod
    def parse_release(cls, text):
        """A release: MAJOR.MINOR.PATCH with no suffix, as the artifacts are named."""
        version = cls.parse(text)
        if not version.is_release:
            raise VersionError(f"{text!r}: expected a Kubernetes release MAJOR.MINOR.PATCH such as 1.31.2")
        return version

    @property
    def is_release(self):
        return self.patch is not None and not self.pre

    @property
    def without_suffix(self):
        """The release this version is of: a vendor's "v1.29.7-eks-1234" API server runs
        Kubernetes 1.29.7, whose kubelet is the one to install."""
        return KubeVersion(self.major, self.minor, self.patch)

    @property
    def minor_line(self):
        return (self.major, self.minor)

    def __str__(self):
        text = f"{self.major}.{self.minor}" + ("" if self.patch is None else f".{self.patch}")
        return f"{text}-{self.pre}" if self.pre else text

    def _key(self):
        # A release sorts after every pre-release of it (SemVer 2.0.0 §11).
        pre = tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in self.pre.split(".")) \
            if self.pre else None
        return (self.major, self.minor, -1 if self.patch is None else self.patch, pre is None, pre or ())

    def __lt__(self, other):
        if not isinstance(other, KubeVersion):
            return NotImplemented
        return self._key() < other._key()


class SkewError(PreflightError):
    """The version asked for breaks the version-skew policy: nothing was changed."""

    code = "version-skew"


def parse_version(text, what):
    """A KubeVersion ("1.31.2", "v1.31.2", a gitVersion with a suffix); UsageError naming
    `what` otherwise."""
    try:
        return KubeVersion.parse(text)
    except VersionError as err:
        raise UsageError(f"{what} = {err}") from None


def oldest_kubelet_minor(apiserver):
    """How many minors older than the API server a kubelet may be: three from kube-apiserver
    1.25 on (KEP-3935), two before."""
    return 3 if apiserver.minor_line >= (1, 25) else 2


def skew_problem(kubelet, apiserver):
    """Why a kubelet at `kubelet` may not run against `apiserver`, or None when it may."""
    if kubelet.major != apiserver.major:
        return (f"kubelet {kubelet} and kube-apiserver {apiserver} differ in their major version; "
                "the version-skew policy covers one major version")
    if kubelet.minor > apiserver.minor:
        return (f"kubelet {kubelet} would be newer than kube-apiserver {apiserver}: the version-skew "
                "policy forbids a kubelet newer than kube-apiserver")
    allowed = oldest_kubelet_minor(apiserver)
    if apiserver.minor - kubelet.minor > allowed:
        return (f"kubelet {kubelet} would be {apiserver.minor - kubelet.minor} minor versions older than "
                f"kube-apiserver {apiserver}: the version-skew policy allows at most {allowed}")
    return None


def check_target(current, target, apiserver, rollback_allowed=False):
    """Raise SkewError when moving the kubelet from `current` to `target` is not allowed
    against `apiserver`; return True when there is something to do, False when the kubelet
    is already at `target`. `rollback_allowed`: the cluster asked for an older minor (an AKS
    node pool rollback: learn.microsoft.com/azure/aks/roll-back-node-pool-version), which the policy against the
    API server still bounds."""
    problem = skew_problem(target, apiserver)
    if problem:
        raise SkewError(f"refusing to upgrade the kubelet from {current} to {target}: {problem}",
                        remedy="upgrade the cluster's control plane first, or choose a version the policy "
                        "allows (kubernetes.io/releases/version-skew-policy/#kubelet)")
    if target.minor_line < current.minor_line and not rollback_allowed:
        raise SkewError(f"refusing to move the kubelet from {current} down to {target}: downgrading a kubelet "
                        "to an older minor version is not supported",
                        remedy=f"choose a version of minor {current.major}.{current.minor} or newer")
    return (target.minor_line, target.patch) != (current.minor_line, current.patch)
