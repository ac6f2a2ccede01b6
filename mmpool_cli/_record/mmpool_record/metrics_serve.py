"""The port of ``mmpool record --metrics-port``, served by the process beside the command (``follow.py``).

Standard library and ``prometheus_client`` only, as ``metrics``. The series are in ``<out_dir>/metrics.d``
(prometheus_client's multiprocess format), or in the server's ``PROMETHEUS_MULTIPROC_DIR``, whose
``mmpool_`` series are served too. A dead process's gauges are dropped at the next scrape, its
counters stay. The server's own processes never bind it.
"""

from __future__ import annotations

import glob
import importlib
import os
import socket
import socketserver
import threading
from typing import Any

from mmpool_record.metrics import PREFIX, _import_client, _mp_dir, _say

_TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    return True


def exposition(directory: str) -> bytes:
    """Every process's ``mmpool_`` series: the private directory's, and those in the server's own."""
    client = _import_client()
    multiprocess = importlib.import_module("prometheus_client.multiprocess")

    for path in glob.glob(os.path.join(directory, "gauge_live*_*.db")):
        pid = os.path.basename(path)[: -len(".db")].rsplit("_", 1)[1]
        if pid.isdigit() and not _alive(int(pid)):
            multiprocess.mark_process_dead(int(pid), directory)  # its gauges go; its counters stay
    files = glob.glob(os.path.join(directory, "*.db"))
    mp = _mp_dir()
    if mp is not None and os.path.isdir(mp) and os.path.realpath(mp) != os.path.realpath(directory):
        files += glob.glob(os.path.join(mp, "*.db"))
    merged = [m for m in multiprocess.MultiProcessCollector.merge(files) if m.name.startswith(PREFIX)]

    class Merged:
        def collect(self) -> list[Any]:
            return merged

    registry = client.CollectorRegistry()
    registry.register(Merged())
    return bytes(client.generate_latest(registry))


def serve(port: int, directory: str, addr: str = "") -> Any:
    """Serve ``directory``'s metrics on ``addr:port`` (every interface: "") from a daemon thread; None if taken."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # a client that stalls is dropped, never waited for

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/metrics"):
                self.send_error(404)
                return
            try:
                body = exposition(directory)
            except Exception as error:
                _say(f"the metrics could not be read ({type(error).__name__}: {error})")
                self.send_error(500)
                return
            self.send_response(200)
            self.send_header("Content-Type", _TEXT_0_0_4)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # no line on the server's stderr per scrape

    class Server(HTTPServer):
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

        def server_bind(self) -> None:
            socketserver.TCPServer.server_bind(self)  # not HTTPServer's: its getfqdn may wait on DNS
            self.server_name, self.server_port = "", port

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client's broken connection is no concern of the server's

    try:
        server = Server((addr, port), Handler)
    except OSError as error:
        _say(f"port {port} cannot be served ({error.strerror}): the metrics are not served on it")
        return None
    threading.Thread(target=server.serve_forever, name="mmpool-record-metrics", daemon=True).start()
    return server
