"""A loopback HTTP(S) artifact server: bodies by path, each route able to fail a few times
first, answer slowly, hold its answer until the test opens a gate, redirect, cut the body
short or hold it halfway, wait until others are in flight with it, and answer Range requests
guarded by its ETag; every request recorded.
Shared by the downloader's tests (tests/unit/test_host_download.py) and the runner's
(test_runner.py)."""

import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# How long a `together` request waits for the rest of its party: a ceiling for a broken run
# (requests that never overlap), never a measure.
TOGETHER_TIMEOUT = 120


class ArtifactServer:
    """Serves bodies by path; a route can fail a few times first, answer slowly, redirect,
    or cut the body short, and carry an ETag and answer Range requests guarded by it
    (If-Range). Records every request (and whether it came as a proxy request, and the
    Range it asked for)."""

    def __init__(self, tls=None):
        self.routes = {}
        self.requests = []
        self.ranges = []  # (path, the Range header or None) of every request
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.apart = []  # paths whose `together` barrier broke (serve)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxied = self.path.startswith("http://")
                path = urllib.parse.urlsplit(self.path).path if proxied else self.path
                with server.lock:
                    server.requests.append((path, proxied, self.headers.get("User-Agent")))
                    server.ranges.append((path, self.headers.get("Range")))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    route = server.routes.get(path)
                    first = route["before"].pop(0) if route and route["before"] else None
                counted = True
                try:
                    if route is None:
                        return self._send(404, b"not found")
                    time.sleep(route["delay"])
                    if route["gate"] is not None:
                        route["gate"].wait()  # the test opens it (and does, at the latest, in stop)
                    if route["together"] is not None:
                        try:  # answered only once its party is in flight at once
                            route["together"].wait(TOGETHER_TIMEOUT)
                        except threading.BrokenBarrierError:
                            with server.lock:
                                server.apart.append(path)
                            return self._send(500, b"the requests it waited for never came together")
                    # Out of flight before the answer is written: a client that has read it
                    # may start its next request at once, which must not find this one still
                    # counted (seen under load: four in flight with three slots).
                    with server.lock:
                        server.in_flight -= 1
                    counted = False
                    body, tag = route["body"], {"ETag": route["etag"]} if route["etag"] else {}
                    asked = self.headers.get("Range")
                    if route["ranges"] and asked and self.headers.get("If-Range") == route["etag"]:
                        start = int(asked[len("bytes="):].rstrip("-"))
                        rest = body[start:]
                        tag["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
                        if first == "truncate":
                            return self._send(206, rest[:len(rest) // 2], length=len(rest), headers=tag)
                        return self._send(206, rest, headers=tag)
                    if first == "truncate":
                        return self._send(200, body[:len(body) // 2], length=len(body), headers=tag)
                    if isinstance(first, int):
                        return self._send(first, b"failing")
                    if route["redirect"]:
                        return self._send(302, b"", headers={"Location": route["redirect"]})
                    return self._send(route["status"], body, headers=tag, hold=route["hold"])
                finally:
                    if counted:
                        with server.lock:
                            server.in_flight -= 1

            def _send(self, status, body, length=None, headers=None, hold=None):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if length is not None:
                    self.send_header("Connection", "close")
                self.end_headers()
                if hold is not None:  # the first half, then the rest once the test says so
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    hold.wait(10)
                    body = body[len(body) // 2:]
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up waiting (a timeout test): nothing to report
                if length is not None:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.origin = f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def serve(self, path, body=b"", status=200, before=(), delay=0.0, redirect=None, etag=None,
              ranges=False, hold=None, together=None, gate=None):
        """`before`: what the first requests get (an HTTP status, or "truncate"); `delay`:
        seconds before the answer, only to widen a window a wrong client would show in (never
        what a test waits for); `gate`: an Event the answer waits for, headers and all (a
        request held open for as long as the test needs it; stop() opens it); `hold`: an
        Event the whole body's answer waits for after its first half; `together`: a
        threading.Barrier (routes may share one) the request waits at before its answer, so
        that it is answered only once the barrier's parties are all in flight at once. When
        they never are (TOGETHER_TIMEOUT s, a ceiling for a broken run), it answers 500 and
        its path goes to `apart`."""
        self.routes[path] = {"body": body, "status": status, "before": list(before),
                             "delay": delay, "redirect": redirect, "etag": etag, "ranges": ranges,
                             "hold": hold, "together": together, "gate": gate}
        return self.origin + path

    def count(self, path):
        return sum(1 for p, _, _ in self.requests if p == path)

    def stop(self):
        for route in self.routes.values():
            if route["gate"] is not None:
                route["gate"].set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
