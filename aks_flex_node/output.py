"""What the CLI prints for people (JSON output is the summaries themselves): phase lines as
a run goes, the plan of a dry run, the last run's status, configuration values."""

import sys


class PhasePrinter:
    """One line per phase as it ends: `[ 3/16] arc  changed  2.1s  connect to Azure Arc ...`."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.done = 0  # phases end out of declared order when branches overlap: count ends

    def __call__(self, event, result, index, total):
        if event == "start":
            if self.tty:
                self.stream.write(f"[{self.done + 1:2d}/{total}] {result.name:<18} ...\r")
                self.stream.flush()
            return
        self.done += 1
        message = "; ".join(c["what"] for c in result.changes) or result.message
        if result.changes and result.unknown:  # else the message says it already
            message += "; cannot tell: " + "; ".join(f"{u['what']} ({u['reason']})" for u in result.unknown)
        took = f"{result.duration:6.1f}s" if result.duration is not None else "       "
        line = f"[{self.done:2d}/{total}] {result.name:<18} {result.status:<10} {took}  {message}"
        self.stream.write(("\x1b[2K" if self.tty else "") + line.rstrip() + "\n")
        self.stream.flush()


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
    for key in ("cluster_resource_id", "machine_name", "started", "finished", "duration_s"):
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
