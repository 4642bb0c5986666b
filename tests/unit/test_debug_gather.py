"""`aks-flex-node debug`'s gathering (commands/debug.py): every part best effort, each one's
bytes redacted, a part that fails or hangs a file saying why while the others go on."""

import threading

from aks_flex_node.commands import debug
from aks_flex_node.errors import FlexNodeError
from aks_flex_node.host import Host


def no_config():
    raise FlexNodeError("no configuration here", code="config")


def test_a_part_that_fails_says_why_and_the_rest_go_on(tmp_path):
    parts = (
        ("breaks.txt", lambda g: {}["missing"]),
        ("absent.txt", lambda g: (_ for _ in ()).throw(debug.Absent("not joined"))),
        ("fine.json", lambda g: {"ok": True}),
    )
    members, manifest, _ = debug.gather(Host(str(tmp_path)), no_config, parts=parts)
    outcome = {entry["part"]: entry for entry in manifest}
    assert outcome["breaks.txt"]["status"] == "failed" and outcome["breaks.txt"]["code"] == "KeyError"
    assert outcome["absent.txt"]["status"] == "absent"
    assert outcome["fine.json"]["status"] == "ok"
    assert [name for name, _ in members] == ["breaks.txt.unavailable.txt", "absent.txt.absent.txt", "fine.json"]


def test_a_part_that_never_finishes_is_given_up(tmp_path):
    release = threading.Event()  # never set while gathering: the part cannot finish in time
    try:
        members, manifest, _ = debug.gather(Host(str(tmp_path)), no_config,
                                            parts=(("hangs.txt", lambda g: release.wait()),), deadline=0.1)
    finally:
        release.set()
    assert manifest[0]["status"] == "failed" and manifest[0]["code"] == "part-overran"
    assert members[0][0] == "hangs.txt.unavailable.txt"


def test_every_part_is_redacted_and_capped(tmp_path):
    token = "Bearer abcdefghijklmnop"
    parts = (("says.txt", lambda g: f"{token}\n"), ("big.txt", lambda g: b"x" * (debug.PART_LIMIT + 10)))
    members, manifest, _ = debug.gather(Host(str(tmp_path)), no_config, parts=parts)
    found = dict(members)
    assert b"abcdefghijklmnop" not in found["says.txt"]
    assert manifest[1]["cut"] and len(found["big.txt"]) < debug.PART_LIMIT + 200
