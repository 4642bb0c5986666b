"""Writing the configuration file: the default file rendered from the configspec, and
write(), which sets keys in a new or existing file atomically (mode 0600); render() is
what write() would write, for checking before anything is written.
"""

import configobj

from aks_flex_node.config import spec
from aks_flex_node.config.fileformat import locate, not_regular, open_configobj, parse_problem, take_value
from aks_flex_node.config.values import serialize
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.host import fs


def render_default():
    """The default configuration file: every key with its comment; required ones empty."""
    configspec = spec.configspec()
    check_values = spec.validator()
    lines = list(configspec.initial_comment)
    for section in configspec.sections:
        lines += configspec.comments.get(section, [])
        lines.append(f"[{section}]")
        for key in configspec[section].scalars:
            lines += configspec[section].comments.get(key, [])
            check = configspec[section][key]
            default = "" if "default=" not in check else serialize(key, check_values.get_default_value(check))
            lines.append(f"{key} = {default}".rstrip())
    return "\n".join(line.rstrip() for line in lines) + "\n"


def write(path, values, root="/"):
    """Write values (key -> text or typed value) into the configuration file, atomically,
    mode 0600. An existing file keeps its other keys, comments and hand edits (configobj
    round trip); a new one gets the default file's layout and comments. `path` as for
    load(). Values are checked for shape (known key, one line); load() checks their
    meaning."""
    file_path, text = render(path, values, root)
    # fs makes missing parents exactly 0755 whatever the umask (pathlib's mkdir would
    # leave them 0777 & ~umask).
    fs.write_file(str(file_path), text.encode("utf-8"), 0o600)
    return str(file_path)


def render(path, values, root="/"):
    """(where the file is, the text write() would put there), writing nothing; ConfigError
    when a value cannot be held by the file or the existing file cannot be parsed."""
    file_path = locate(path, root)
    source = str(file_path)
    problems = []
    texts = {}
    for key, value in values.items():
        raw = {}
        take_value(key, value, raw, problems, origin="write")
        if raw.get(key) is not None:
            texts[key] = raw[key]
    special = not_regular(file_path)
    if special:
        problems.append(special)  # never opened: a FIFO would block the write
    elif file_path.exists():
        try:
            document = open_configobj(str(file_path))
        except configobj.ConfigObjError as err:
            problems += [parse_problem(e) for e in getattr(err, "errors", None) or [err]]
        except (OSError, UnicodeDecodeError) as err:
            problems.append(ConfigProblem("config file", source, f"a readable UTF-8 text file "
                                                                 f"({err.__class__.__name__}: {err})"))
    else:
        document = open_configobj(render_default().splitlines())
    if problems:
        raise ConfigError(problems, source=source)
    configspec = spec.configspec()
    for key, text in texts.items():
        home = spec.section_of(key)
        for name in document.sections:  # a hand-placed copy in the wrong section goes
            if name != home and key in document[name].scalars:
                del document[name][key]
        if home not in document.sections:
            document[home] = {}
            document.comments[home] = list(configspec.comments.get(home, [])) or [""]
        if key not in document[home].scalars:
            document[home][key] = text
            document[home].comments[key] = list(configspec[home].comments.get(key, []))
        document[home][key] = text
    document.filename = None
    # With an encoding set, configobj returns the lines encoded.
    lines = [line.decode("utf-8") if isinstance(line, bytes) else line for line in document.write()]
    return file_path, "\n".join(line.rstrip() for line in lines) + "\n"
