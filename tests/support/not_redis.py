"""Something that is not Redis on a port: a plain HTTP server, the usual mistake (a Redis URL
pointing at a web service's port). It answers whatever it is sent with an HTTP error page, as
such a service would, so a Redis client reading its reply finds no RESP in it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server(port: int = 0) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 (``port``, or a free one) in a thread; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Quiet)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
