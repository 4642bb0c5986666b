"""Debian's tinyproxy on loopback, as the proxy tests run it: in the foreground with a config
of its own, and what it was asked to CONNECT to read back from its log."""

import os
import re
import shutil
import socket
import subprocess

from tests.waiting import wait_for

TINYPROXY = shutil.which("tinyproxy", path="/usr/sbin:/usr/bin:/sbin:/bin")
CONNECT = re.compile(r"Request \(file descriptor \d+\): CONNECT (\S+) HTTP")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Tinyproxy:
    """tinyproxy listening on 127.0.0.1; `connects()` lists the host:port of every CONNECT it
    was asked for. `only_loopback`: it lets CONNECTs through to 127.0.0.1 alone (a filter
    with FilterDefaultDeny: every other host is answered "403 Filtered"), as a restricted
    network's proxy would. No ConnectPort line: CONNECT to any port (tinyproxy.conf(5)); the
    emulator's ports are ephemeral. LogLevel Connect records each request line."""

    def __init__(self, directory, only_loopback=False):
        self.port = free_port()
        self.log = os.path.join(directory, "tinyproxy.log")
        conf = os.path.join(directory, "tinyproxy.conf")
        lines = [f"Port {self.port}", "Listen 127.0.0.1", "Timeout 120", "MaxClients 100", "Allow 127.0.0.1",
                 f'LogFile "{self.log}"', "LogLevel Connect"]
        if only_loopback:
            allowed = os.path.join(directory, "allowed")
            with open(allowed, "w") as f:
                f.write("^127\\.0\\.0\\.1$\n")
            lines += [f'Filter "{allowed}"', "FilterDefaultDeny Yes", "FilterURLs Off"]
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.process = subprocess.Popen([TINYPROXY, "-d", "-c", conf], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(self._listens, timeout=30):
            self.stop()
            raise AssertionError(f"tinyproxy did not listen on 127.0.0.1:{self.port}")

    def _listens(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def connects(self):
        with open(self.log, errors="replace") as f:
            return [m.group(1) for m in CONNECT.finditer(f.read())]

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
