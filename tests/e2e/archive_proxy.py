"""An HTTP proxy on the host's loopback through which a node reaches Debian's archive, and
nothing else: the release-upgrade scenario (tests/e2e/test_release_upgrade.py) switches a
bookworm node's sources to trixie and runs `apt full-upgrade` through it.

    proxy = ArchiveProxy(["http://deb.debian.org/debian", ...])
    # in the node (its network namespace forwards proxy.port in):
    #   Acquire::http::Proxy "http://127.0.0.1:<proxy.port>";
    proxy.stop()

Why a proxy: every node has a network namespace of its own whose only way out is the
loopback ports forwarded in (tests/e2e/netns.py), so the emulator's endpoints stay the only
"internet" the other scenarios see. apt speaks plain HTTP to a proxy (apt.conf(5),
Acquire::http::Proxy) and the archive's integrity comes from its signed Release files, not
from the transport, so a forwarding proxy that relays GETs to the mirrors' hosts is all a
node needs. A request for any other host, or any other method, is refused with 403 and
recorded in `refused`.
"""

import http.client
import http.server
import threading
import urllib.parse

# Hop-by-hop headers (RFC 9110, section 7.6.1): not relayed either way.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade"}
CHUNK = 1 << 16
TIMEOUT = 120


class ArchiveProxy:
    """A running proxy: `port` on 127.0.0.1, `requests` (URLs relayed), `refused`."""

    def __init__(self, mirrors):
        self.hosts = {urllib.parse.urlsplit(url).netloc for url in mirrors}
        self.requests, self.refused = [], []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                proxy.relay(self)

            def do_HEAD(self):  # noqa: N802
                proxy.relay(self)

            def do_CONNECT(self):  # noqa: N802
                proxy.refuse(self, "CONNECT is not relayed: the archive is reached over http://")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="e2e-archive-proxy", daemon=True)
        self.thread.start()

    def refuse(self, handler, why):
        with self._lock:
            self.refused.append(f"{handler.command} {handler.path}")
        body = (why + "\n").encode()
        handler.send_response(403)
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()
        handler.wfile.write(body)

    def relay(self, handler):
        url = urllib.parse.urlsplit(handler.path)
        if url.scheme != "http" or url.netloc not in self.hosts:
            return self.refuse(handler, f"{handler.path}: only {', '.join(sorted(self.hosts))} are relayed")
        with self._lock:
            self.requests.append(handler.path)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(url.netloc, timeout=TIMEOUT)
        answered = False
        try:
            upstream.request(handler.command, urllib.parse.urlunsplit(("", "", url.path or "/", url.query, "")),
                             headers=headers)
            response = upstream.getresponse()
            handler.send_response(response.status, response.reason)
            length = response.getheader("Content-Length")
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    handler.send_header(key, value)
            if length is None and handler.command != "HEAD" and response.status not in (204, 304):
                # A body of unknown length (chunked upstream): it ends when the connection does.
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            answered = True
            if handler.command != "HEAD":
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    handler.wfile.write(chunk)
        except OSError as err:
            # The node's apt reports it (a body cut short fails its hash check); the test
            # fails on apt's exit status.
            handler.close_connection = True
            if not answered:
                try:
                    body = f"upstream {url.netloc}: {err}\n".encode()
                    handler.send_response(502)
                    handler.send_header("Content-Length", str(len(body)))
                    handler.end_headers()
                    handler.wfile.write(body)
                except OSError:
                    pass
        finally:
            upstream.close()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
