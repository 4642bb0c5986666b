"""The drift probe watches `azcmagent show -j` at host/azcmagent.SHOW_KEYS alone (its answer
holds a heartbeat time that moves on its own): every key aks_flex_node reads of a shown
answer must be in that list, or a change to it would go unseen between real passes."""

import pathlib
import re

from aks_flex_node.host import azcmagent

PACKAGE = pathlib.Path(azcmagent.__file__).resolve().parent.parent
# A read of a shown answer: shown.get("key") or shown["key"], and is_connected's pairs.
READ = re.compile(r"""\bshown(?:\.get\(|\[)\s*["'](\w+)["']""")
PAIR = re.compile(r"""\(\s*"(\w+)",\s*"[\w-]+"\s*\)""")


def test_every_key_read_of_azcmagent_show_is_watched():
    read = {}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for key in READ.findall(text):
            read.setdefault(key, str(path.relative_to(PACKAGE)))
    source = pathlib.Path(azcmagent.__file__).read_text()
    pairs = source[source.index("def is_connected"):source.index("def _with_config_file")]
    for key in PAIR.findall(pairs):
        read.setdefault(key, "host/azcmagent.py is_connected")
    assert {"status", "resourceName"} <= set(read), read  # the scan finds what it looks for
    assert {k: where for k, where in read.items() if k not in azcmagent.SHOW_KEYS} == {}
