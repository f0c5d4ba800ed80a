"""Local servers for the download tests: HTTP (with byte ranges) and FTP on 127.0.0.1,
each serving a folder made by the test, each stopped when the test ends. No test
reaches the internet."""

import logging
import os
import re
import threading
from contextlib import contextmanager
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class RangeHandler(SimpleHTTPRequestHandler):
    """The standard library's file server, plus ``Range: bytes=N-`` (a resumed download)
    and, for a file named in ``server.cut``, a response that stops halfway through the
    length it announced (a connection dropped mid-download). With ``server.ignore_range``
    it answers every request with the whole file (200), as servers without ranges do."""

    def log_message(self, format, *args):
        self.server.requests.append((self.command, self.path, self.headers.get("Range")))

    def send_head(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start = 0
        match = None if self.server.ignore_range else re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if match:
            start = int(match[1])
            if start >= size:
                self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                return None
        handle = open(path, "rb")
        handle.seek(start)
        self.send_response(HTTPStatus.PARTIAL_CONTENT if match else HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - start))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if os.path.basename(path) in self.server.cut:
            data = handle.read((size - start) // 2)
            handle.close()
            self.wfile.write(data)
            self.close_connection = True
            return None
        return handle


@contextmanager
def http_server(folder):
    """Serve ``folder`` over HTTP on 127.0.0.1; yields the server, with ``url`` (its
    base URL), ``requests`` (method, path, Range header of each request), ``cut``
    (names of files to send only half of) and ``ignore_range`` (False)."""

    def handler(*args, **kwargs):
        return RangeHandler(*args, directory=str(folder), **kwargs)

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    server.requests, server.cut, server.ignore_range = [], set(), False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def ftp_server(folder):
    """Serve ``folder`` read-only to anonymous FTP on 127.0.0.1 (pyftpdlib); yields its
    base URL, ``ftp://127.0.0.1:<port>``."""
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import ThreadedFTPServer

    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    authorizer = DummyAuthorizer()
    authorizer.add_anonymous(str(folder))
    handler = type("Handler", (FTPHandler,), {"authorizer": authorizer, "passive_ports": None})
    server = ThreadedFTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"timeout": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"ftp://127.0.0.1:{server.address[1]}"
    finally:
        server.close_all()
