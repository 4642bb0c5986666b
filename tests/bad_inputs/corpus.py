"""The corpus: cases read from tests/bad_inputs/data/*.json, one file per family.

A data file is {"family": NAME, "about": TEXT, "defaults": {...}, "cases": [{...}, ...]};
each case is its file's defaults with the case's own fields on top (`expect` is merged key
by key). A case's fields:

  id        unique across the corpus (the family is prefixed: "config-values/max_pods-zero")
  run       "cli" (default): python3 -m aks_flex_node ARGV --root ROOT
            "maintscript": python3 -m aks_flex_node.maintainer.maintscript ARGV with DPKG_ROOT=ROOT
            "postinst": the package's config script and postinst under debconf, on a
            throwaway root and debconf database (tests/deb/sandbox.py), after `preseed`
  argv      the arguments; "{root}", "{work}" and "{repo}" are replaced by the node's root,
            the case's scratch directory outside it and this repository ("{closed}": the
            loopback port nothing listens on); so are they in config, files, env, mentions
  root_flag false: no --root (the case sets the root some other way, or none)
  config    key -> value over the base configuration (node.BASE_CONFIG); null drops the key
  config_text  the whole configuration file instead (text)
  config_prepend, config_append  text put before or after the rendered configuration
  files     what to put in place before the run, each {"path": node path or "{work}/...",
            one of "text", "b64", "json", "dir": true, "fifo": true, "symlink": TARGET,
            "absent": true, "copy_of": another node path, or "json_from": a file of the
            repository, changed by "json_set" {dotted.path: value} and "json_del" [dotted.path];
            and optionally "mode" ("0644"), "uid", "gid"}
  env       environment variables to set (null: unset)
  preseed   (postinst) question -> [type, value] over node.BASE_PRESEED
  expect    {"exit": CODE or [CODES], "mentions": [TEXT or [ALTERNATIVES]],
             "hidden": [TEXT the output must not hold: a secret, a raw control character],
             "changes": [node path globs allowed to change], "max_seconds": N}
            `mentions` defaults to the keys of `config`: the message names the field.
  archive   a release archive the case's node is served (tests/bad_inputs/archive_mirror.py:
            its entries, or raw bytes, or a cut); the node runs against that mirror
  faults    emulator fault rules (tests/emulator/faults.py; a "set" rule rewrites a field of
            an answer): the node's Azure is an emulator of the case's own with these rules
            posted (tests/bad_inputs/cloud_faults.py)
  why       optional: what the case is about (the issue it comes from)
"""

import glob
import json
import os
from dataclasses import dataclass, field

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
RUNS = ("cli", "maintscript", "postinst")
CASE_FIELDS = {"id", "run", "argv", "root_flag", "faults", "config", "config_text", "config_prepend", "config_append", "files", "env", "preseed",
               "expect", "why", "timeout", "archive"}
EXPECT_FIELDS = {"exit", "mentions", "hidden", "changes", "max_seconds"}
FILE_FIELDS = {"path", "text", "b64", "json", "json_from", "json_set", "json_del", "dir", "fifo", "symlink",
               "absent", "copy_of", "mode", "uid", "gid"}
FILE_KINDS = ("text", "b64", "json", "json_from", "dir", "fifo", "symlink", "absent", "copy_of")


class CorpusError(Exception):
    """A data file that does not follow the format: a loud error, never a skipped case."""


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    run: str = "cli"
    argv: tuple = ()
    root_flag: bool = True
    config: dict = field(default_factory=dict)
    config_text: str = None
    config_prepend: str = ""
    config_append: str = ""
    files: tuple = ()
    env: dict = field(default_factory=dict)
    preseed: dict = field(default_factory=dict)
    exit: tuple = (2,)
    mentions: tuple = ()
    hidden: tuple = ()
    changes: tuple = ()
    max_seconds: float = None
    timeout: float = 60.0
    why: str = ""
    archive: dict = None
    faults: tuple = ()

    def __str__(self):
        return self.id


def _merge(defaults, case):
    out = dict(defaults)
    out.update(case)
    if "expect" in defaults or "expect" in case:
        out["expect"] = {**defaults.get("expect", {}), **case.get("expect", {})}
    return out


def _check_fields(where, given, allowed):
    unknown = set(given) - allowed
    if unknown:
        raise CorpusError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")


def _case(family, raw, where):
    _check_fields(where, raw, CASE_FIELDS)
    expect = raw.get("expect", {})
    _check_fields(f"{where} expect", expect, EXPECT_FIELDS)
    if "id" not in raw:
        raise CorpusError(f"{where}: no id")
    run = raw.get("run", "cli")
    if run not in RUNS:
        raise CorpusError(f"{where}: run {run!r}: expected one of {', '.join(RUNS)}")
    for spec in raw.get("files", []):
        _check_fields(f"{where} file {spec.get('path')}", spec, FILE_FIELDS)
        kinds = [k for k in FILE_KINDS if k in spec]
        if "path" not in spec or len(kinds) != 1:
            raise CorpusError(f"{where}: a file needs a path and one of {', '.join(FILE_KINDS)}: {spec}")
    faults = raw.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(rule, dict) for rule in faults):
        raise CorpusError(f"{where}: faults: expected a list of emulator fault rules: {faults}")
    archive = raw.get("archive")
    if archive is not None and (not isinstance(archive, dict) or ("entries" in archive) == ("raw_text" in archive)):
        raise CorpusError(f"{where}: archive needs one of entries or raw_text: {archive}")
    exit_codes = expect.get("exit", 2)
    exit_codes = tuple(exit_codes) if isinstance(exit_codes, list) else (exit_codes,)
    mentions = expect.get("mentions")
    if mentions is None:
        mentions = list(raw.get("config", {}))
    return Case(
        id=f"{family}/{raw['id']}", family=family, run=run, argv=tuple(raw.get("argv", ())),
        root_flag=raw.get("root_flag", True), config=dict(raw.get("config", {})),
        config_text=raw.get("config_text"), config_prepend=raw.get("config_prepend", ""),
        config_append=raw.get("config_append", ""), files=tuple(raw.get("files", ())),
        env=dict(raw.get("env", {})), preseed=dict(raw.get("preseed", {})), exit=exit_codes,
        mentions=tuple(tuple(m) if isinstance(m, list) else m for m in mentions),
        hidden=tuple(expect.get("hidden", ())), changes=tuple(expect.get("changes", ())), max_seconds=expect.get("max_seconds"),
        timeout=float(raw.get("timeout", 60.0)), why=raw.get("why", ""), archive=archive,
        faults=tuple(faults))


def load_file(path):
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except ValueError as err:
            raise CorpusError(f"{path}: not JSON ({err})") from None
    family = doc.get("family")
    if not family:
        raise CorpusError(f"{path}: no family")
    defaults = doc.get("defaults", {})
    return [_case(family, _merge(defaults, raw), f"{os.path.basename(path)} case {i} ({raw.get('id')})")
            for i, raw in enumerate(doc.get("cases", []))]


def load(data_dir=DATA_DIR):
    """Every case of every data file, in file order; CorpusError on a malformed file or a
    repeated id."""
    cases, seen = [], set()
    for path in sorted(glob.glob(os.path.join(data_dir, "*.json"))):
        for case in load_file(path):
            if case.id in seen:
                raise CorpusError(f"{path}: id {case.id} used twice")
            seen.add(case.id)
            cases.append(case)
    return cases


def families(cases):
    """The families in corpus order."""
    return list(dict.fromkeys(c.family for c in cases))
