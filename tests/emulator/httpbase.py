"""The HTTP plumbing shared by every listener: request/response values and the server class.

Stdlib http.server only. TLS is negotiated in the per-connection thread (not in accept()),
so one stalled client cannot block the others. HTTP/1.1 keep-alive, always with
Content-Length, because the SDKs pool connections.
"""

import json
import socket
import ssl
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.emulator import clock

# Returned by a handler to close the connection without answering (the "drop" fault).
DROP = object()


def normalize_path(path):
    """Collapse repeated slashes and drop a trailing one: the SDKs produce both
    (e.g. `Microsoft.ContainerService//managedClusters` from azure-mgmt-authorization's
    permissions.list_for_resource with an empty parentResourcePath)."""
    parts = [p for p in path.split("/") if p]
    return "/" + "/".join(parts)


class Request:
    def __init__(self, method, target, headers, body, peer_subject=None, peer_validity=None, peer_issuer=None):
        split = urllib.parse.urlsplit(target)
        self.method = method.upper()
        self.target = target
        self.path = normalize_path(split.path)
        self.segments = [urllib.parse.unquote(p) for p in self.path.split("/") if p]
        self.lower = [s.lower() for s in self.segments]
        self.query_string = split.query
        # Parse, never match as a string: the SDKs order parameters differently (azure-mgmt-authorization's
        # role-assignment list_for_scope sends $filter first, list_for_subscription api-version first).
        self.query = {}
        for key, value in urllib.parse.parse_qsl(split.query, keep_blank_values=True):
            self.query.setdefault(key.lower(), value)
        self.headers = headers
        self.body = body
        self.peer_subject = peer_subject or {}
        # The client certificate's (notBefore, notAfter), seconds since the epoch, or None:
        # judged by kubeauth on the emulator's clock (the handshake does not check dates).
        self.peer_validity = peer_validity
        # The client certificate's issuer (its RDNs, as peer_subject): which CA signed it.
        self.peer_issuer = peer_issuer or {}
        self.kind = None  # set by the router: arm, entra, artifacts, admin, himds, apiserver

    def q(self, name, default=None):
        return self.query.get(name.lower(), default)

    def header(self, name, default=None):
        return self.headers.get(name, default)

    def json(self, required=True):
        """The body as JSON; a 400 naming the problem when it is not."""
        if not self.body:
            if required:
                raise HttpError(Response.json(400, {"error": {"code": "InvalidRequestContent",
                                                              "message": "The request content was empty; expected a JSON object."}}))
            return {}
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise HttpError(Response.json(400, {"error": {"code": "InvalidRequestContent",
                                                          "message": f"The request content is not valid JSON: {e}"}}))


class Response:
    def __init__(self, status, body=b"", headers=None, content_type=None):
        self.status = status
        self.body = body if isinstance(body, bytes) else body.encode()
        self.headers = dict(headers or {})
        self.truncate = None  # the "truncate" fault: send only this many bytes of the body
        self.rate = None  # bytes per second the body is sent at (None: at once)
        # Bytes of the link each byte sent costs (the WAN profile's real sizes: wan.charge_factor).
        self.charge = 1.0
        if content_type and self.body:
            self.headers.setdefault("Content-Type", content_type)

    @classmethod
    def json(cls, status, obj, headers=None, content_type="application/json; charset=utf-8"):
        return cls(status, json.dumps(obj).encode(), headers, content_type)

    @classmethod
    def empty(cls, status, headers=None):
        return cls(status, b"", headers)


class HttpError(Exception):
    """Raised anywhere in a handler to answer with `response`."""

    def __init__(self, response):
        super().__init__(response.status)
        self.response = response


class RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "aks-flex-node-emulator/1"
    sys_version = ""
    timeout = 30  # idle keep-alive connections are closed after this

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def date_time_string(self, timestamp=None):
        """The Date header: on the apiserver stand-in, the emulator's clock (clock.py), the
        time the fake kubelet renews its certificate by, as a node whose clock is in sync
        with its cluster's would. The other listeners keep this machine's time."""
        if timestamp is None and self.server.kind == "apiserver":
            timestamp = clock.now()
        return super().date_time_string(timestamp)

    def _dispatch(self):
        peer, validity, issuer = {}, None, {}
        if isinstance(self.connection, ssl.SSLSocket):
            cert = self.connection.getpeercert()
            if cert:
                for rdn in cert.get("subject", ()):
                    for key, value in rdn:
                        peer.setdefault(key, []).append(value)
                for rdn in cert.get("issuer", ()):
                    for key, value in rdn:
                        issuer.setdefault(key, []).append(value)
                validity = (ssl.cert_time_to_seconds(cert["notBefore"]),
                            ssl.cert_time_to_seconds(cert["notAfter"]))
        request = Request(self.command, self.path, self.headers, self._read_body(), peer, validity, issuer)
        response = self.server.app.handle(self.server, request)
        try:
            self._answer(response)
        finally:
            # The request log's end of this request: its last byte written (or the drop).
            self.server.app.finished(request)

    def _answer(self, response):
        if response is DROP:
            self.close_connection = True
            return
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, str(value))
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            if response.truncate is not None:
                # A transfer cut short: the whole length announced, part of the body sent,
                # then the connection closed (a proxy or mirror dying mid-download).
                self._write_body(response.body[:response.truncate], response.rate, response.charge)
                self.wfile.flush()
                self.close_connection = True
                return
            self._write_body(response.body, response.rate, response.charge)
            self.wfile.flush()

    PACE_CHUNK = 64 * 1024

    def _write_body(self, body, rate, charge=1.0):
        """Send `body`, at most `rate` bytes per second when given (paced per 64 KiB) on the
        emulator's one link (wan.Link: bodies sent at once share the rate), each byte
        costing `charge` bytes of it (a stand-in artifact sent in the time its real size takes)."""
        if not rate:
            self.wfile.write(body)
            return
        view = memoryview(body)
        for offset in range(0, len(body), self.PACE_CHUNK):
            chunk = view[offset:offset + self.PACE_CHUNK]
            # No byte leaves before its time on the link: the last one when all are through.
            early = self.server.app.link.reserve(len(chunk) * charge, rate) - time.monotonic()
            if early > 0:
                time.sleep(early)
            self.wfile.write(chunk)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _dispatch

    def log_message(self, fmt, *args):
        self.server.app.log(f"{self.server.kind} {self.client_address[0]} {fmt % args}")


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, port, app, kind, ssl_context=None, cluster_id=None):
        self.app = app
        self.kind = kind
        self.ssl_context = ssl_context
        self.cluster_id = cluster_id
        super().__init__(("127.0.0.1", port), RequestHandler)

    @property
    def port(self):
        return self.server_address[1]

    @property
    def url(self):
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def finish_request(self, request, client_address):
        # An answer goes out in two writes (the headers at end_headers, then the body): with
        # Nagle's algorithm on, the second waits for the ACK of the first, which the client's
        # delayed ACK holds back up to 40 ms (RFC 1122 §4.2.3.2, §4.2.3.4). A production
        # server does not add that stall to every answer (Go's net package, for one, turns
        # Nagle off on every TCP connection: "The default is true (no delay)", pkg.go.dev
        # net.TCPConn.SetNoDelay), and a stand-in must not either: 40 ms per answer made a
        # converged bootstrap 0.2 s slower here than the code it measures.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is None:
            return super().finish_request(request, client_address)
        try:
            request.settimeout(10)
            # A callable gives the context as it is now (an apiserver's after a certificate
            # rotation: cluster_pki.py).
            context = self.ssl_context() if callable(self.ssl_context) else self.ssl_context
            tls = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.app.log(f"{self.kind} TLS handshake with {client_address[0]} failed: {e}")
            return
        try:
            tls.settimeout(None)
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            tls.close()

    def handle_error(self, request, client_address):
        # A client going away mid-request is normal (drop faults, killed kubelets): log, don't print.
        self.app.log(f"{self.kind} error serving {client_address}: {traceback.format_exc(limit=3)}")
