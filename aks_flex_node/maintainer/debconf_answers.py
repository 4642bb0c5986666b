"""The package's debconf questions and the configuration keys they answer.

`render-config` (postinst, before ucf) builds the configuration file from the answers, on
top of the current file so hand edits stay (docs/preseed.md), and moves a new client
secret into its own 0600 file and out of debconf's database at once (debconf-devel(7):
passwords are cleared as soon as they are used). The join mode decides which keys it
writes: those of another mode are emptied, and bootstrap-token leaves [auth] as it is.
aks_flex_node.maintainer.maintscript checks the files first and calls these only on files that can
be used.
"""

import logging
import os

from aks_flex_node import config, paths
from aks_flex_node.config.fileformat import take_value
from aks_flex_node.config.joinmode import JoinMode
from aks_flex_node.config.semantic import MODE_KEYS
from aks_flex_node.errors import ConfigError, ConfigProblem
from aks_flex_node.host import Host
from aks_flex_node.maintainer.debconf_channel import DebconfError, q

log = logging.getLogger("aks_flex_node.maintainer.maintscript")

# debconf question -> configuration key (docs/preseed.md; debian/config reads the same).
QUESTION_KEYS = {
    "subscription_id": "subscription_id",
    "tenant_id": "tenant_id",
    "cloud": "cloud",
    "cluster_resource_id": "cluster_resource_id",
    "resource_group": "arc_resource_group",
    "location": "arc_location",
    "machine_name": "machine_name",
    "tags": "arc_tags",
    "auth_method": "auth_method",
    "sp_client_id": "sp_client_id",
    "kubernetes_version": "kubernetes_version",
    "role_preset": "role_preset",
    "join_mode": "join_mode",
    "agent_pool": "agent_pool",
    "bootstrap_token_file": "bootstrap_token_file",
    "api_server": "api_server",
    "cluster_ca_file": "cluster_ca_file",
}
KEY_QUESTIONS = {key: question for question, key in QUESTION_KEYS.items()}
SECRET_QUESTION = "sp_client_secret"
# The select questions (debian/templates). debconf replaces an answer that is not one of
# a select's choices with the first choice, in silence, whenever the question goes
# through INPUT, shown or not (debconf's Debconf/Element/Noninteractive/Select.pm): the
# config script keeps such an answer away from INPUT, and answer_problems refuses it.
SELECT_QUESTIONS = ("join_mode", "cloud", "auth_method", "role_preset", "on_join_failure")
# The keys that mean something in some join modes only (the library refuses them in the
# others: docs/configuration.md, "Join modes"). render-config empties them in the other
# modes, as it empties the sp_* keys for another auth_method, so a reconfigure that
# switches modes leaves nothing behind that the library would refuse.
# MODE_KEYS is the configuration's own table (config/semantic.py): the two cannot drift.
# No Azure call in bootstrap-token mode: the config script does not ask for a credential,
# and render-config leaves the file's [auth] keys as they are.
AUTH_KEYS = ("auth_method", "sp_client_id")


def choices_of(channel, question):
    """The values a select question takes: its template's Choices-C, as debconf loaded it."""
    text = channel.metaget(q(question), "Choices-C")
    return [c.strip() for c in text.split(",") if c.strip()]


def library_expected(key, value):
    """What the library's check of `key` expects when it refuses `value` (it may say more
    than the choices: role_preset = minimal points at join_mode = agent-pool), or None."""
    try:
        config.from_values({key: value})
    except ConfigError as err:
        return next((p.expected for p in err.problems if p.key == key), None)
    return None


def answer_problems(channel):
    """Every answer that cannot be used as given, as ConfigProblem(question, value,
    expected): a select answer that is not one of its template's choices (in the
    library's words when it has some), a value the configuration file cannot hold ('#',
    quotes, control characters, not UTF-8). Read before anything is written, so a refused
    answer changes nothing."""
    problems = []
    strings = tuple(name for name in QUESTION_KEYS if name not in SELECT_QUESTIONS)
    for question in SELECT_QUESTIONS + strings:
        try:
            value = channel.get(q(question))
        except DebconfError:  # not UTF-8 text
            problems.append(ConfigProblem(q(question), "(not UTF-8)", "UTF-8 text"))
            continue
        if question in SELECT_QUESTIONS:
            choices = choices_of(channel, question)
            if value not in choices:
                key = QUESTION_KEYS.get(question)
                expected = key and library_expected(key, value)
                problems.append(ConfigProblem(q(question), value, expected or "one of " + ", ".join(choices)))
            continue
        found = []
        take_value(QUESTION_KEYS[question], value, {}, found, origin="write")
        problems += [ConfigProblem(q(question), value, p.expected) for p in found]
    return problems


