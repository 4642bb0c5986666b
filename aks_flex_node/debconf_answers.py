"""The package's debconf questions and the configuration keys they answer.

`render-config` (postinst, before ucf) builds the configuration file from the answers, on
top of the current file so hand edits stay (docs/preseed.md), and moves a new client
secret into its own 0600 file and out of debconf's database at once (debconf-devel(7):
passwords are cleared as soon as they are used).
"""

import logging
import os

from aks_flex_node import config, paths
from aks_flex_node.debconf_channel import q
from aks_flex_node.errors import ConfigError

log = logging.getLogger("aks_flex_node.maintscript")

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
}
KEY_QUESTIONS = {key: question for question, key in QUESTION_KEYS.items()}
SECRET_QUESTION = "sp_client_secret"


def file_value(text, key):
    """The value of `key` in a configuration text, read as sh reads it (last one wins)."""
    value = None
    for line in text.splitlines():
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key and not name.lstrip().startswith(("#", "[")):
            value = rest.strip()
    return value


def render_config(channel, output, root):
    """Write the configuration built from the debconf answers into `output` (0600), on top
    of the current file (its other keys, comments and hand edits stay) or the shipped
    default; move a new client secret into its own 0600 file and out of debconf."""
    from aks_flex_node.host import Host

    host = Host(root)
    # An empty or missing file starts again from the shipped default, with every key.
    base = host.read_bytes(paths.CONFIG) or host.read_bytes(paths.SHIPPED_DEFAULT) or \
        config.render_default().encode("utf-8")
    text = base.decode("utf-8")
    values = {key: channel.get(q(question)) for question, key in QUESTION_KEYS.items()}
    values.update(_auth_values(channel, host, values["auth_method"], text))

    # `output` is a path on this filesystem (the postinst's mktemp under DPKG_ROOT), so it
    # goes to config.write with root "/".
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base)
    os.chmod(output, 0o600)
    try:
        config.write(output, values, root="/")
    except ConfigError as err:
        # A value that cannot even be written (a '#', quotes): keep the file's, say which.
        bad = {p.key for p in err.problems}
        for problem in err.problems:
            log.error("%s: %s", question_of(problem.key), problem)
        try:
            config.write(output, {k: v for k, v in values.items() if k not in bad}, root="/")
        except ConfigError:
            # The file itself does not parse (a hand edit gone wrong): leave it as it is;
            # the join step reports it again and does not join.
            log.error("%s is left as it is: fix it, then run dpkg-reconfigure aks-flex-node",
                      paths.CONFIG)


def _auth_values(channel, host, method, text):
    """The auth keys that go with the chosen method; the secret is consumed here."""
    secret = channel.get(q(SECRET_QUESTION))
    # debconf-devel(7) on passwords: clear the value out of the database as soon as possible.
    channel.set(q(SECRET_QUESTION), "")
    channel.fset(q(SECRET_QUESTION), "seen", "false")
    out = {}
    if method != "managed-identity":
        out["managed_identity_client_id"] = ""
    if method != "service-principal":
        out.update(sp_client_id="", sp_client_secret_file="", sp_certificate_file="")
        if host.remove(paths.SECRET):
            log.info("removed %s: auth_method is %s", paths.SECRET, method)
        return out
    if secret:
        host.ensure_dir("/etc/aks-flex-node", 0o755)
        host.write_file(paths.SECRET, secret.encode("utf-8") + b"\n", 0o600)
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
