"""Values as text: the one-line form of a typed value, and what of it may be shown.

Secrets (a key naming one) and proxy credentials never reach an error message or output.
"""

import re
from collections.abc import Mapping

from aks_flex_node import http_policy

REDACTED = http_policy.REDACTED
_SECRET_WORDS = re.compile(r"secret|password|passwd|token|credential", re.I)


def serialize(key, value):
    """The one-line text of a typed value, as written in the file."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        separator = "<" if key == "eviction_hard" else "="
        return ",".join(f"{k}{separator}{v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value).strip()


def redact_url(value):
    """https://user:pass@host -> https://***@host: proxy credentials never reach output."""
    return http_policy.redact(value)


def is_secret_key(key):
    return bool(_SECRET_WORDS.search(key)) and not key.endswith(("_file", "_dir", "_endpoint"))


def shown(key, value):
    """A value as it may appear in an error or output: secrets and proxy credentials hidden."""
    if is_secret_key(key):
        return REDACTED
    if key == "https_proxy":
        return redact_url(value)
    return value
