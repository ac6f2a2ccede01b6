"""The port of ``mmpool record --metrics-port``: every process's pools, served by the first to bind it.

Standard library and ``prometheus_client`` only, as ``metrics``. Each process writes its series into
``<out_dir>/metrics.d`` (prometheus_client's multiprocess format); the process that binds the port
(the one ``mmpool record`` exec'd into: it starts first) serves them from a daemon thread, with the
``mmpool_`` series of ``PROMETHEUS_MULTIPROC_DIR`` when the server has one. The others find the port
taken by a live process of the recording (``server.pid``) and say nothing; a port taken by another
program is said once. A dead process's gauges are dropped at the next scrape, its counters stay.
"""

from __future__ import annotations

import glob
import importlib
import os
import socketserver
import threading
from typing import Any

from mmpool_record.metrics import PREFIX, _import_client, _mp_dir, _say

SERVER_PID_FILE = "server.pid"
_TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    return True


def served_by_another(directory: str) -> bool:
    """Whether a live process of this recording already serves the port (a worker sees its parent's)."""
    try:
        with open(os.path.join(directory, SERVER_PID_FILE)) as file:
            pid = int(file.read().strip())
    except (OSError, ValueError):
        return False
    return pid != os.getpid() and _alive(pid)


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


def serve(port: int, directory: str) -> Any:
    """Serve ``directory``'s metrics on ``port`` from a daemon thread; None when the port is taken."""
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
        def server_bind(self) -> None:
            socketserver.TCPServer.server_bind(self)  # not HTTPServer's: its getfqdn may wait on DNS
            self.server_name, self.server_port = "", port

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client's broken connection is no concern of the server's

    try:
        server = Server(("", port), Handler)
    except OSError as error:
        if not served_by_another(directory):
            _say(f"port {port} cannot be served ({error.strerror}): the metrics are not served on it")
        return None
    pid_file = os.path.join(directory, SERVER_PID_FILE)
    with open(f"{pid_file}.{os.getpid()}", "w") as file:
        file.write(f"{os.getpid()}\n")
    os.replace(f"{pid_file}.{os.getpid()}", pid_file)
    threading.Thread(target=server.serve_forever, name="mmpool-record-metrics", daemon=True).start()
    os.register_at_fork(after_in_child=server.socket.close)  # a forked worker does not hold the port
    return server
