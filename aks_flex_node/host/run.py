"""Starting processes: the only place in aks_flex_node that calls subprocess.

Every command is an argv list (never a shell), runs with a C.UTF-8 locale so its output
is parseable, gets no terminal on stdin (an interactive prompt fails instead of hanging),
and is killed with its whole process group when it outlives its timeout. Secrets reach a
command through `input` (stdin), never argv; any string named in `secrets` is replaced by
`***` before it can reach a log line or an exception.
"""

import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from typing import NamedTuple

from aks_flex_node.errors import ExitCode, FlexNodeError, TemporaryError
from aks_flex_node.host import observed

log = logging.getLogger(__name__)

REDACTED = "***"

# How many trailing lines of a failed command's output go into the error message.
ERROR_TAIL_LINES = 5

# After SIGKILL, how long to wait for the pipes to close; a grandchild that left the
# process group could hold them open forever.
REAP_TIMEOUT = 5

# Debian/Ubuntu package that ships each command we run, for "command not found" errors.
# (Checked with `dpkg -S` on Debian 12; swapoff lives in `mount`, not util-linux.)
PROVIDED_BY = {
    "systemctl": "systemd",
    "systemd-nspawn": "systemd-container",
    "sysctl": "procps",
    "pkill": "procps",
    "modprobe": "kmod",
    "swapoff": "mount",
    "swapon": "mount",
    "mount": "mount",
    "umount": "mount",
    "tar": "tar",
    "ip": "iproute2",
    "iptables": "iptables",
    "ebtables": "ebtables",
    "conntrack": "conntrack",
    "usermod": "passwd",
    "dpkg": "dpkg",
    "apt-get": "apt",
    "jq": "jq",
    "curl": "curl",
    "azcmagent": "azcmagent (the Azure Connected Machine agent, from packages.microsoft.com)",
}


class RunResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str

    @property
    def skipped(self):
        """True when the command was not run at all (a root prefix without stand-ins)."""
        return False


class SkippedRun(RunResult):
    """The answer of run_system for a live-system command under a root prefix."""

    __slots__ = ()

    @property
    def skipped(self):
        return True


class CommandError(FlexNodeError):
    """A command failed: it exited with an unexpected code, or could not be started."""

    exit_code = ExitCode.FAILED
    code = "command"

    def __init__(self, message, argv=(), returncode=None, stdout="", stderr="", remedy=None):
        super().__init__(message, remedy=remedy)
        self.argv = list(argv)  # already redacted
        self.returncode = returncode
        self.stdout = stdout  # already redacted
        self.stderr = stderr  # already redacted


class CommandTimeout(CommandError, TemporaryError):
    """The command outlived its timeout and was killed; trying again later may work."""

    exit_code = ExitCode.TEMPFAIL
    code = "command-timeout"


class CommandNotFound(CommandError):
    """The executable does not exist (or is not executable)."""

    code = "command-not-found"

    def __init__(self, message, argv=(), package=None, remedy=None):
        super().__init__(message, argv=argv, remedy=remedy)
        self.package = package


# Stands for a secret while a command line is being quoted: letters only, so shlex
# leaves it alone (it would quote "***" as "'***'").
_MASK_WHILE_QUOTING = "AKSFLEXNODEREDACTED"


