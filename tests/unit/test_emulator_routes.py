"""tests/sitehook/emulator_routes.py: the name routing the Ubuntu 22.04 runs rely on.

Every Entra ID request of those runs goes through it, so a route that leaked off loopback or
caught the wrong port would send a test to the internet or break name resolution for all.
"""

import importlib.util
import pathlib
import socket

import pytest

HOOK = pathlib.Path(__file__).resolve().parents[1] / "sitehook" / "emulator_routes.py"


@pytest.fixture
def hook(monkeypatch):
    """The module loaded afresh; socket.getaddrinfo put back after the test (it installs itself)."""
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    spec = importlib.util.spec_from_file_location("emulator_routes_under_test", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv(module.VARIABLE, raising=False)
    return module


def addresses(results):
    return {sockaddr[:2] for *_, sockaddr in results}


def test_a_routed_name_resolves_to_its_loopback_target_on_port_443_only(hook, monkeypatch):
    monkeypatch.setenv(hook.VARIABLE, "localhost=127.0.0.2:4443")
    assert socket.getaddrinfo is hook.getaddrinfo
    assert addresses(socket.getaddrinfo("localhost", 443, type=socket.SOCK_STREAM)) == {("127.0.0.2", 4443)}
    assert addresses(socket.getaddrinfo("LOCALHOST.", "https", type=socket.SOCK_STREAM)) == {("127.0.0.2", 4443)}
    # Another port of the same name is the system's answer.
    assert ("127.0.0.2", 4443) not in addresses(socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM))


def test_without_routes_resolution_is_the_systems(hook):
    assert addresses(socket.getaddrinfo("127.0.0.1", 443, type=socket.SOCK_STREAM)) == {("127.0.0.1", 443)}


def test_routes_are_read_at_each_lookup_so_children_and_later_changes_see_them(hook, monkeypatch):
    environ = {}
    assert hook.route("Login.Example", "127.0.0.1", 1000, environ) == "login.example=127.0.0.1:1000"
    hook.route("other.example", "::1", 2000, environ)
    # Moving a route replaces it, keeping the others.
    hook.route("login.example", "127.0.0.1", 3000, environ)
    assert hook.parse(environ[hook.VARIABLE]) == {"login.example": ("127.0.0.1", 3000),
                                                  "other.example": ("::1", 2000)}
    monkeypatch.setenv(hook.VARIABLE, environ[hook.VARIABLE])
    assert addresses(socket.getaddrinfo("login.example", 443, type=socket.SOCK_STREAM)) == {("127.0.0.1", 3000)}


@pytest.mark.parametrize("value", ["login.example=10.0.0.1:443", "login.example=192.0.2.7:443"])
def test_a_route_off_loopback_is_refused(hook, value):
    with pytest.raises(ValueError, match="expected a loopback address"):
        hook.parse(value)
    with pytest.raises(ValueError, match="expected a loopback address"):
        hook.route("login.example", value.split("=")[1].split(":")[0], 443, {})
