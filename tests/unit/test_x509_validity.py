"""x509_validity.py: a certificate's notBefore and notAfter read from its DER with the
standard library, the same as python3-cryptography reads them (certificates made here with
it), for both of RFC 5280's time forms; anything that is not a certificate raises ValueError."""

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from aks_flex_node import x509_validity

UTC = datetime.timezone.utc


def certificate(not_before, not_after, key=None, cn="node"):
    key = key or ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes")])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))


def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def der(cert):
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize("not_before, not_after", [
    # UTCTime both (RFC 5280 4.1.2.5: dates through 2049)
    (datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), datetime.datetime(2034, 6, 7, 8, 9, 10, tzinfo=UTC)),
    # GeneralizedTime from 2050 on; a UTCTime before 2000 (a year >= 50 is 19YY)
    (datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC), datetime.datetime(2051, 1, 1, 0, 0, 0, tzinfo=UTC)),
    (datetime.datetime(2049, 12, 31, 23, 59, 59, tzinfo=UTC), datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
])
def test_reads_what_cryptography_reads(not_before, not_after):
    cert = certificate(not_before, not_after)
    assert x509_validity.validity(der(cert)) == (not_before, not_after)
    assert x509_validity.not_after(pem(cert)) == not_after


def test_an_rsa_certificate_with_a_long_length_form():
    """An RSA-2048 key makes the DER longer than 255 bytes: lengths in two bytes."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    end = datetime.datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
    cert = certificate(datetime.datetime(2021, 1, 1, tzinfo=UTC), end, key=key)
    assert len(der(cert)) > 255
    assert x509_validity.not_after(pem(cert)) == end


def _swap_time(data, old, new):
    assert data.count(old) == 1 and len(old) == len(new)
    return data.replace(old, new)


def _pem_of(data):
    return (b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(data) + b"-----END CERTIFICATE-----\n")


GOOD = certificate(datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), datetime.datetime(2034, 6, 7, 8, 9, 10, tzinfo=UTC))


@pytest.mark.parametrize("data", [
    b"",
    b"\x30\x03\x02\x01",  # truncated
    der(GOOD)[:-1],  # the signature cut short
    der(GOOD) + b"\x00",  # a byte after the certificate
    b"\x30\x80" + der(GOOD)[2:],  # BER's indefinite length
    b"\x02\x01\x00",  # an INTEGER, not a certificate
    _swap_time(der(GOOD), b"340607080910Z", b"3406070809100"),  # not in UTC
    _swap_time(der(GOOD), b"340607080910Z", b"34060708091aZ"),  # not digits
    _swap_time(der(GOOD), b"240102030405Z", b"241302030405Z"),  # month 13
], ids=["empty", "truncated", "short-signature", "trailing", "indefinite", "integer", "not-utc",
        "not-digits", "month-13"])
def test_what_is_not_a_certificate_raises_value_error(data):
    with pytest.raises(ValueError):
        x509_validity.validity(data)
    with pytest.raises(ValueError):
        x509_validity.not_after(_pem_of(data))


@pytest.mark.parametrize("block", [
    b"no block here",
    b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",  # not base64
    b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",  # base64 of three zero bytes
])
def test_a_pem_block_that_holds_no_certificate_raises_value_error(block):
    with pytest.raises(ValueError):
        x509_validity.not_after(block)
