"""The local Azure Connected Machine agent CLI, `azcmagent`, run through the Host.

`azcmagent connect` creates the Arc machine resource itself; we hand it the settings and
an ARM access token in a 0600 file named by `--config`, never on argv. Reading and deleting
that resource in Azure is `aks_flex_node.azure.arc`'s part.
"""

import json
import logging
import os
import re
import stat
import uuid

from aks_flex_node import paths
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import observed
from aks_flex_node.host.run import CommandNotFound

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 600  # `azcmagent connect` installs extensions and waits for ARM
SHOW_TIMEOUT = 30
INSTALL_HINT = (
    "install the Azure Connected Machine agent package azcmagent "
    "(from packages.microsoft.com: `apt-get install azcmagent`)"
)
# The keys `azcmagent connect --config` reads are its long flag names
# (https://learn.microsoft.com/azure/azure-arc/servers/azcmagent-connect).
CONNECT_KEYS = ("tenant-id", "subscription-id", "resource-group", "location", "resource-name", "tags", "cloud")
CONFIG_TIMEOUT = 60
# The keys of `azcmagent show -j` our code reads (is_connected, steps/arc.py, preflight's
# identity). The agent's drift probe watches these alone (host/observed.py): the rest of
# the answer holds the agent's last heartbeat, which moves every few minutes
# (Learn, "azcmagent show"). tests/unit/test_host_azcmagent_show_keys.py holds every read of
# a `shown` answer in aks_flex_node to this list.
SHOW_KEYS = ("status", "resourceName", "resourceGroup", "subscriptionId", "vmId")
# The agent's own proxy settings (Learn, "Manage and maintain the Azure Connected Machine
# agent": `azcmagent config set proxy.url`, `proxy.bypass`); the only ones we manage.
PROXY_PROPERTIES = ("proxy.url", "proxy.bypass")
# The files _with_config_file writes: ours by name, so a leftover is recognised.
CONFIG_FILE = re.compile(r"azcmagent-[0-9a-f]{32}\.json")


class AzcmagentError(FlexNodeError):
    code = "azcmagent"


def format_tags(tags):
    """{"k": "v"} -> "k=v,k2=v2" (azcmagent's --tags form); values may not hold , or =."""
    if isinstance(tags, str):
        return tags
    parts = []
    for key, value in sorted((tags or {}).items()):
        for what, text in (("key", key), ("value", value)):
            if not isinstance(text, str) or "," in text or "=" in text:
                raise AzcmagentError(f"arc tag {what} = {text!r}: expected text without ',' or '='")
        parts.append(f"{key}={value}")
    return ",".join(parts)


