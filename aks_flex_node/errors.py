"""Exit codes and the exceptions that carry them.

One error handler at the CLI edge (cli.main) turns any FlexNodeError into its exit
code, a log line and, with --json, a JSON object. Library code raises; it never exits.
"""

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2  # bad command line or configuration
    PREFLIGHT = 3  # a preflight check failed and was not ignored
    AUTH = 4  # Azure authentication failed or permission denied
    UNAVAILABLE = 69  # EX_UNAVAILABLE: the operation is not available in this release (upgrade)
    TEMPFAIL = 75  # EX_TEMPFAIL: try again later (network, throttling, lock held)


class FlexNodeError(Exception):
    """Base of every error we expect; `remedy` tells the operator what to do."""

    exit_code = ExitCode.FAILED
    code = "failed"

    def __init__(self, message, remedy=None, *, code=None):
        super().__init__(message)
        self.message = message
        self.remedy = remedy
        if code:  # a stable name for one case of its class, for scripts and tests: never reworded
            self.code = code

    def to_dict(self):
        out = {"error": self.code, "message": self.message}
        if self.remedy:
            out["remedy"] = self.remedy
        return out


class UsageError(FlexNodeError):
    exit_code = ExitCode.USAGE
    code = "usage"


class ConfigError(FlexNodeError):
    """All problems found in a configuration, reported at once.

    Each problem is a ConfigProblem naming the key, the value seen and what is expected.
    """

    exit_code = ExitCode.USAGE
    code = "config"

    def __init__(self, problems, source=None):
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(self.problems)} configuration error(s){where}:"]
        lines += [f"  {p}" for p in self.problems]
        super().__init__("\n".join(lines))

    def to_dict(self):
        out = super().to_dict()
        out["problems"] = [p.to_dict() for p in self.problems]
        return out


class ConfigProblem:
    def __init__(self, key, value, expected):
        self.key = key
        self.value = value
        self.expected = expected

    def __str__(self):
        return f"{self.key} = {self.value!r}: expected {self.expected}"

    def __repr__(self):
        return f"ConfigProblem({self.key!r}, {self.value!r}, {self.expected!r})"

    def to_dict(self):
        return {"key": self.key, "value": self.value, "expected": self.expected}


class PreflightError(FlexNodeError):
    exit_code = ExitCode.PREFLIGHT
    code = "preflight"


class AuthError(FlexNodeError):
    exit_code = ExitCode.AUTH
    code = "auth"


class TemporaryError(FlexNodeError):
    exit_code = ExitCode.TEMPFAIL
    code = "temporary"


class LockHeldError(TemporaryError):
    code = "locked"


class RepairDidNotStick(FlexNodeError):
    """An action the previous pass applied is needed again: repeating it would hide that
    something undoes it, or that it does nothing on this host."""

    code = "repair-did-not-stick"


class StateWriteError(FlexNodeError):
    """A write of the run's own state (the lock, status.json, the ledger, the pending mark)
    failed. Exit 1: a full or read-only disk needs an operator, retrying will not help."""

    code = "state-write"
