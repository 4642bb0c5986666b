"""Reading the configuration: parse the file (or take a dict), check every value against
the configspec with configobj's validate, then the checks of meaning (`semantic`). Every
problem is collected and raised at once in one ConfigError, in file order.
"""

import logging
import stat

import configobj

from aks_flex_node import paths, strictmodes
from aks_flex_node.config import spec
from aks_flex_node.config.checks import Invalid
from aks_flex_node.config.fileformat import locate, read_file, take_value
from aks_flex_node.config.model import Config
from aks_flex_node.config.semantic import check_meaning
from aks_flex_node.config.values import redact_url, shown
from aks_flex_node.errors import ConfigError, ConfigProblem

log = logging.getLogger(__name__)


# The files only the node reads (its credentials): a configuration read elsewhere (mirror
# sync, on a connected machine) may name them without having them.
NODE_ONLY_FILES = ("sp_client_secret_file", "sp_certificate_file", "bootstrap_token_file", "cluster_ca_file")


def load(path=None, root="/", overrides=None, elsewhere=False):
    """Read, check and return the configuration; ConfigError lists every problem.
    `elsewhere`: read on another machine than the node it is for (NODE_ONLY_FILES are not
    looked for; their values are still checked).

    `path` (default paths.CONFIG), if absolute, is a node path looked up under `root`; a
    relative one is taken from the working directory. `overrides`
    (key -> value, e.g. from command-line flags) replace the file's values before the
    checks; a value of None unsets a key. Files the configuration names (secret,
    certificate, CA bundle) are node paths, looked up under `root`.
    """
    file_path = locate(path, root)
    source = str(file_path)
    if not file_path.exists():
        err = ConfigError([ConfigProblem(
            "config file", source,
            "an existing file: create it with `aks-flex-node config import <config.json>` "
            f"or by editing {paths.CONFIG} (the package ships one with every key)")], source=source)
        err.remedy = f"create {source}: aks-flex-node config import <config.json>, or edit the shipped template"
        raise err
    raw, problems = read_file(file_path)
    # It names commands run as root: nobody else may be able to change it (strictmodes).
    problems[:0] = strictmodes.problems("config file", source, file_path, root)
    proxy = raw.get("https_proxy") or ""
    if redact_url(proxy) != proxy and stat.S_IMODE(file_path.stat().st_mode) & 0o077:
        problems.append(ConfigProblem("https_proxy", redact_url(proxy),
                                      f"no credentials in a file others can read: chmod 600 {source}"))
        raw["https_proxy"] = None
    return _build(raw, problems, source, root, overrides, written=NODE_ONLY_FILES if elsewhere else ())


def from_values(values, root="/", source=None, overrides=None, client_secret=None, warnings=(), held=None):
    """Check a dict of key -> value (text or typed) as if it were a file; return a Config.
    `held`: secrets kept in memory instead of files (upstream_config's secrets:
    sp_client_secret, bootstrap_token, cluster_ca); `client_secret` is held's sp_client_secret."""
    raw, problems = {}, []
    for key, value in values.items():
        take_value(key, value, raw, problems, origin="value")
    return _build(raw, problems, source, root, overrides, held=_held(held, client_secret), warnings=warnings)


def check_text(text, path=None, root="/", overrides=None, client_secret=None, written=()):
    """A Config from `text` about to be written to `path` (as for load()): load()'s checks
    but the file's own owner and mode, which the writer sets. `written`: keys naming files
    the caller writes with this text (their file checks are skipped; their keys count)."""
    file_path = locate(path, root)
    raw, problems = read_file(file_path, lines=text.splitlines())
    return _build(raw, problems, str(file_path), root, overrides, held=_held(None, client_secret),
                  written=written)


def load_upstream_json(path, root="/", overrides=None):
    """A Config from the upstream Go agent's config.json (so `--config config.json` works).

    The service principal's secret, a bootstrap token and the cluster's CA, if the file has
    them, are held in memory only (Config.client_secret(), bootstrap_token(), cluster_ca());
    conversion warnings are in Config.warnings.
    """
    # Only here: every other load skips the converter's imports (make bench: converged re-run).
    from aks_flex_node.config import upstream as upstream_config

    file_path = locate(path, root)
    unsafe = strictmodes.problems("config file", str(file_path), file_path, root)
    if unsafe:
        raise ConfigError(unsafe, source=str(file_path))
    values, secrets, warnings = upstream_config.load_file(file_path)
    for warning in warnings:  # the CLI shows WARNING lines on stderr; the agent's go to the journal
        log.warning("%s: %s", file_path, warning)
    return from_values(values, root=root, source=str(file_path), overrides=overrides, held=secrets,
                       warnings=warnings)


def _held(held, client_secret):
    held = {k: v for k, v in (held or {}).items() if v}
    if client_secret:
        held["sp_client_secret"] = client_secret
    return held


def _build(raw, problems, source, root, overrides, held=None, warnings=(), written=()):
    problems = list(problems)
    raw = dict(raw)
    for key, value in (overrides or {}).items():
        if value is None and key in spec.key_sections():
            raw.pop(key, None)
        else:
            take_value(key, value, raw, problems, origin="override")
    reported = {key for key, value in raw.items() if value is None}
    values, failed = _validate(raw, reported, problems)
    failed |= reported
    check_meaning(values, failed, root, held, problems, written)
    if problems:
        problems.sort(key=lambda p: spec.key_order(p.key))
        raise ConfigError(problems, source=source)
    given = {key for key, value in raw.items() if value}
    return Config(values, source=source, root=root, warnings=warnings, held=held, given=given)


def _validate(raw, reported, problems):
    """configobj validate over the non-empty values: (typed values, keys that failed)."""
    configspec = spec.configspec()
    sections = spec.sections()
    document = configobj.ConfigObj(configspec=configspec, list_values=False, interpolation=False)
    for section, section_keys in sections.items():
        document[section] = {k: raw[k] for k in section_keys if raw.get(k)}  # "" = unset
    results = document.validate(spec.validator(), preserve_errors=True)
    failed = set()
    for _section_path, key, error in configobj.flatten_errors(document, results):
        if key is None:
            continue
        failed.add(key)
        if key in reported:
            continue
        if error is False:
            problems.append(ConfigProblem(key, "", spec.required_expected(key)))
        elif isinstance(error, Invalid):
            value = error.shown if error.shown is not None else raw.get(key, "")
            problems.append(ConfigProblem(key, shown(key, value), error.expected))
        else:
            problems.append(ConfigProblem(key, shown(key, raw.get(key, "")), str(error)))
    values = {}
    for section, section_keys in sections.items():
        for key in section_keys:
            if key not in failed:
                values[key] = document[section][key]
    return values, failed

