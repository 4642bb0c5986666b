"""Files and directories a step owns: planned, recorded in the ledger, and undone from it.

A file is compared with what we want (content, then mode, each on its own), so a mode drift
is fixed by a chmod alone (host.write_file does that) and owes nothing: only a content
change owes the restart of what reads the file. A file that existed before we first wrote
it is backed up under /var/lib/aks-flex-node/backup and restored on undo; a file we
created is removed. Directories are recorded only when we created them.

Undo removes only what the ledger records, and never follows a path into a recursive
delete: a `dir` (or `parent_dir`) goes only when it is empty; a `state_dir` (the kubelet's
or containerd's state, made by us for a service we installed) goes with its content
through host.remove_tree, which never crosses a mount point; a `cache_dir` loses only the
files our downloader names, and then goes if it is empty.
"""

import os
import re

from aks_flex_node import paths
from aks_flex_node.engine.step import INSTALL, Plan, Step
from aks_flex_node.engine.undo import Leftover
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import careful_read, originals
from aks_flex_node.steps.kinds import DIR_KINDS, Kind

# What the downloader (host/download.py) keeps in the cache: <sha256>-<name>,
# checksums-<key>-<name>, and .download-*.part while a download runs; and the temp file
# (host/fs.py: .<name>.<...>.tmp) a run killed while writing a checksum copy left.
_CACHE_FILE = re.compile(r"[0-9a-f]{64}-.+|checksums-.+|\.download-.+\.part|\.checksums-.+\.tmp")


def file_drift(host, path, content, mode):
    """(why `path` is not as wanted, whether its content is what differs), or (None, False).

    What is at `path` is seen without following or opening it first (host.look), and read
    only when it is a regular file of the wanted size, at most that many bytes, by the
    careful read: a FIFO there is never waited on, a link to /dev/zero never read (issue 26).
    We manage this path, so anything else a file can be is drift, replaced atomically like
    a changed file, its original kept for undo (claim_file): a symlink (its text), a FIFO
    (its mode). A directory is refused: replacing it means deleting a tree that is not
    ours. So are a device and a socket: someone made a live endpoint there on purpose, and
    what it is for cannot be kept for undo by a copy. A mount point is refused when it has
    to change: rename(2) over it fails (EBUSY), and what is mounted is not ours either."""
    found = host.look(path)
    if found is None:
        return "it does not exist", True
    if found.kind in (originals.DIR, originals.DEVICE, originals.SOCKET):
        raise _in_the_way(path, found.kind)
    drift = None
    if found.kind == originals.LINK:
        drift = f"it is a symlink (to {found.link!r}), not a file of aks-flex-node's"
    elif found.kind == originals.FIFO:
        drift = "it is a FIFO, not a file"
    elif found.size != len(content) or _content(host, path, len(content)) != content:
        drift = "its content differs"
    if drift is not None:
        if host.mounts_below(path, include_self=True):
            raise _in_the_way(path, "mount point")
        return drift, True
    if found.mode != mode:
        return f"its mode is {found.mode:04o}, not {mode:04o}", False
    return None, False


def _content(host, path, size):
    """The bytes of the regular file `path` (at most `size`), or None when it changed into
    something else since we looked (then it differs too)."""
    try:
        return host.read_carefully(path, size)
    except careful_read.Unsafe:
        return None


class ManagedPathError(FlexNodeError):
    """What is at a path aks-flex-node manages cannot be replaced: a directory, a device,
    a socket or a mount point. `code` says which; what is there is left as it is."""


_IN_THE_WAY = {
    originals.DIR: ("directory-in-the-way", "a directory", "move it aside (mv {path} {path}.bad)"),
    originals.DEVICE: ("device-in-the-way", "a device node", "remove it, or move it aside (mv {path} {path}.bad)"),
    originals.SOCKET: ("socket-in-the-way", "a socket", "stop what listens on it and remove it"),
    "mount point": ("mount-point-in-the-way", "a mount point", "unmount it (umount {path})"),
}


def _in_the_way(path, kind):
    code, what, remedy = _IN_THE_WAY[kind]
    return ManagedPathError(f"{path} is {what}: aks-flex-node manages a file there and will not "
                            "replace it; it is left as it is", remedy=remedy.format(path=path) + ", then run again",
                            code=code)


