"""A Kubernetes resource quantity ("2", "1k", "500m", "4Gi", "1e3") as an exact number.

The grammar is apimachinery's (k8s.io/apimachinery pkg/api/resource/quantity.go):

    <quantity>        ::= <signedNumber><suffix>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

The API server writes a quantity in its canonical form, which is not always plain digits:
1000 devices are "1k" (quantity.go CanonicalizeBytes), so a count is parsed, never int()ed.
What it reads comes from the network: a value of more than MAX_LENGTH characters, or an
exponent beyond MAX_EXPONENT, is refused rather than computed.
"""

import fractions
import re

MAX_LENGTH = 64
MAX_EXPONENT = 64  # 1e64: far beyond any count; a bigger one would only cost time to compute
_QUANTITY = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[mkMGTPE]?)", re.ASCII)
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"m": fractions.Fraction(1, 1000), "": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
            "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}


def parse(value):
    """The exact value (a fractions.Fraction) of quantity `value`: a string in the grammar
    above, or a JSON integer (a Quantity unmarshals from one too). ValueError saying why not."""
    if isinstance(value, int) and not isinstance(value, bool):
        return fractions.Fraction(value)
    if not isinstance(value, str):
        raise ValueError(f"a JSON {type(value).__name__}, not a quantity")
    if len(value) > MAX_LENGTH:
        raise ValueError(f"longer than {MAX_LENGTH} characters")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError("not a quantity (digits, then one of the suffixes m k M G T P E Ki Mi Gi Ti Pi Ei or e<n>)")
    sign, number, suffix = match.groups()
    amount = fractions.Fraction(number if not number.endswith(".") else number[:-1])
    if suffix in _BINARY:
        amount *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        amount *= _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"an exponent beyond {MAX_EXPONENT}")
        amount *= fractions.Fraction(10) ** exponent
    return -amount if sign == "-" else amount
