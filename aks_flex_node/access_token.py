"""What an access token we hand the kubelet may be: the checks HIMDS's answer
(azure/himds.py parse_token) and the token cache (token.py) share. Stdlib only, and light:
a cache hit imports this.

A token is sent as `Authorization: Bearer <token>`, so it is RFC 6750's b64token (section
2.1: letters, digits and `-._~+/`, then `=` padding), which rules out spaces, quotes and
terminal escapes; Entra's are JWTs, three base64url parts joined by dots. Its expiry is
whole seconds since the epoch, and no Entra token lives long: an access token's default
lifetime is 60 to 90 minutes and a token lifetime policy may stretch it to 1 day at most
("Configurable token lifetimes in the Microsoft identity platform", learn.microsoft.com,
entra/identity-platform/configurable-token-lifetimes), and managed identity tokens are
cached by Azure for about 24 hours ("Managed identities for Azure resources frequently
asked questions", learn.microsoft.com). An expiry more than MAX_LIFETIME ahead, or already
past by more than CLOCK_SKEW, is no token of Entra's: it is refused (from HIMDS) or ignored
(from the cache) before anything formats it (time.gmtime(1e17) raises OverflowError).
"""

import re

# RFC 6750 section 2.1 b64token.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# Entra access tokens are a few KB (a JWT with group claims can reach ~8 KB): 32 KiB is
# roomy, and keeps the cache file under the 64 KiB its reader takes.
MAX_TOKEN_CHARS = 32768
MAX_LIFETIME = 48 * 3600  # twice the longest Entra documents (see above)
CLOCK_SKEW = 300  # seconds an expiry may lie in the past: our clock may run ahead
_DIGITS = re.compile(r"[0-9]{1,12}")  # a decimal count of seconds, nothing else (no "1e17", "inf", "-5")


class BadTokenField(ValueError):
    """A field of a token answer or cache entry that is not what a token's may be: `field`,
    `value` (as received) and `expected`, in the operator's words."""

    def __init__(self, field, value, expected):
        super().__init__(f"{field} = {shown(value)}: expected {expected}")
        self.field, self.value, self.expected = field, value, expected


def shown(value, limit=80):
    """`value` for a message: its repr, cut to `limit` characters (a token answer is
    untrusted and may be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def access_token(value, field="access_token"):
    """`value` when it is a token we can send as a Bearer credential, else BadTokenField."""
    if not isinstance(value, str) or not value:
        raise BadTokenField(field, value, "a non-empty string")
    if len(value) > MAX_TOKEN_CHARS:
        raise BadTokenField(field, value, f"at most {MAX_TOKEN_CHARS} characters")
    if not _B64TOKEN.fullmatch(value):
        raise BadTokenField(field, value, "an RFC 6750 bearer token (letters, digits and -._~+/ then = padding)")
    return value


def seconds(value, field):
    """A whole number of seconds, as a JSON integer or a string of decimal digits (IMDS sends
    numbers as strings); anything else (a float, "1e17", "inf", a bool) is BadTokenField."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12:
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    raise BadTokenField(field, value, "whole seconds: a decimal integer")


def expiry(expires_on, now, field="expires_on"):
    """`expires_on` (seconds since the epoch) when it lies between CLOCK_SKEW seconds ago and
    MAX_LIFETIME ahead of `now`, else BadTokenField."""
    if not now - CLOCK_SKEW <= expires_on <= now + MAX_LIFETIME:
        raise BadTokenField(field, expires_on, f"a time between {CLOCK_SKEW} s ago and {MAX_LIFETIME // 3600} h "
                                               f"from now (now is {now})")
    return expires_on
