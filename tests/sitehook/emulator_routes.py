"""Name resolution for the tests: a public host name answered by the emulator on loopback.

Why: Ubuntu 22.04's azure-identity 1.7.0 cannot turn off MSAL's instance discovery
(aks_flex_node/azure/sdk_compat.py, instance_discovery_switch), so the library accepts only
Entra ID's own authority hosts there (aks_flex_node/azure/auth.py). To run the join on that
stack the tests configure the real public authority, https://login.microsoftonline.com, and
resolve its name to the emulator: as /etc/hosts plus a port forward would, at the one place
every client asks (socket.getaddrinfo), so the SDK, MSAL and the library run exactly the code
they run against Entra ID (MSAL knows the host: it asks /common/discovery/instance only for
the host's aliases, then reads the tenant's openid-configuration). TLS is unchanged: the name is checked against the emulator's
certificate, which carries it (tests/emulator/tls.py).

The routes come from the environment, read at each lookup so that children inherit them:
    AKS_FLEX_NODE_TEST_ROUTES="login.microsoftonline.com=127.0.0.1:43121[,host=addr:port]"
Only port 443 of a routed name is rewritten, and only to a loopback address: tests never
reach beyond loopback.

Loaded by a .pth file in the Ubuntu venvs (Makefile, ubuntu-suite), so that every Python
process of the suite has it, pytest's own included; tests/unit/test_emulator_routes.py tests
it on any interpreter. Standard library only: it runs at interpreter start-up.
"""

import ipaddress
import os
import socket

VARIABLE = "AKS_FLEX_NODE_TEST_ROUTES"
_system_getaddrinfo = socket.getaddrinfo


def parse(text):
    """{host: (address, port)} from VARIABLE's value; a route off loopback is refused."""
    routes = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, target = item.partition("=")
        address, _, port = target.rpartition(":")
        address = address.strip("[]")
        if not ipaddress.ip_address(address).is_loopback:
            raise ValueError(f"{VARIABLE}: {item!r}: expected a loopback address")
        routes[host.strip().lower()] = (address, int(port))
    return routes


def route(host, address, port, environ=os.environ):
    """Add (or move) the route for `host` in `environ`; returns the variable's new value."""
    new = parse(f"{host}={address}:{port}")  # refuses a target off loopback before anything changes
    routes = {**parse(environ.get(VARIABLE, "")), **new}
    value = ",".join(f"{h}={a}:{p}" for h, (a, p) in routes.items())
    environ[VARIABLE] = value
    return value


def getaddrinfo(host, port, *args, **kwargs):
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    routes = os.environ.get(VARIABLE)  # unset in every run but Ubuntu 22.04's: no parsing then
    if routes and isinstance(host, str) and str(port) in ("443", "https"):
        target = parse(routes).get(host.lower().rstrip("."))
        if target:
            host, port = target
    return _system_getaddrinfo(host, port, *args, **kwargs)


def install():
    socket.getaddrinfo = getaddrinfo


install()
