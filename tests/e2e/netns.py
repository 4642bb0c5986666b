"""A network namespace of a node's own, joined to the host only by loopback forwarding.

    ns = NetNamespace("aks-e2e-1a2b3c").create()     # ip netns add, lo up
    ns.forward_in(port)    # in the node, 127.0.0.1:port reaches the host's 127.0.0.1:port
    host_port = ns.expose(22)    # on the host, 127.0.0.1:host_port reaches the node's :22
    ns.delete()

Why: a node's Arc agent serves HIMDS on 127.0.0.1:40342 and a machine's sshd listens on
port 22, so nodes that share the host's network can run only one at a time, and an sshd
(or cloud-init's network stage) inside would act on the host's own network. In a namespace
of its own a node has its own loopback and interfaces; the emulator and the artifact
mirror, which listen on the host's loopback, are reached through forwarded ports, so the
node's configuration (https://127.0.0.1:PORT) is the same in both set-ups.

A socket belongs to the network namespace its creator was in when it was made, whatever
happens later (network_namespaces(7)). So one host process serves both directions: it
makes a socket inside the node's namespace by switching its own thread there with
setns(2) just for socket(2), and everything else (bind, connect, accept, the byte copying)
happens from the host's namespace. Python 3.11 has no os.setns (3.12 added it): libc's.
"""

import contextlib
import ctypes
import os
import socket
import subprocess
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
BUFFER = 65536


class NetNamespaceError(Exception):
    pass


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetNamespaceError(f"setns: {os.strerror(err)}")


def socket_in(ns_path):
    """A TCP socket made inside the namespace bound at ns_path (the calling thread is back
    in its own namespace when this returns, even on failure)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


def _pump(source, sink):
    """Copy bytes one way until EOF, then pass the EOF on (half close)."""
    try:
        while True:
            data = source.recv(BUFFER)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _splice(client, make_upstream, address):
    try:
        upstream = make_upstream()
        upstream.connect(address)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


class _Forwarder:
    """Accepts on `listener` and joins each connection to `address`, reached with a socket
    from make_upstream()."""

    def __init__(self, listener, make_upstream, address):
        self.listener = listener
        self.make_upstream = make_upstream
        self.address = address
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self):
        return self.listener.getsockname()[1]

    def _serve(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed by stop()
                return
            threading.Thread(target=_splice, args=(client, self.make_upstream, self.address), daemon=True).start()

    def stop(self):
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


class NetNamespace:
    """A named network namespace (ip-netns(8): bound at /run/netns/NAME), so nspawn's
    --network-namespace-path can put a container in it."""

    def __init__(self, name):
        self.name = name
        self.path = f"/run/netns/{name}"
        self.forwarders = []

    def create(self):
        if os.path.exists(self.path):
            raise NetNamespaceError(f"{self.path} exists: a killed run left it (`make e2e-clean`)")
        _ip("netns", "add", self.name)
        try:
            _ip("-n", self.name, "link", "set", "lo", "up")
        except NetNamespaceError:
            self.delete()
            raise
        return self

    def forward_in(self, port):
        """Inside the namespace, 127.0.0.1:port reaches the host's 127.0.0.1:port."""
        listener = socket_in(self.path)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        self.forwarders.append(_Forwarder(listener, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
                                          ("127.0.0.1", port)))

    def expose(self, port):
        """A host port on 127.0.0.1 whose connections reach 127.0.0.1:port inside."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        forwarder = _Forwarder(listener, lambda: socket_in(self.path), ("127.0.0.1", port))
        self.forwarders.append(forwarder)
        return forwarder.port

    def delete(self):
        for forwarder in self.forwarders:
            forwarder.stop()
        self.forwarders = []
        if os.path.exists(self.path):
            _ip("netns", "delete", self.name)


def _ip(*args):
    proc = subprocess.run(["ip", *args], capture_output=True, text=True,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
    if proc.returncode != 0:
        raise NetNamespaceError(f"ip {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def leftover(name):
    """Delete the namespace a killed run left (clean-up; no forwarders survive a process)."""
    if os.path.exists(f"/run/netns/{name}"):
        _ip("netns", "delete", name)
        return True
    return False
