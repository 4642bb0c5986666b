r"""What the CLI prints for people (JSON output is the summaries themselves): phase lines as
a run goes, the plan of a dry run, the last run's status, configuration values; and the
one sanitiser every printed line passes (`shown`, `ShownStream`).

Much of what we print came from elsewhere: an archive member's name, an ARM or API server
error message, a file name on the node. A control character in it would reach the
operator's terminal as a command (ESC [2J clears the screen, OSC 0 sets the title, CR
overwrites the line: ECMA-48), so every line leaves the program with its control
characters written out (`\x1b`), newline and tab apart. cli.main and the maintainer
scripts wrap stdout and stderr in ShownStream once (shown_streams), so no message needs to
remember it; JSON output needs nothing more, since json.dumps writes every control
character as a \u escape (RFC 8259 section 7).
"""

import contextlib
import sys

# C0 controls but tab and newline, DEL and the C1 controls (Unicode category Cc), and the
# bidirectional overrides that reorder what a reader sees (Unicode UAX #9; "Trojan Source",
# CVE-2021-42574).
_UNSAFE = [c for c in range(0x20) if c not in (0x09, 0x0A)] + list(range(0x7F, 0xA0)) + \
    [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}


def shown(text):
    r"""`text` with every control character written out as an escape (`\x1b`, `\u202e`);
    newline and tab kept. What passes through it once is unchanged the next time."""
    return str(text).translate(_ESCAPES)


class ShownStream:
    """A text stream whose writes pass `shown` on their way to `raw` (stdout or stderr);
    everything else (flush, isatty, fileno, encoding) is the raw stream's. Our own
    terminal controls (PhasePrinter's line erase) go to `.raw` directly."""

    def __init__(self, raw):
        self.raw = raw

    def write(self, text):
        return self.raw.write(shown(text))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self.raw, name)


@contextlib.contextmanager
def shown_streams():
    """stdout and stderr as ShownStreams while the block runs (cli.main, maintscript.main),
    then the streams they were."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ShownStream(sys.stdout), ShownStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams


def raw_stream(stream):
    """The stream under a ShownStream, for our own terminal controls."""
    return stream.raw if isinstance(stream, ShownStream) else stream


class PhasePrinter:
    """One line per phase as it ends: `[ 3/16] arc  changed  2.1s  connect to Azure Arc ...`."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.done = 0  # phases end out of declared order when branches overlap: count ends

    def __call__(self, event, result, index, total):
        # The text is shown(); only our own controls (CR, erase line) go raw to a terminal.
        raw = raw_stream(self.stream)
        if event == "start":
            if self.tty:
                raw.write(shown(f"[{self.done + 1:2d}/{total}] {result.name:<18} ...") + "\r")
                raw.flush()
            return
        self.done += 1
        message = "; ".join(c["what"] for c in result.changes) or result.message
        if result.changes and result.unknown:  # else the message says it already
            message += "; cannot tell: " + "; ".join(f"{u['what']} ({u['reason']})" for u in result.unknown)
        took = f"{result.duration:6.1f}s" if result.duration is not None else "       "
        line = f"[{self.done:2d}/{total}] {result.name:<18} {result.status:<10} {took}  {message}"
        raw.write(("\x1b[2K" if self.tty else "") + shown(line.rstrip()) + "\n")
        raw.flush()


def print_plan(phases, what="plan"):
    print(f"\n{what} (dry run, nothing was changed):")
    for phase in phases:
        if phase["status"] == "planned":
            print(f"  {phase['name']}:")
            for change in phase["changes"]:
                print(f"    - {change['what']}  ({change['why']})")
        elif phase["status"] == "unchanged":
            print(f"  {phase['name']}: no change ({phase['message']})")


def print_status(status, pending):
    """`aks-flex-node status`: the last run's outcome, phase by phase."""
    print(f"state: {status.get('state')}" + (f" ({status['operation']})" if status.get("operation") else ""))
    # checked: when the agent's drift probe last found the node as that run left it (agent.py)
    for key in ("cluster_resource_id", "machine_name", "started", "finished", "duration_s", "checked"):
        if status.get(key) is not None:
            print(f"{key}: {status[key]}")
    kubelet = status.get("kubelet") or {}
    if kubelet.get("active"):
        upgrade = kubelet.get("upgrade")
        line = f"kubelet: {kubelet['active']}"
        if upgrade and upgrade.get("phase") == "failed":
            line += f"; the upgrade to {upgrade.get('to')} failed: {upgrade.get('why')}"
        elif upgrade:
            line += f"; upgrade to {upgrade.get('to')} under way ({upgrade.get('phase')} step)"
        print(line)
    goal = status.get("machine_goal")
    if goal:  # agent-pool mode: what the agent made of its Machine (pool_follow.py)
        print(f"machine goal: {goal.get('verdict')}: {goal.get('reason')}")
    gpu = status.get("gpu")
    if gpu:  # a GPU node: whether the device plugin advertised its GPUs (gpu/advertised.py)
        print(f"gpu: {gpu.get('verdict')}: {gpu.get('message')}")
        if gpu.get("remedy"):
            print(f"gpu: what to do: {gpu['remedy']}")
    if status.get("reason"):
        print(f"why: {status['reason']}")
    for phase in status.get("phases", []):
        took = f"{phase['duration_s']:6.1f}s" if phase.get("duration_s") is not None else ""
        print(f"  {phase['name']:<18} {phase['status']:<10} {took:>7}  {phase.get('message', '')}")
        for change in phase.get("changes", []):
            print(f"  {'':<18} - {change['what']}")
        if phase.get("changes"):
            for item in phase.get("unknown", []):
                print(f"  {'':<18} - cannot tell {item['what']}: {item['reason']}")
    for owed in status.get("owed", []):
        print(f"owed: {owed['kind']} {owed['unit']} ({owed['reason']})")
    if status.get("error"):
        print(f"error: {status['error'].get('message')}")
        if status["error"].get("remedy"):
            print(f"what to do: {status['error']['remedy']}")
    if pending:
        print("the join is pending: aks-flex-node-agent retries it (journalctl -u aks-flex-node-agent)")
    for item in status.get("leftovers", []):
        print(f"leftover: {item}")
    for item in status.get("kept", []):
        print(f"kept: {item}")


def ini_value(value):
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)