def plan_file(ctx, plan, step, path, content, mode=0o644, why="", owes=()):
    """Add an action to `plan` when `path` needs writing; return True when it does.
    `owes` (restarts of what reads the file) go with a content change only."""
    drift, content_changes = file_drift(ctx.host, path, content, mode)
    if drift is None:
        return False
    reason = drift if not why else f"{why}; {drift}"
    plan.add(f"write {path} (mode {mode:04o})", reason,
             lambda: write_tracked(ctx, step, path, content, mode),
             owes=owes if content_changes else ())
    return True


def make_parents(ctx, step, path):
    """Create the missing directories above `path`, recording each (top first) so that
    undo removes them again once they are empty; returns those created, top first."""
    missing = []
    parent = os.path.dirname(path)
    while parent not in ("/", "") and not ctx.host.is_dir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(missing):
        ctx.ledger.record(step, Kind.PARENT_DIR, directory)
        ctx.host.ensure_dir(directory, 0o755)
    return missing[::-1]


def claim_file(ctx, step, path, **extra):
    """Record `path` as `step`'s file, about to be written: its directories are made, and
    what someone else had there is kept first (undo puts it back; keep_original)."""
    make_parents(ctx, step, path)
    if not ctx.ledger.has(Kind.FILE, path):
        extra.update(keep_original(ctx.host, path))
    ctx.ledger.record(step, Kind.FILE, path, **extra)


def keep_original(host, path):
    """Keep what is at `path` before we first replace it, never following it: a regular
    file is copied to its backup; a symlink is kept as its text (`original_link`), a FIFO
    as its mode (`original` "fifo"), neither read. Returns the ledger fields that say how
    to put it back ({} when nothing is there). `owner` is new in issue 26: a ledger of an
    earlier release has `backup` and `mode` alone, and undo then restores as it did."""
    found = host.look(path)
    if found is None:
        return {}
    owner = [found.uid, found.gid]
    if found.kind == originals.FILE:
        backup = paths.backup_path(path)
        host.keep_original(path, backup)
        return {"backup": backup, "mode": found.mode, "owner": owner}
    if found.kind == originals.LINK:
        return {"original": originals.LINK, "original_link": found.link, "owner": owner}
    if found.kind == originals.FIFO:
        return {"original": originals.FIFO, "mode": found.mode, "owner": owner}
    raise _in_the_way(path, found.kind)


def write_tracked(ctx, step, path, content, mode, **extra):
    """Write `path` and record it as `step`'s; return what host.write_file changed."""
    claim_file(ctx, step, path, **extra)
    return ctx.host.write_file(path, content, mode)


_ORIGINAL_FIELDS = ("backup", "mode", "owner", "original", "original_link")


def link_tracked(ctx, step, path, target):
    """Make `path` a symlink to the relative `target` and record it as `step`'s file (with
    `link`); what someone else had there is kept first, as write_tracked does (a link of
    theirs as its text), and an entry of ours keeps its original. Returns what
    host.write_symlink changed."""
    host = ctx.host
    make_parents(ctx, step, path)
    entry = ctx.ledger.get(Kind.FILE, path)
    if entry is not None:
        kept = {k: entry[k] for k in _ORIGINAL_FIELDS if k in entry}
    elif host.read_link(path) == target:
        kept = {}  # ours already (a ledger lost with the link in place): nothing to keep
    else:
        kept = keep_original(host, path)
    ctx.ledger.replace(step, Kind.FILE, path, link=target, **kept)
    return host.write_symlink(path, target)


def plan_dir(ctx, plan, step, path, mode=0o755, kind=Kind.DIR):
    """Create `path` when missing. kind "state_dir": a service's state directory, which
    undo removes with its content (the service we installed filled it)."""
    if ctx.host.is_dir(path):
        return False

    def run():
        make_parents(ctx, step, path)
        ctx.ledger.record(step, kind, path)
        ctx.host.ensure_dir(path, mode)

    plan.add(f"create directory {path}", "it does not exist", run)
    return True


def ensure_cache_dir(ctx, step):
    """The download cache: made (and tagged as ours) when missing, recorded as `step`'s.
    One the ledger records as ours gets its tag back when a killed run did not write it."""
    cache_dir = ctx.config.cache_dir
    if ctx.host.is_dir(cache_dir):
        if cache_tag_drift(ctx) is not None:
            _write_cache_tag(ctx, cache_dir)
        return
    make_parents(ctx, step, cache_dir)
    ctx.ledger.record(step, Kind.CACHE_DIR, cache_dir)
    ctx.host.ensure_dir(cache_dir, 0o755)
    _write_cache_tag(ctx, cache_dir)


