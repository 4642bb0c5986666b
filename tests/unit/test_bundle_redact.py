"""The support bundle's one redactor (aks_flex_node/commands/bundle_redact.py): what it takes
out of any part's bytes, known by value or by pattern."""

import base64
import json

from aks_flex_node.commands.bundle_redact import Redactor, private_key_lines

BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu"
KEY = f"-----BEGIN RSA PRIVATE KEY-----\n{BODY}\n-----END RSA PRIVATE KEY-----\n"


def test_a_private_key_block_is_removed_whole_even_unterminated():
    clean = Redactor().text(f"before\n{KEY}after\n-----BEGIN PRIVATE KEY-----\n{BODY}")
    assert "MIIEvQ" not in clean and "MzEfYy" not in clean
    assert "before" in clean and "after" in clean and "[RSA PRIVATE KEY removed]" in clean


def test_a_known_secret_goes_in_every_form_it_is_written():
    secret = 'pa"ss\\word-1234'
    redactor = Redactor([secret])
    for form in (secret, base64.b64encode(secret.encode()).decode(), json.dumps(secret)[1:-1],
                 base64.urlsafe_b64encode(secret.encode()).decode().rstrip("=")):
        assert form not in redactor.text(f"x {form} y"), form


def test_credentials_go_by_pattern_unknown():
    text = ("Authorization: Bearer abc.def-ghi\n"
            "token 0a1b2c.0123456789abcdef\n"
            "https_proxy=http://user:pw@proxy:3128/\n"
            "mirror https://acct.blob.core.windows.net/k8s?sv=2022-11-02&sig=AbCd%2Bsecret123&se=x\n"
            "jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl\n")
    clean = Redactor().text(text)
    for leaked in ("abc.def-ghi", "0a1b2c.0123456789abcdef", "user:pw", "eyJzdWIiOiJ4In0", "c2lnbmF0dXJl",
                   "AbCd%2Bsecret123"):
        assert leaked not in clean, leaked
    assert "proxy:3128" in clean and "sv=2022-11-02" in clean and "&se=x" in clean


def test_a_key_body_is_known_line_by_line():
    assert private_key_lines(KEY) == BODY.splitlines()
    assert private_key_lines("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n") == []


def test_short_values_are_not_taken_for_secrets():
    assert Redactor(["ab", ""]).text("abcab") == "abcab"


def test_bytes_that_are_not_utf8_are_still_read():
    assert b"pw-secret" not in Redactor(["pw-secret"]).bytes(b"\xff pw-secret \xfe")