def file_value(text, key):
    """The value of `key` in a configuration text, read as sh reads it (last one wins)."""
    value = None
    for line in text.splitlines():
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key and not name.lstrip().startswith(("#", "[")):
            value = rest.strip()
    return value


def take_secret(channel):
    """The client secret answered, cleared from debconf's database at once (debconf-devel(7)
    on passwords: clear the value as soon as possible), before anything else can fail."""
    try:
        secret = channel.get(q(SECRET_QUESTION))
    except DebconfError as err:  # not UTF-8: unusable, and cleared all the same
        log.error("%s", err.message)
        secret = ""
    finally:
        channel.set(q(SECRET_QUESTION), "")
        channel.fset(q(SECRET_QUESTION), "seen", "false")
    return secret


def store_secret(host, secret):
    host.ensure_dir(paths.CONFIG_DIR, 0o755)
    host.write_file(paths.SECRET, secret.encode("utf-8") + b"\n", 0o600)


def render_config(channel, output, root, secret, text, secret_file_ok=True):
    """Write the configuration built from the debconf answers into `output` (0600), on top
    of the current file's `text` (its other keys, comments and hand edits stay; None or
    empty: the shipped default); put a new client secret in its own 0600 file. With
    `secret_file_ok` false, the secret's file (something in its way) is not touched."""
    host = Host(root)
    # An empty or missing file starts again from the shipped default, with every key.
    base = text.encode("utf-8") if text else (
        host.read_bytes(paths.SHIPPED_DEFAULT) or config.render_default().encode("utf-8"))
    text = base.decode("utf-8")
    values = {key: channel.get(q(question)) for question, key in QUESTION_KEYS.items()}
    mode = values["join_mode"]
    if mode == JoinMode.BOOTSTRAP_TOKEN:
        for key in AUTH_KEYS:
            del values[key]
        if secret:
            log.warning("join_mode is bootstrap-token, which uses no Azure credential: the client "
                        "secret given is not stored")
    else:
        values.update(_auth_values(host, values["auth_method"], text, secret, secret_file_ok))
    values.update({key: "" for key, modes in MODE_KEYS.items() if mode not in modes})

    # `output` is a path on this filesystem (the postinst's mktemp under DPKG_ROOT), so it
    # goes to config.write with root "/".
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base)
    os.chmod(output, 0o600)
    # The answers passed answer_problems, so a ConfigError here is the file itself (a hand
    # edit gone wrong): the caller leaves it as it is, and the join step shows the note.
    config.write(output, values, root="/")


def _auth_values(host, method, text, secret, secret_file_ok):
    """The auth keys that go with the chosen method, and the secret's file."""
    out = {}
    if method != "managed-identity":
        out["managed_identity_client_id"] = ""
    if method != "service-principal":
        out.update(sp_client_id="", sp_client_secret_file="", sp_certificate_file="")
        if secret_file_ok and host.remove(paths.SECRET):
            log.info("removed %s: auth_method is %s", paths.SECRET, method)
        return out
    if not secret_file_ok:
        log.error("%s is left as it is (it is not a file)%s", paths.SECRET,
                  ": the client secret given is not stored" if secret else "")
        return out
    if secret:
        store_secret(host, secret)
        out.update(sp_client_secret_file=paths.SECRET, sp_certificate_file="")
    elif not file_value(text, "sp_client_secret_file") and not file_value(text, "sp_certificate_file") \
            and host.read_bytes(paths.SECRET) is not None:
        out["sp_client_secret_file"] = paths.SECRET
    return out


def question_of(key):
    question = KEY_QUESTIONS.get(key)
    if key == "sp_client_secret_file":
        question = SECRET_QUESTION
    where = f"{key} in {paths.CONFIG}"
    return f"{q(question)} ({where})" if question else where
