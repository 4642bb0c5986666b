"""Files and directories a step owns, planned and recorded in the ledger.

A file is compared with what we want (content, then mode, each on its own), so a mode drift
is fixed by a chmod alone (host.write_file does that). A file that existed before we first
wrote it is backed up under /var/lib/aks-flex-node/backup and restored on undo; a file we
created is removed. Directories are recorded only when we created them.
"""

import os
import stat

from aks_flex_node.engine.ledger import BACKUP_DIR


def file_drift(host, path, content, mode):
    """Why `path` is not as wanted, or None when it is."""
    current = host.read_bytes(path)
    if current is None:
        return "it does not exist"
    if current != content:
        return "its content differs"
    actual = stat.S_IMODE(os.stat(host.path(path)).st_mode)
    if actual != mode:
        return f"its mode is {actual:04o}, not {mode:04o}"
    return None


def plan_file(ctx, plan, step, path, content, mode=0o644, why="", on_change=None):
    """Add an action to `plan` when `path` needs writing; return True when it does."""
    drift = file_drift(ctx.host, path, content, mode)
    if drift is None:
        return False

    def run():
        write_tracked(ctx, step, path, content, mode)
        if on_change:
            on_change()

    reason = drift if not why else f"{why}; {drift}"
    plan.add(f"write {path} (mode {mode:04o})", reason, run)
    return True


def make_parents(ctx, step, path):
    """Create the missing directories above `path`, recording each (top first) so that
    undo removes them again once they are empty."""
    missing = []
    parent = os.path.dirname(path)
    while parent not in ("/", "") and not os.path.isdir(ctx.host.path(parent)):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(missing):
        ctx.ledger.record(step, "parent_dir", directory)
        ctx.host.ensure_dir(directory, 0o755)


def write_tracked(ctx, step, path, content, mode, **extra):
    """Write `path` and record it as `step`'s; return what host.write_file changed."""
    host = ctx.host
    make_parents(ctx, step, path)
    if not ctx.ledger.has("file", path):
        original = host.read_bytes(path)
        if original is not None:
            backup = BACKUP_DIR + path
            original_mode = stat.S_IMODE(os.stat(host.path(path)).st_mode)
            host.write_file(backup, original, 0o600)
            extra.update(backup=backup, mode=original_mode)
    ctx.ledger.record(step, "file", path, **extra)
    return host.write_file(path, content, mode)


def plan_dir(ctx, plan, step, path, mode=0o755):
    if os.path.isdir(ctx.host.path(path)):
        return False

    def run():
        make_parents(ctx, step, path)
        ctx.ledger.record(step, "dir", path)
        ctx.host.ensure_dir(path, mode)

    plan.add(f"create directory {path}", "it does not exist", run)
    return True


def undo_paths(ctx, entries):
    """Remove (or restore) the files and directories in `entries`, newest first.

    A `dir` we made for our own use goes with its content (the kubelet's state, the CNI
    configs); a `parent_dir` made on the way to a file goes only when it is empty.
    """
    leftovers = []
    host = ctx.host
    for entry in reversed(entries):
        kind, path = entry["kind"], entry["id"]
        if kind not in ("file", "dir", "parent_dir"):
            continue
        try:
            if kind == "parent_dir":
                try:
                    os.rmdir(host.path(path))
                except OSError:  # gone already, or something else lives there now: keep it
                    pass
            elif entry.get("backup"):
                original = host.read_bytes(entry["backup"])
                if original is not None:
                    host.write_file(path, original, entry.get("mode", 0o644))
                    host.remove(entry["backup"])
                else:
                    leftovers.append(f"{path}: its backup {entry['backup']} is gone; left as is")
            else:
                host.remove(path)
            ctx.ledger.forget(kind, path)
        except OSError as exc:
            leftovers.append(f"{path}: {exc}")
    return leftovers
