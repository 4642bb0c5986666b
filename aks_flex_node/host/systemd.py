"""systemd units, through `systemctl` on the live system (Host.run_system).

Under a root prefix without stand-ins every call is skipped (image building): the queries
then answer "no" (inactive, not enabled) so a plan still says what a live run would do.
"""

import logging
import re

log = logging.getLogger(__name__)

# Unit types from systemd.unit(5); a name without one of these gets ".service".
UNIT_SUFFIXES = (
    ".service", ".socket", ".target", ".timer", ".mount", ".automount", ".path",
    ".slice", ".scope", ".device", ".swap",
)

# systemd.unit(5): unit names are made of ASCII letters, digits, ":", "-", "_", ".", "\"
# and "@" (templates). A leading "-" would read as an option.
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@][A-Za-z0-9:_.\\@-]*")

# systemctl start/restart wait for the unit to come up; kubelet and containerd can take
# a while on a slow machine, so allow more than the default command timeout.
START_TIMEOUT = 300

# is-active / is-enabled answer with their exit code: 0 yes, anything else no (3 for
# inactive, 1 for disabled, 4 for "no such unit"). Only death by a signal is an error.
ANY_EXIT_CODE = range(0, 256)


def unit_name(unit):
    """The full unit name: "kubelet" -> "kubelet.service"; "kube.slice" stays."""
    if not isinstance(unit, str) or not _UNIT_NAME.fullmatch(unit):
        raise ValueError(
            f"unit = {unit!r}: expected a systemd unit name (letters, digits, ':_.@\\-', "
            "not starting with '-')"
        )
    return unit if unit.endswith(UNIT_SUFFIXES) else unit + ".service"


class Systemd:
    def __init__(self, host):
        self.host = host

    def _systemctl(self, *args, timeout=60, ok_codes=(0,)):
        return self.host.run_system(["systemctl", *args], timeout=timeout, ok_codes=ok_codes)

    def daemon_reload(self):
        self._systemctl("daemon-reload")

    # systemctl(1), is-enabled: the unit file states it answers 0 ("enabled") for.
    ENABLED_STATES = frozenset(("enabled", "enabled-runtime", "static", "alias", "indirect", "generated",
                                "transient"))

    def states(self, units):
        """{unit: (enabled, active)} for `units`, in one `systemctl show` (is-enabled and
        is-active each take a process per unit): enabled as is-enabled answers 0, active as
        is-active does (ActiveState "active")."""
        names = [unit_name(u) for u in units]
        result = self._systemctl("show", "--property=UnitFileState,ActiveState", *names,
                                 ok_codes=ANY_EXIT_CODE)
        if result.skipped:
            return {unit: (False, False) for unit in units}
        # One block of KEY=VALUE lines per unit, in the order asked (an alias shows its
        # unit's Id), blocks separated by an empty line.
        blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
                  for block in result.stdout.strip().split("\n\n")]
        if result.returncode != 0 or len(blocks) != len(units):
            # `show` asks the manager over D-Bus; is-enabled also reads unit files offline
            # (a chroot): ask the old way rather than answer "no" for a unit that is enabled.
            return {unit: (self.is_enabled(unit), self.is_active(unit)) for unit in units}
        return {unit: (props.get("UnitFileState") in self.ENABLED_STATES, props.get("ActiveState") == "active")
                for unit, props in zip(units, blocks)}

    def is_active(self, unit):
        result = self._systemctl("is-active", unit_name(unit), ok_codes=ANY_EXIT_CODE)
        return result.returncode == 0 and not result.skipped

    def is_enabled(self, unit):
        result = self._systemctl("is-enabled", unit_name(unit), ok_codes=ANY_EXIT_CODE)
        return result.returncode == 0 and not result.skipped

    def enable(self, unit, now=False):
        extra = ("--now",) if now else ()
        self._systemctl("enable", *extra, unit_name(unit), timeout=START_TIMEOUT if now else 60)

    def disable(self, unit, now=False):
        extra = ("--now",) if now else ()
        self._systemctl("disable", *extra, unit_name(unit), timeout=START_TIMEOUT if now else 60)

    def start(self, unit):
        self._systemctl("start", unit_name(unit), timeout=START_TIMEOUT)

    def stop(self, unit):
        self._systemctl("stop", unit_name(unit), timeout=START_TIMEOUT)

    def restart(self, unit):
        self._systemctl("restart", unit_name(unit), timeout=START_TIMEOUT)
