"""The emulator's WAN profile (tests/emulator/wan.py): one setting per service, the bench's
figures as the `wan` profile, which request waits which knob, the shared artifact link, and
the request log's start and end of each request (what tests/request_chains.py reads).
No test here asserts a duration: the knobs are judged by what they select, not by a clock."""

import threading

import pytest

from tests.emulator import artifacts, profiles, wan
from tests.request_chains import chain_depth, window
from tests.waiting import wait_for

KNOBS = ("wan_arm_rtt", "wan_entra_rtt", "wan_apiserver_rtt", "wan_himds_rtt", "wan_artifacts_rtt",
         "arc_connect_delay")


def test_each_knob_is_a_setting_that_defaults_to_nothing():
    defaults = profiles.default_settings()
    assert {k: defaults[k] for k in KNOBS} == {k: 0.0 for k in KNOBS}
    assert defaults["artifact_real_sizes"] is False and defaults["artifact_rate"] == 0
    assert set(wan.RTT_SETTINGS.values()) <= set(profiles.SETTINGS)


def test_the_wan_profile_holds_the_bench_figures():
    """Issue 30's figures: ARM 60 ms, Entra 40 ms, API server 20 ms, HIMDS 1 ms, artifacts at
    25 MB/s with real sizes, RBAC propagation 30 s, Arc connect 15 s."""
    settings = profiles.validate_settings(profiles.world("wan")["settings"])
    assert settings == {
        "wan_arm_rtt": 0.060, "wan_entra_rtt": 0.040, "wan_apiserver_rtt": 0.020, "wan_himds_rtt": 0.001,
        "wan_artifacts_rtt": 0.020, "artifact_rate": 25_000_000, "artifact_real_sizes": True,
        "rbac_propagation_delay": 30.0, "arc_connect_delay": 15.0}


@pytest.mark.parametrize("key", KNOBS)
def test_a_negative_round_trip_is_refused_naming_the_setting(key):
    with pytest.raises(profiles.SettingsError) as err:
        profiles.validate_settings({key: -0.01})
    assert key in str(err.value) and "-0.01" in str(err.value)


def test_artifact_real_sizes_takes_a_boolean_only():
    with pytest.raises(profiles.SettingsError) as err:
        profiles.validate_settings({"artifact_real_sizes": "yes"})
    assert "artifact_real_sizes" in str(err.value)


@pytest.mark.parametrize("kind,setting", sorted(wan.RTT_SETTINGS.items()))
def test_each_service_waits_its_own_round_trip(kind, setting):
    settings = dict(profiles.default_settings(), **{setting: 0.5})
    assert wan.delay(settings, kind, "GET", "/anything") == 0.5
    others = [k for k in wan.RTT_SETTINGS if k != kind]
    assert all(wan.delay(settings, other, "GET", "/anything") == 0.0 for other in others)


def test_arc_connect_time_is_waited_by_the_agent_stand_in_binding_himds_only():
    settings = dict(profiles.default_settings(), arc_connect_delay=15.0)
    assert wan.delay(settings, "admin", "POST", "/_emulator/himds/bind") == 15.0
    assert wan.delay(settings, "admin", "POST", "/_emulator/settings") == 0.0
    assert wan.delay(settings, "admin", "GET", "/_emulator/himds/bind") == 0.0


def test_real_sizes_charge_the_link_for_the_real_file():
    on = dict(profiles.default_settings(), artifact_real_sizes=True)
    stand_in = artifacts.build("kubernetes-node-v1.30.4-linux-amd64.tar.gz")
    factor = wan.charge_factor(on, artifacts.kind_of("kubernetes-node-v1.30.4-linux-amd64.tar.gz"), len(stand_in))
    assert factor * len(stand_in) == pytest.approx(wan.REAL_SIZES["kubernetes"])
    assert wan.charge_factor(profiles.default_settings(), "kubernetes", len(stand_in)) == 1.0
    assert wan.charge_factor(on, None, 100) == 1.0  # a name that is no release: its own size
    assert wan.charge_factor(on, "runc", 10**9) == 1.0  # never less than the bytes sent


def test_downloads_at_once_share_the_link():
    now = [100.0]
    link = wan.Link(clock=lambda: now[0])
    assert link.reserve(50, rate=100) == 100.5
    assert link.reserve(50, rate=100) == 101.0  # booked behind the first: the link is shared
    now[0] = 200.0
    assert link.reserve(100, rate=100) == 201.0  # an idle link starts from now


def test_the_request_log_has_each_requests_start_and_end(fresh_emulator):
    emu = fresh_emulator
    since = emu.requests()[-1]["time"] if emu.requests() else 0
    emu.settings(wan_entra_rtt=0.01)
    for _ in range(2):
        assert emu.http("GET", f"{emu.entra}/common/v2.0/.well-known/openid-configuration")[0] in (200, 400, 404)
    got = [r for r in window(emu.requests(server="entra"), since)]
    assert len(got) == 2 and all(r["ended"] >= r["time"] for r in got)
    assert chain_depth(got)[0] == 2  # one after the other


def test_requests_held_together_overlap_and_do_not_chain(fresh_emulator):
    """Two requests a hold fault keeps until both are in: answered at once, depth 1."""
    emu = fresh_emulator
    url = f"{emu.entra}/common/v2.0/.well-known/openid-configuration"
    emu.faults([{"match": {"server": "entra", "times": 2}, "hold": True}])
    threads = [threading.Thread(target=emu.http, args=("GET", url)) for _ in range(2)]
    for t in threads:
        t.start()
    assert wait_for(lambda: emu.state()["fault_hits"] >= 2), "both requests held"
    emu.clear_faults()
    for t in threads:
        t.join(30)
    held = [r for r in emu.requests(server="entra") if r["fault"] == "hold"]
    assert len(held) == 2 and chain_depth(held)[0] == 1