class Azcmagent:
    """The Azure Connected Machine agent CLI, run through the Host."""

    def __init__(self, host, command="azcmagent", run_dir=paths.RUN_DIR):
        self.host = host
        self.command = command
        self.run_dir = run_dir  # root-only (0700): the connect file with the token lives here briefly
        self._swept = False

    def _run(self, args, **kwargs):
        try:
            return self.host.run([self.command, *args], **kwargs)
        except CommandNotFound as err:
            raise AzcmagentError(f"{self.command} is not installed: {err.message}", remedy=INSTALL_HINT,
                                 code="azcmagent-not-installed") from None

    def show(self):
        """`azcmagent show -j` as a dict (`status` is "Connected" or "Disconnected"...);
        None when it prints nothing. A failing agent raises CommandError with its output."""
        result = self._run(["show", "-j"], timeout=SHOW_TIMEOUT)
        if not result.stdout.strip():
            return None
        try:
            shown = json.loads(result.stdout)
        except ValueError:
            raise AzcmagentError(
                f"`{self.command} show -j` printed something that is not JSON: {result.stdout.strip()[:200]!r}"
            ) from None
        if not isinstance(shown, dict):
            raise AzcmagentError(f"`{self.command} show -j` printed {type(shown).__name__}: expected a JSON object")
        observed.narrow([self.command, "show", "-j"], SHOW_KEYS)
        return shown

    def is_connected(self, expected, shown=None):
        """Connected, to the resource `expected` names (resource-name / resource-group /
        subscription-id, or their camelCase `show -j` keys)? `shown` is a `show()` the
        caller already has (one agent call, not two)."""
        shown = self.show() if shown is None else shown
        if not shown or str(shown.get("status", "")).lower() != "connected":
            return False
        pairs = (
            ("resourceName", "resource-name"),
            ("resourceGroup", "resource-group"),
            ("subscriptionId", "subscription-id"),
        )
        for show_key, flag_key in pairs:
            wanted = expected.get(flag_key, expected.get(show_key))
            if wanted and str(shown.get(show_key, "")).lower() != str(wanted).lower():
                return False
        return True

    def _with_config_file(self, args, content, secrets, timeout):
        """Run `azcmagent <args> --config <file>` with `content` in a 0600 file that is
        deleted afterwards whatever happens: the token stays off argv, where any user
        could read it in /proc/<pid>/cmdline (proc(5)); upstream passed `--access-token`
        (Azure/AKSFlexNode v0.0.10, pkg/components/arc/arc_installer.go)."""
        self.host.ensure_dir(self.run_dir, mode=0o700)
        if not self._swept:
            self.remove_leftover_config_files()
        node_path = f"{self.run_dir}/azcmagent-{uuid.uuid4().hex}.json"
        try:
            self.host.write_file(node_path, json.dumps(content).encode(), mode=0o600)
            return self._run([*args, "--config", str(self.host.path(node_path))], timeout=timeout, secrets=secrets)
        finally:
            self.host.remove(node_path)

    # ---- token files a killed run left behind ----------------------------------------------

    def leftover_config_files(self):
        """Node paths of the token files a run killed while azcmagent ran (kill -9 skips the
        `finally` that removes them) left in the run directory: ours by name only, regular
        files only, never through a symlink (the directory itself included)."""
        real = self.host.path(self.run_dir)
        observed.looked(real)  # the drift probe's record (observed.py); the listing is audited
        try:
            if not stat.S_ISDIR(os.lstat(real).st_mode):
                return []
            entries = list(os.scandir(real))
        except FileNotFoundError:
            return []
        except OSError as err:
            log.warning("cannot look for leftover azcmagent files in %s: %s", self.run_dir, err.strerror or err)
            return []
        return sorted(f"{self.run_dir}/{e.name}" for e in entries
                      if CONFIG_FILE.fullmatch(e.name) and e.is_file(follow_symlinks=False))

    def remove_leftover_config_files(self):
        """Remove what leftover_config_files finds; returns the node paths removed."""
        removed = []
        for node_path in self.leftover_config_files():
            # Checked again right before: only a regular file goes, never what a link names.
            try:
                if not stat.S_ISREG(os.lstat(self.host.path(node_path)).st_mode):
                    continue
            except FileNotFoundError:
                continue
            self.host.remove(node_path)
            removed.append(node_path)
        if removed:
            log.info("removed %d token file(s) a killed run left in %s", len(removed), self.run_dir)
        self._swept = True
        return removed

    # ---- the agent's own settings -------------------------------------------------------

    def config_get(self, prop):
        """The value of an `azcmagent config` property as text ("" when unset).

        `config get <prop> -j` (the common -j flag, Learn "azcmagent config"); read leniently:
        a JSON string, an object holding the property, a list, or plain "prop: value" text."""
        result = self._run(["config", "get", prop, "-j"], timeout=CONFIG_TIMEOUT)
        return _config_value(result.stdout, prop)

    def config_set(self, prop, value):
        """`azcmagent config set <prop> <value>`. Only for values that are no secret: they
        are on argv (callers refuse proxy credentials, http_policy.check_for_azcmagent)."""
        log.info("setting the Arc agent's %s", prop)
        return self._run(["config", "set", prop, value], timeout=CONFIG_TIMEOUT)

    def config_clear(self, prop):
        log.info("clearing the Arc agent's %s", prop)
        return self._run(["config", "clear", prop], timeout=CONFIG_TIMEOUT)

    def connect(self, settings, access_token):
        """`azcmagent connect` with `settings` (keys: azcmagent's long flag names)."""
        unknown = sorted(set(settings) - set(CONNECT_KEYS))
        if unknown:
            raise AzcmagentError(f"azcmagent connect settings {unknown}: expected only {', '.join(CONNECT_KEYS)}")
        if not access_token:
            raise AzcmagentError("azcmagent connect: access_token is empty: expected an ARM access token",
                                 code="empty-access-token")
        content = {k: v for k, v in settings.items() if v not in (None, "", {})}
        if "tags" in content:
            content["tags"] = format_tags(content["tags"])
        content["access-token"] = access_token
        log.info("connecting the Arc agent as %s/%s", content.get("resource-group"), content.get("resource-name"))
        return self._with_config_file(["connect"], content, (access_token,), CONNECT_TIMEOUT)

    def disconnect(self, access_token=None):
        """With a token: delete the Azure resource and the local config. Without: local
        config only (`--force-local-only`, for when the resource is gone already)."""
        if access_token:
            return self._with_config_file(["disconnect"], {"access-token": access_token}, (access_token,), CONNECT_TIMEOUT)
        return self._run(["disconnect", "--force-local-only"], timeout=CONNECT_TIMEOUT)


def _config_value(stdout, prop):
    text = (stdout or "").strip()
    if not text:
        return ""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, dict):
        for key in (prop, "value", "Value"):
            if key in value:
                value = value[key]
                break
        else:
            value = next(iter(value.values())) if len(value) == 1 else ""
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    value = "" if value is None else str(value).strip()
    # Plain text: "proxy.url: http://..." or "proxy.url = http://...".
    for separator in (":", "="):
        head, sep, tail = value.partition(separator)
        if sep and head.strip().lower() == prop.lower():
            return tail.strip()
    return value
