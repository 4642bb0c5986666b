"""The file's format: what configobj parses, and the rules a value must follow to be
written and read back by the Debian maintainer scripts' sh (and sed).

Keys are unique across sections, one `key = value` per line, values are literal
(configobj's list_values=False: no quoting, no lists), no inline comments, no multi-line
values, no control characters. An empty value means the default. The file is a regular
file, checked with stat() before it is opened. Both the loader and write() hold values to
these rules through take_value().
"""

import difflib
import os
import stat
import unicodedata
from pathlib import Path

import configobj

from aks_flex_node import paths
from aks_flex_node.config import spec
from aks_flex_node.config.values import REDACTED, is_secret_key, serialize, shown
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.host import observed


def parse_problem(error):
    """A configobj parse error as a problem on its line."""
    if not hasattr(error, "line_number"):
        return ConfigProblem("config file", "", f"a file configobj can parse ({error})")
    kinds = {
        "DuplicateError": "each key and section once",
        "NestingError": "sections without nesting: [section] only",
        "UnreprError": "key = value",
    }
    expected = kinds.get(type(error).__name__, "key = value, a [section] line, or a # comment line")
    return ConfigProblem(f"line {error.line_number}", error.line.strip(), expected)


def locate(path, root):
    """Where the configuration file is on this filesystem: an absolute `path` is a node
    path (under `root`, as every path the Host is given); a relative one is taken from the
    working directory; None is paths.CONFIG."""
    path = os.fspath(path or paths.CONFIG)
    return paths.real_path(root, os.path.normpath(path)) if path.startswith("/") else Path(path)


def open_configobj(source, **kwargs):
    return configobj.ConfigObj(
        source, list_values=False, interpolation=False, encoding="utf-8", raise_errors=False,
        write_empty_values=True, file_error=True, **kwargs)


def not_regular(file_path):
    """The problem of a configuration file that is there but is not a regular file (a FIFO,
    a device, a directory, or a symlink to one), else None. It is stat()ed, never opened:
    opening a FIFO waits for a writer."""
    observed.looked(file_path)  # the agent's drift probe's record (host/observed.py)
    try:
        st = os.stat(file_path)
    except FileNotFoundError:
        return None  # the callers say how to create it
    except OSError as err:
        return ConfigProblem("config file", str(file_path), f"a file aks-flex-node can read ({err.strerror})")
    if stat.S_ISREG(st.st_mode):
        return None
    kind = file_kind(st)
    if os.path.islink(file_path):
        kind = f"a symlink to {os.path.realpath(file_path)}, {kind}"
    return ConfigProblem("config file", str(file_path),
                         f"a regular file ({file_path} is not a regular file: it is {kind})")


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"),
    (stat.S_ISLNK, "a symlink"),
)


def file_kind(st):
    """What a file is, in words, from its stat."""
    return next((name for test, name in _FILE_KINDS if test(st.st_mode)), "a special file")


def read_file(file_path, lines=None):
    """(raw values by key, problems) from the file, or from `lines` meant for it;
    structural problems are all reported."""
    problems = []
    if lines is None:
        special = not_regular(file_path)
        if special:
            raise ConfigError([special], source=str(file_path))
    try:
        parsed = open_configobj(str(file_path) if lines is None else list(lines))
    except configobj.ConfigObjError as err:
        # configobj goes on after a bad line: report every one, and check what it did read
        problems += [parse_problem(e) for e in getattr(err, "errors", None) or [err]]
        parsed = getattr(err, "config", None)
        if parsed is None:
            raise ConfigError(problems, source=str(file_path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([ConfigProblem("config file", str(file_path),
                                         f"a readable UTF-8 text file ({err.__class__.__name__}: {err})")],
                          source=str(file_path)) from None
    raw = {}
    sections = spec.sections()
    for key in parsed.scalars:
        problems.append(_misplaced(key, parsed[key], None))
    for name in parsed.sections:
        section = parsed[name]
        if name not in sections:
            near = difflib.get_close_matches(name, list(sections), n=1)
            hint = f" (did you mean [{near[0]}]?)" if near else ""
            problems.append(ConfigProblem(f"[{name}]", "", "one of the sections " +
                                          ", ".join(f"[{s}]" for s in sections) + hint))
            continue
        for sub in section.sections:
            problems.append(ConfigProblem(f"[{name}] [[{sub}]]", "",
                                          f"no subsections: keys go directly in [{name}]"))
        for key in section.scalars:
            value = section[key]
            if key not in sections[name]:
                problems.append(_misplaced(key, value, name))
                continue
            if section.inline_comments.get(key):
                problems.append(ConfigProblem(key, shown(key, value),
                                              "no comment after the value (sh readers would take it as part "
                                              "of the value): put the comment on its own line"))
            take_value(key, value, raw, problems, origin="file")
    return raw, problems


def _misplaced(key, value, section):
    """The problem of a key in the wrong place: another section, a typo, an inline secret."""
    home = spec.key_sections().get(key)
    if home:
        where = f"[{section}]" if section else "outside any section"
        return ConfigProblem(key, shown(key, value), f"{key} in section [{home}], not {where}")
    if is_secret_key(key):
        return ConfigProblem(key, REDACTED,
                             "no secret in the configuration: write the client secret to a file only root "
                             "can read (chmod 600) and name that file in sp_client_secret_file")
    near = difflib.get_close_matches(key, spec.keys(), n=1, cutoff=0.6) or \
        difflib.get_close_matches(key.lower().replace("-", "_"), spec.keys(), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else "see configuration.md for the list"
    return ConfigProblem(key, shown(key, value), f"a known key ({hint})")


def take_value(key, value, raw, problems, origin):
    """Put one key's text into raw, or a problem if it cannot be read as one line."""
    if key not in spec.key_sections():
        problems.append(_misplaced(key, value, None))
        return
    text = value if isinstance(value, str) else serialize(key, value)
    if "\n" in text or "\r" in text:
        problems.append(ConfigProblem(key, shown(key, text), "a value on a single line"))
        raw[key] = None  # reported: no "missing" problem on top
        return
    text = text.strip()
    control = next((c for c in text if is_control(c)), None)
    if control is not None:
        name = _CONTROL_NAMES.get(control, "a control character")
        # The value as it is: messages show it with repr() and output as JSON, both escape it.
        problems.append(ConfigProblem(key, shown(key, text),
                                      f"a value without control characters (it has U+{ord(control):04X}, "
                                      f"{name}, at position {text.index(control) + 1})"))
        raw[key] = None
        return
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        problems.append(ConfigProblem(key, shown(key, text),
                                      "the value without quotes (values are taken literally)"))
        raw[key] = None
        return
    if origin != "file" and "#" in text:
        problems.append(ConfigProblem(key, shown(key, text),
                                      "a value without '#' (it starts a comment in the file)"))
        raw[key] = None
        return
    raw[key] = text


# unicodedata has no names for the C0 and C1 controls: the ones people meet.
_CONTROL_NAMES = {"\0": "NUL", "\t": "TAB", "\x1b": "ESC", "\x7f": "DEL"}


def is_control(char):
    """C0 (NUL to US, tab and newline among them), DEL and C1: Unicode's category Cc. No
    value has one; in the file, a terminal or a kubelet flag each means something else."""
    return unicodedata.category(char) == "Cc"

