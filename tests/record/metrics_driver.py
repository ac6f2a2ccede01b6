"""A process that publishes metrics through mmpool_record.metrics, one JSON command a line on stdin.

The tests run it as a child (``python metrics_driver.py``): it answers every command with one line
(``ok``, ``none`` or ``error: ...``) and exits at end of input. ``own_counter`` makes a counter of the
program's own, as SGLang makes them; ``import_plain`` imports prometheus_client as a program would.
``MMPOOL_METRICS_PYTHON`` runs the drivers in another Python (one with prometheus_client 0.20.0, the
oldest SGLang 0.5.23 accepts, passes the tests in Python 3.10 and 3.13).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

RECORD_DIR = Path(__file__).resolve().parents[2] / "mmpool_cli" / "_record"
# the drivers' Python: the server's may be another than the tests' (another release, another prometheus_client)
PYTHON = os.environ.get("MMPOOL_METRICS_PYTHON") or sys.executable
MIB = 1 << 20


def script(scale: int = 1) -> list[dict[str, Any]]:
    """One pool's life: two hits, a miss, both leases recycled (0.05 s and 0.12 s), then drops and an error."""
    cap = scale * MIB
    return [
        {"op": "pool", "labels": {"pool": str(scale - 1), "transport": "cuda_ipc", "gpu": "0"}, "capacity": cap},
        {"op": "alloc", "nbytes": cap // 4, "hit": True},
        {"op": "alloc", "nbytes": cap // 2, "hit": True},
        {"op": "state", "leased": 3 * cap // 4, "largest": cap // 4, "in_flight": 2},
        {"op": "alloc", "nbytes": 400000 * scale, "hit": False},
        {"op": "release", "nbytes": cap // 4, "lifetime_s": 0.05},
        {"op": "state", "leased": cap // 2, "largest": cap // 4, "in_flight": 1},
        {"op": "release", "nbytes": cap // 2, "lifetime_s": 0.12},
        {"op": "state", "leased": 0, "largest": cap, "in_flight": 0},
        {"op": "dropped", "n": 3 * scale},
        {"op": "error"},
    ]


def expected(scale: int = 1) -> dict[str, float]:
    """The samples ``script(scale)`` leaves, worked out by hand (histogram buckets cumulative)."""
    cap = scale * MIB
    values = {
        "mmpool_pool_capacity_bytes": cap,
        "mmpool_pool_leased_bytes": 0,
        "mmpool_pool_largest_free_range_bytes": cap,
        "mmpool_pool_leases_in_flight": 0,
        "mmpool_pool_allocations_total": 3,
        "mmpool_pool_allocated_bytes_total": cap // 4 + cap // 2 + 400000 * scale,
        "mmpool_pool_misses_total": 1,
        "mmpool_pool_missed_bytes_total": 400000 * scale,
        "mmpool_pool_released_bytes_total": 3 * cap // 4,
        "mmpool_pool_lease_lifetime_seconds_count": 2,
        "mmpool_pool_lease_lifetime_seconds_sum": 0.05 + 0.12,
        "mmpool_record_dropped_events_total": 3 * scale,
        "mmpool_record_hook_errors_total": 1,
    }
    for bound, count in (("0.025", 0), ("0.05", 1), ("0.1", 1), ("0.15", 2), ("10.0", 2), ("+Inf", 2)):
        values[f"mmpool_pool_lease_lifetime_seconds_bucket{{le={bound}}}"] = count
    return values


class Driver:
    """A driver child process; calling it sends one command and returns its answer."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.stderr: str | None = None

    def __call__(self, op: str, **args: Any) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], 30)[0]:
            raise TimeoutError(f"the driver did not answer {op} in 30 s")
        return self.proc.stdout.readline().strip()

    def run(self, commands: list[dict[str, Any]]) -> None:
        for command in commands:
            answer = self(**command)
            assert answer == "ok", (command, answer)

    def close(self) -> str:
        """End the driver (end of input), wait for it, and return its stderr (again on a second call)."""
        if self.stderr is None:
            try:
                self.stderr = self.proc.communicate(timeout=30)[1]
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.communicate()
        return self.stderr


def main() -> None:
    sys.path.insert(0, str(RECORD_DIR))
    from mmpool_record import metrics

    state: dict[str, Any] = {}
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            answer = run(metrics, state, op, command)
        except Exception as error:
            answer = f"error: {type(error).__name__}: {error}"
        print(answer, flush=True)


def run(metrics: Any, state: dict[str, Any], op: str, args: dict[str, Any]) -> str:
    if op == "setenv":
        os.environ[args["name"]] = args["value"]
    elif op == "import_client":
        metrics._import_client()
    elif op == "import_plain":
        import prometheus_client  # noqa: F401  (the program imports it first)
    elif op == "start":
        state["metrics"] = metrics.start(SimpleNamespace(out_dir=args["out_dir"], metrics_port=args.get("port")))
        if args.get("serve"):  # the process beside the command: it serves what every process wrote
            from mmpool_record import metrics_serve

            private = os.path.join(args["out_dir"], metrics.PRIVATE_DIR)
            state["metrics"].server = metrics_serve.serve(args["port"], private, "127.0.0.1")
        return "none" if state["metrics"] is None else "ok"
    elif op == "pool":
        state["pool"] = state["metrics"].pool(args["labels"], args["capacity"])
    elif op == "alloc":
        state["pool"].on_alloc(args["nbytes"], args["hit"])
    elif op == "release":
        state["pool"].on_release(args["nbytes"], args["lifetime_s"])
    elif op == "state":
        state["pool"].on_state(args["leased"], args["largest"], args["in_flight"])
    elif op == "dropped":
        state["metrics"].dropped(args["n"])
    elif op == "error":
        state["metrics"].hook_error()
    elif op == "own_counter":
        import prometheus_client

        prometheus_client.Counter(args["name"], "The program's own.").inc(args["inc"])
    else:
        return f"error: unknown command {op}"
    return "ok"


if __name__ == "__main__":
    main()