def _write_cache_tag(ctx, cache_dir):
    ctx.host.write_file(f"{cache_dir}/{paths.CACHE_TAG_NAME}", paths.CACHE_TAG, 0o644)


def cache_tag_drift(ctx):
    """Why the cache directory's CACHEDIR.TAG needs writing, or None. Only a directory the
    ledger records as ours is tagged: the directory is made and recorded before its tag is
    written, so a run killed in between leaves it untagged, and unbootstrap, the config's
    cache_dir check and `tar --exclude-caches` all go by the tag."""
    cache_dir = ctx.config.cache_dir
    if not ctx.ledger.has(Kind.CACHE_DIR, cache_dir) or not ctx.host.is_dir(cache_dir):
        return None
    drift, _ = file_drift(ctx.host, f"{cache_dir}/{paths.CACHE_TAG_NAME}", paths.CACHE_TAG, 0o644)
    return drift


def plan_cache_tag(ctx, plan, step):
    """Plan the tag of the cache directory in the phase that recorded the directory (one
    phase, though every artifact phase uses the cache); True when it is planned."""
    entry = ctx.ledger.get(Kind.CACHE_DIR, ctx.config.cache_dir)
    drift = cache_tag_drift(ctx) if entry is not None and entry["step"] == step else None
    if drift is None:
        return False
    cache_dir = ctx.config.cache_dir
    plan.add(f"write {cache_dir}/{paths.CACHE_TAG_NAME} (mode 0644)",
             f"aks-flex-node made {cache_dir}; {drift}", lambda: _write_cache_tag(ctx, cache_dir))
    return True


# ---- undo -----------------------------------------------------------------------------


def plan_undo_paths(ctx, entries, state_dirs=()):
    """The undo of `entries` (newest first): remove or restore files, remove directories.
    `state_dirs`: paths a ledger written before state_dir existed recorded as plain dirs."""
    plan = Plan()
    for entry in reversed(entries):
        kind, path = entry["kind"], entry["id"]
        if kind == Kind.DIR and path in state_dirs:
            kind = Kind.STATE_DIR
        origin = f"created by the {entry['step']} phase"
        if kind == Kind.FILE and _has_original(entry):
            plan.add(f"restore {path}", f"it was there before; {_original_shown(entry)}",
                     lambda e=entry: _restore(ctx, e))
        elif kind == Kind.FILE:
            plan.add(f"remove {path}", origin, lambda p=path: _remove_file(ctx, p))
        elif kind in DIR_KINDS:
            plan.add(f"remove directory {path} if it is empty", origin,
                     lambda e=entry: _remove_empty_dir(ctx, e, final=False))
        elif kind == Kind.STATE_DIR:
            plan.add(f"remove {path} and its content", f"{origin}: the state of a service "
                     "aks-flex-node installed (never across a mount point)",
                     lambda e=entry: _remove_state_dir(ctx, e))
        elif kind == Kind.CACHE_DIR:
            plan.add(f"remove aks-flex-node's downloads from {path}, then it if empty", origin,
                     lambda p=path: _remove_cache(ctx, p))
    return plan


def plan_undo_leftover_dirs(ctx):
    """Directories that were not empty when their phase was undone (another phase's files
    were still in them): tried again, deepest first; what is still not empty holds what we
    did not create, and is kept."""
    plan = Plan()
    left = [e for e in ctx.ledger.entries() if e["kind"] in DIR_KINDS]
    for entry in sorted(left, key=lambda e: e["id"].count("/"), reverse=True):
        plan.add(f"remove directory {entry['id']} if it is empty",
                 f"created by the {entry['step']} phase",
                 lambda e=entry: _remove_empty_dir(ctx, e, final=True))
    return plan


def forget_file(ctx, path):
    """Undo one file of ours now, as unbootstrap would: restore its backup, or remove it."""
    entry = ctx.ledger.get(Kind.FILE, path)
    if entry is None:
        return []
    return _restore(ctx, entry) if _has_original(entry) else _remove_file(ctx, path)


def _has_original(entry):
    return bool(entry.get("backup") or entry.get("original"))


def _original_shown(entry):
    if entry.get("original") == originals.LINK:
        return f"it was a symlink to {entry['original_link']!r}"
    if entry.get("original") == originals.FIFO:
        return "it was a FIFO"
    return f"its original is {entry['backup']}"


