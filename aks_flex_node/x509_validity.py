"""When an X.509 certificate stops being valid (its notAfter), read from the certificate's
DER with the standard library alone.

Why not python3-cryptography: the agent reports the node's credential lifetimes after every
pass (health/credentials.py), and each pass is a forked child that imports what it uses
(agent.py); importing cryptography's X.509 module cost a local pass about a quarter of its
CPU, once a minute for the node's life (make bench: agent CPU per hour). Only the validity
is needed here, and its place in the DER is fixed (RFC 5280, section 4.1):

    Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue BIT STRING }
    TBSCertificate ::= SEQUENCE { version [0] EXPLICIT (optional), serialNumber INTEGER,
                                  signature AlgorithmIdentifier, issuer Name, validity Validity, ... }
    Validity ::= SEQUENCE { notBefore Time, notAfter Time }
    Time ::= CHOICE { utcTime UTCTime, generalTime GeneralizedTime }

The outer structure is checked as the RFC lays it out (tags, lengths, nothing after the
certificate); anything else raises ValueError, as cryptography's parser does for what it
cannot read. The signature is not checked: no caller trusts the certificate on this reading.
"""

import base64
import binascii
import datetime
import re

SEQUENCE, INTEGER, BIT_STRING, UTC_TIME, GENERALIZED_TIME, VERSION = 0x30, 0x02, 0x03, 0x17, 0x18, 0xA0

# RFC 5280 4.1.2.5.1 and 4.1.2.5.2: in UTC ("Z"), with seconds, without fractions.
_UTC_TIME = re.compile(rb"(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z")
_GENERALIZED_TIME = re.compile(rb"(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z")

_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n(.*?)-----END CERTIFICATE-----", re.DOTALL)


def certificate_blocks(data):
    """Each PEM CERTIFICATE block of `data` (bytes), whole, in order."""
    return [match.group(0) for match in _PEM_BLOCK.finditer(data)]


def der_of_pem(block):
    """The DER bytes of one PEM CERTIFICATE block (RFC 7468: base64 between the boundaries)."""
    match = _PEM_BLOCK.search(block)
    if not match:
        raise ValueError("no CERTIFICATE PEM block")
    try:
        return base64.b64decode(b"".join(match.group(1).split()), validate=True)
    except binascii.Error as err:
        raise ValueError(f"the PEM block is not base64: {err}") from None


def _element(data, pos, end):
    """(tag, content start, content end) of the DER element at `pos`, which must end by `end`."""
    if pos + 2 > end:
        raise ValueError("truncated DER")
    tag, first = data[pos], data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4:  # indefinite (BER, never DER) or absurd
            raise ValueError("not a DER length")
        if pos + count > end:
            raise ValueError("truncated DER")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > end:
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _expect(data, pos, end, *tags):
    tag, start, stop = _element(data, pos, end)
    if tag not in tags:
        raise ValueError(f"DER tag {tag:#04x} where {' or '.join(f'{t:#04x}' for t in tags)} belongs")
    return tag, start, stop


def _time(tag, value):
    pattern = _UTC_TIME if tag == UTC_TIME else _GENERALIZED_TIME
    match = pattern.fullmatch(value)
    if not match:
        raise ValueError(f"not an RFC 5280 time: {value[:20]!r}")
    year, *rest = (int(part) for part in match.groups())
    if tag == UTC_TIME:
        year += 1900 if year >= 50 else 2000  # RFC 5280 4.1.2.5.1
    return datetime.datetime(year, *rest, tzinfo=datetime.timezone.utc)


def validity(der):
    """(notBefore, notAfter) of the certificate `der`, as aware UTC datetimes."""
    _tag, start, end = _expect(der, 0, len(der), SEQUENCE)
    if end != len(der):
        raise ValueError("bytes after the certificate")
    _tag, tbs, tbs_end = _expect(der, start, end, SEQUENCE)
    _tag, _s, after_alg = _expect(der, tbs_end, end, SEQUENCE)  # signatureAlgorithm
    _tag, _s, after_sig = _expect(der, after_alg, end, BIT_STRING)
    if after_sig != end:
        raise ValueError("more than three parts in the certificate")
    pos = tbs
    tag, _s, stop = _element(der, pos, tbs_end)
    if tag == VERSION:
        pos = stop
    for tags in ((INTEGER,), (SEQUENCE,), (SEQUENCE,)):  # serialNumber, signature, issuer
        pos = _expect(der, pos, tbs_end, *tags)[2]
    _tag, inner, inner_end = _expect(der, pos, tbs_end, SEQUENCE)
    times = []
    for _ in range(2):
        tag, value, inner = _expect(der, inner, inner_end, UTC_TIME, GENERALIZED_TIME)
        times.append(_time(tag, der[value:inner]))
    if inner != inner_end:
        raise ValueError("more than two times in the validity")
    return times[0], times[1]


def not_after(pem_block):
    """The notAfter of the certificate in one PEM CERTIFICATE block."""
    return validity(der_of_pem(pem_block))[1]