def redact(text, secrets, mask=REDACTED):
    """`text` with every secret replaced by ***; longest first, so a secret that
    contains another is hidden whole."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, mask)
    return text


def display(argv, secrets=()):
    """A command line for humans, quoted as a shell would need it, secrets hidden.

    Each argument is redacted before quoting: quoting could split a secret that holds
    a quote character, and it would then escape the replacement."""
    quoted = shlex.join(redact(a, secrets, _MASK_WHILE_QUOTING) for a in argv)
    return quoted.replace(_MASK_WHILE_QUOTING, REDACTED)


def _clean_secrets(secrets):
    if isinstance(secrets, (str, bytes)):
        raise TypeError(f"secrets must be a list of strings, got a single {type(secrets).__name__}")
    return [str(s) for s in secrets if s not in (None, "")]


def check_argv(argv):
    if isinstance(argv, (str, bytes)):
        raise TypeError(
            f"argv must be a list of strings, got the string {argv!r}: "
            "commands never go through a shell"
        )
    argv = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in argv]
    if not argv:
        raise ValueError("argv is empty: expected at least the command name")
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise TypeError(f"argv[{i}] = {arg!r}: expected a string (or a path)")
        if "\0" in arg:
            raise ValueError(f"argv[{i}] contains a NUL byte: expected a plain string")
    return argv


def _check_ok_codes(ok_codes):
    if isinstance(ok_codes, (int, str, bytes)) or not hasattr(ok_codes, "__contains__"):
        raise TypeError(f"ok_codes = {ok_codes!r}: expected a collection of exit codes, e.g. (0,)")
    return ok_codes


def _check_timeout(timeout):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout = {timeout!r}: expected a number of seconds > 0")


def resolve_executable(command, path):
    """The file that would run for `command`, searched in `path` (a PATH string) when it
    has no slash; None when there is none."""
    if "/" in command:
        ok = os.path.isfile(command) and os.access(command, os.X_OK)
        return command if ok else None
    return shutil.which(command, path=path)


def _tail(text, lines=ERROR_TAIL_LINES):
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _kill_group(proc):
    # start_new_session made the child a process group leader: its pgid is its pid.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc):
    try:
        return proc.communicate(timeout=REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
        proc.wait()
        return b"", b""


def run_command(argv, *, env, timeout=60, ok_codes=(0,), secrets=(), input=None):
    """Run argv with the environment `env` (a complete mapping) and return a RunResult.

    Raises CommandNotFound, CommandTimeout, or CommandError when the exit code is not in
    ok_codes. `input` (str or bytes) is written to stdin; without it stdin is /dev/null.
    """
    argv = check_argv(argv)
    _check_timeout(timeout)
    _check_ok_codes(ok_codes)
    secrets = _clean_secrets(secrets)
    shown = display(argv, secrets)

    env = {k: v for k, v in env.items() if v is not None}
    # Parseable, translation-free output whatever the operator's locale is.
    env["LANG"] = env["LC_ALL"] = "C.UTF-8"

    executable = resolve_executable(argv[0], env.get("PATH", os.defpath))
    if executable is None:
        name = os.path.basename(argv[0])
        package = PROVIDED_BY.get(name)
        where = f"in PATH={env.get('PATH', os.defpath)}" if "/" not in argv[0] else ""
        message = f"command not found: {redact(argv[0], secrets)} {where}".rstrip()
        remedy = f"install the package {package}" if package else None
        if package:
            message += f" (provided by the package {package})"
        raise CommandNotFound(message, argv=[redact(a, secrets) for a in argv],
                              package=package, remedy=remedy)

    if isinstance(input, str):
        input = input.encode("utf-8")

    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            executable=executable,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # so a timeout can kill the command's children too
        )
    except OSError as e:
        raise CommandError(f"cannot start `{shown}`: {e.strerror or e}",
                           argv=[redact(a, secrets) for a in argv]) from e

    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = _reap(proc)
        elapsed = time.monotonic() - started
        log.debug("timed out after %.2fs: %s", elapsed, shown)
        safe_out = redact(out.decode("utf-8", "replace"), secrets)
        safe_err = redact(err.decode("utf-8", "replace"), secrets)
        message = f"`{shown}` did not finish within {timeout}s and was killed"
        detail = _tail(safe_err) or _tail(safe_out)
        if detail:
            message += "; its last output:\n" + detail
        raise CommandTimeout(message, argv=[redact(a, secrets) for a in argv],
                             stdout=safe_out, stderr=safe_err) from None
    except BaseException:
        # KeyboardInterrupt or similar: never leave the command running behind us.
        _kill_group(proc)
        _reap(proc)
        raise

    elapsed = time.monotonic() - started
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    log.debug("ran `%s`: exit %d in %.2fs", shown, proc.returncode, elapsed)
    # The drift probe's record (observed.py): what this command answered, to ask it again.
    observed.ran(argv, env, timeout, proc.returncode, stdout, input, secrets)

    if proc.returncode not in ok_codes:
        safe_out, safe_err = redact(stdout, secrets), redact(stderr, secrets)
        detail = _tail(safe_err) or _tail(safe_out)
        if proc.returncode < 0:
            status = f"was killed by signal {-proc.returncode}"
        else:
            status = f"failed with exit code {proc.returncode}"
        message = f"`{shown}` {status}"
        if detail:
            message += ":\n" + detail
        raise CommandError(message, argv=[redact(a, secrets) for a in argv],
                           returncode=proc.returncode, stdout=safe_out, stderr=safe_err)
    return RunResult(proc.returncode, stdout, stderr)