def _restore(ctx, entry):
    """Put back what was at the entry's path before us, exactly: a symlink with its text
    and owner, a FIFO with its mode, a file's bytes with its mode (and owner when the
    entry has one: an entry of an earlier release has not, and keeps ours)."""
    path = entry["id"]
    owner = tuple(entry["owner"]) if entry.get("owner") else None
    if entry.get("original") in (originals.LINK, originals.FIFO):
        ctx.host.put_back(path, entry["original"], mode=entry.get("mode"), owner=owner,
                          link=entry.get("original_link"))
        ctx.ledger.forget(Kind.FILE, path)
        return []
    backup = entry["backup"]
    original = ctx.host.read_bytes(backup)
    if original is None:
        return [Leftover(path, f"its backup {backup} is gone; left as it is")]
    ctx.host.write_file(path, original, entry.get("mode", 0o644), owner=owner)
    ctx.host.remove(backup)
    ctx.ledger.forget(Kind.FILE, path)
    return []


def _remove_file(ctx, path):
    if ctx.host.kind(path) == "dir":
        return [Leftover(path, "a directory is there now, not the file aks-flex-node wrote; left as it is")]
    ctx.host.remove(path)
    ctx.ledger.forget(Kind.FILE, path)
    return []


def _remove_empty_dir(ctx, entry, final):
    path = entry["id"]
    try:
        ctx.host.remove_empty_dir(path)
    except OSError:
        if not ctx.host.is_dir(path):
            ctx.ledger.forget(entry["kind"], path)
            return [Leftover(path, "something other than a directory is there now; left as it is", kept=True)]
        if not final:
            return []  # the leftover-dirs phase tries again once every phase is undone
        ctx.ledger.forget(entry["kind"], path)
        return [Leftover(path, f"kept: it holds what aks-flex-node did not create "
                               f"({_listing(ctx.host, path)})", kept=True)]
    ctx.ledger.forget(entry["kind"], path)
    return []


def _remove_state_dir(ctx, entry):
    path = entry["id"]
    left = [Leftover(path, f"not removed: {why}") for why in ctx.host.remove_tree(path)]
    if not left:
        ctx.ledger.forget(entry["kind"], path)
    return left


def _remove_cache(ctx, path):
    host = ctx.host
    tag = f"{path}/{paths.CACHE_TAG_NAME}"
    tag_kind = host.kind(tag)
    if tag_kind is None or (tag_kind == "file" and paths.is_own_cache_tag(host.read_bytes(tag) or b"")):
        host.remove(tag)  # and the temp file a run killed while writing it left
    names = host.listdir(path)
    if names is None:
        ctx.ledger.forget(Kind.CACHE_DIR, path)
        return []
    for name in names:
        # (one gone meanwhile, a temp file removed with the file it was for, is no file)
        if _CACHE_FILE.fullmatch(name) and host.kind(f"{path}/{name}") == "file":
            host.remove(f"{path}/{name}")
    ctx.ledger.forget(Kind.CACHE_DIR, path)
    try:
        host.remove_empty_dir(path)
    except OSError:
        return [Leftover(path, f"kept: it holds what aks-flex-node did not download ({_listing(host, path)})",
                         kept=True)]
    return []


def _listing(host, path, most=3):
    try:
        names = host.listdir(path) or []
    except OSError as err:
        return err.strerror or str(err)
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class OwnsPaths:
    """Mixin of a step whose ledger records are files and directories; `state_dirs` are
    the service state directories it makes (see plan_undo_paths)."""

    state_dirs = ()

    def plan_dir(self, ctx, plan, path, mode=0o755):
        """plan_dir for this step: a `state_dir` when `path` is one of its state_dirs."""
        kind = Kind.STATE_DIR if path in self.state_dirs else Kind.DIR
        return plan_dir(ctx, plan, self.name, path, mode, kind=kind)

    def plan_undo(self, ctx, entries):
        return plan_undo_paths(ctx, entries, self.state_dirs)


class LeftoverDirsStep(Step):
    """The last undo phase: directories that earlier phases could not remove yet."""

    name = "directories"
    help = "remove the directories aks-flex-node made once they are empty"
    branch = INSTALL

    def undo_entries(self, ctx):
        return [e for e in ctx.ledger.entries() if e["kind"] in DIR_KINDS]

    def plan_undo(self, ctx, entries):
        return plan_undo_leftover_dirs(ctx)
