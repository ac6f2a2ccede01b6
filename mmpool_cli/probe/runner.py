"""Run the probe's stages: NVML read, pool allocation, CUDA IPC round trips, CUDA VMM facts.

This process reads the GPUs through NVML only; every CUDA context lives in a child process
forked from a server that has imported torch once, so the children start in milliseconds and
torch's import is paid a single time. Children are always reaped: a crash, an out-of-memory,
a timeout or a wrong byte is a finding, never a traceback or a leaked allocation.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from multiprocessing import forkserver
from typing import Any

from mmpool_cli.core.models import Plan, PlanRequest, Severity
from mmpool_cli.core.plan import make_plan
from mmpool_cli.core.units import format_size
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe.report import GpuInfo, ProbeReport, Stage
from mmpool_cli.sglang import rules as sg
from mmpool_cli.sglang.pidfd import FIXES, check_pidfd_getfd

MiB = sg.MiB
IPC_SLICE_BYTES = 8 * MiB
COPY_MIN, COPY_MAX = 64 * MiB, 1024 * MiB
BASELINE_TOLERANCE = 2 * MiB
BASELINE_WAIT_S = 10.0
VERIFY_GOAL = 0.70

Event = Callable[[str], None]


@dataclass(frozen=True)
class ProbeRequest:
    """What to probe: the pool inputs (as for ``mmpool plan``) and how to run."""

    plan: PlanRequest
    cuda_visible_devices: str | None = None
    alloc_conf: str | None = None
    mem_fraction_static: Fraction | None = None
    ipc: bool = True
    allocate_anyway: bool = False
    timeout: float = 120.0
    hooks: dict[str, Callable[[list[int]], None]] = field(default_factory=dict)


class ChildFailed(Exception):
    """A child process answered with an error, died, or did not answer in time."""

    def __init__(self, child: Child, message: str, kind: str) -> None:
        super().__init__(f"{child.name}: {message}")
        self.kind = kind

    @property
    def code(self) -> str:
        """The finding code for this failure."""
        return {"oom": "alloc-oom", "timeout": "child-timeout", "died": "child-died"}.get(self.kind, "child-error")


class Child:
    """One probe child process with its pipe and log file."""

    def __init__(self, ctx: Any, name: str, device: int, alloc_conf: str | None, logdir: str) -> None:
        from mmpool_cli.probe.worker import serve

        self.name = name
        self.log_path = os.path.join(logdir, f"{name}.log")
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child_conn, device, alloc_conf, self.log_path), daemon=True)
        self.process.start()
        child_conn.close()
        self.pid: int | None = self.process.pid

    def send(self, op: str, **args: Any) -> None:
        try:
            self.conn.send({"op": op, **args})
        except (BrokenPipeError, OSError) as e:
            raise self._died(f"cannot send '{op}': {e}") from None

    def receive(self, timeout: float) -> dict[str, Any]:
        try:
            if not self.conn.poll(timeout):
                raise ChildFailed(self, f"no answer within {timeout:g} s", "timeout")
            reply = self.conn.recv()
        except (EOFError, OSError):
            raise self._died("stopped answering") from None
        if "error" in reply:
            raise ChildFailed(self, reply["error"], reply.get("kind", "error"))
        return reply

    def ask(self, op: str, timeout: float, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.receive(timeout)

    def _died(self, what: str) -> ChildFailed:
        self.process.join(1.0)
        code = self.process.exitcode
        how = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
        return ChildFailed(self, f"{what} ({how}){self.log_tail()}", "died")

    def log_tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f.read().splitlines() if line.strip()]
        except OSError:
            return ""
        return f"; its last log line: {lines[-1]}" if lines else ""

    def ask_exit(self) -> None:
        """Ask the child to exit (it tears its CUDA context down on the way out)."""
        if self.process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send({"op": "exit"})

    def reap(self, deadline: float) -> None:
        """Wait for the child until ``deadline``, then kill it; always reaped."""
        self.process.join(max(0.0, deadline - time.monotonic()))
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()


@cache
def start_fork_server() -> None:
    """Start the fork server that preloads torch, without waiting for it (once per process)."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "mmpool_cli.probe.worker"])
    threading.Thread(target=forkserver.ensure_running, daemon=True).start()


class Children:
    """Every child of a probe run, stopped together however the run ends."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.ctx = multiprocessing.get_context("forkserver")
        start_fork_server()
        self.logdir = tempfile.mkdtemp(prefix="mmpool-probe-")
        self.all: list[Child] = []

    def start(self, names: list[str], device: int, alloc_conf: str | None) -> list[Child]:
        started = [Child(self.ctx, n, device, alloc_conf, self.logdir) for n in names]
        self.all.extend(started)
        for child in started:
            child.receive(self.timeout)  # the hello: torch imported
        return started

    def ask_all(self, children: list[Child], op: str, **args: Any) -> list[dict[str, Any]]:
        """Send one request to every child, then collect the replies (the children work in parallel)."""
        for child in children:
            child.send(op, **args)
        return [child.receive(self.timeout) for child in children]

    def stop(self, children: list[Child] | None = None) -> None:
        """Stop children together: all are asked to exit first, so their teardowns overlap."""
        chosen = [c for c in (children if children is not None else self.all) if not c.conn.closed]
        for child in chosen:
            child.ask_exit()
        deadline = time.monotonic() + 10.0
        for child in chosen:
            child.reap(deadline)

    def close(self) -> None:
        self.stop()
        for name in os.listdir(self.logdir):
            os.unlink(os.path.join(self.logdir, name))
        os.rmdir(self.logdir)


def run_probe(request: ProbeRequest, on_event: Event | None = None) -> ProbeReport:
    """Run every stage and return the report. Raises ``ProbeUnavailable`` when it cannot run here."""
    note = on_event or (lambda _message: None)
    started = time.perf_counter()
    plan = make_plan(request.plan)
    if importlib.util.find_spec("torch") is None:
        raise dv.ProbeUnavailable(f"torch is not installed: {dv.INSTALL_HINT}")
    start_fork_server()  # it imports torch (the probe's longest wait) while NVML is read
    note("reading the GPUs through NVML")
    nvml = dv.read_nvml()
    order = dv.visible_order(request.cuda_visible_devices, nvml)
    gpus = dv.gpu_infos(nvml, order)
    base = next((g for g in gpus if g.cuda_index == request.plan.base_gpu_id), None)
    stages = [
        Stage("gpu", "Read the GPUs (NVML, no CUDA context)"),
        Stage("allocate", "Allocate the pools as SGLang does"),
        Stage("ipc", "Round trip through CUDA IPC"),
        Stage("vmm", "CUDA VMM on the base GPU"),
        Stage("release", "Release everything; free memory back at the baseline"),
    ]
    gpu, allocate, ipc, vmm, release = stages
    _stage_gpu(gpu, request, plan, gpus, base)
    skip = None
    if base is None or plan.status != "ok" or plan.allocation_bytes_per_worker is None:
        skip = "the plan has errors or the base GPU is missing"
    elif gpu.status != "pass" and not request.allocate_anyway:
        skip = "the pools do not fit in free memory (--allocate-anyway tries regardless)"
    if skip is not None:
        for stage in stages[1:]:
            stage.figures["skipped"] = skip
    else:
        assert base is not None
        if not request.ipc:
            ipc.figures["skipped"] = "--no-ipc"
        elif plan.transport != "cuda_ipc":
            ipc.figures["skipped"] = "the plan's transport is cuda_vmm, which shares through POSIX file descriptors"
        _GpuRun(request, plan, base, note).run(allocate, ipc if "skipped" not in ipc.figures else None, vmm, release)
    return ProbeReport(plan=plan, gpus=gpus, base_gpu=base, stages=stages, seconds=time.perf_counter() - started)


class _GpuRun:
    """The stages that need CUDA contexts, overlapped where measurements allow.

    The pool workers create their contexts alone, as SGLang's tokenizer processes would, so the
    context figure is theirs; the IPC processes create theirs after the pool measurements, while
    the pools are being verified.
    """

    def __init__(self, request: ProbeRequest, plan: Plan, base: GpuInfo, note: Event) -> None:
        assert plan.hbm is not None
        assert plan.allocation_bytes_per_worker is not None
        self.request, self.plan, self.base, self.note = request, plan, base, note
        self.hbm = plan.hbm
        self.nbytes = plan.allocation_bytes_per_worker
        self.device = base.cuda_index or 0
        self.children = Children(request.timeout)
        self.ipc_started = time.perf_counter()

    def free(self) -> int:
        return dv.free_bytes(self.base.nvml_index)

    def run(self, allocate: Stage, ipc: Stage | None, vmm: Stage, release: Stage) -> None:
        release.status = "pass"
        baseline = self.free()
        release.figures["free_before_bytes"] = baseline
        pool: list[Child] = []
        pairs: dict[str, list[Child]] = {}
        try:
            self.note("starting the probe processes (torch is imported once)")
            pool = self._allocate(allocate, vmm, ipc, pairs)
            if ipc is not None and ipc.status != "fail" and pairs:
                self._ipc(ipc, pairs)
        finally:
            self.note("stopping the probe processes")
            start = time.perf_counter()
            # consumers let go of the shared pools before their producers exit
            self.children.stop([pair[1] for pair in pairs.values()])
            self.children.stop(pool + [pair[0] for pair in pairs.values()])
            self.children.close()
            _baseline(release, self.base, baseline)
            release.seconds = time.perf_counter() - start

    def _allocate(self, stage: Stage, vmm: Stage, ipc: Stage | None, pairs: dict[str, list[Child]]) -> list[Child]:
        stage.status = "pass"
        steps: dict[str, float] = {}
        stage.figures["step_seconds"] = steps
        started = mark = time.perf_counter()

        def step(name: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            steps[name] = round(now - mark, 3)
            mark = now

        children, hbm, nbytes, workers = self.children, self.hbm, self.nbytes, self.plan.workers
        pool: list[Child] = []
        try:
            before = self.free()
            pool = children.start([f"worker{i}" for i in range(workers)], self.device, self.request.alloc_conf)
            step("start")
            self.note(f"creating {workers} CUDA context(s) on GPU {self.device}")
            inits = children.ask_all(pool, "init")
            step("contexts")
            after_contexts = self.free()
            context = (before - after_contexts) // workers
            stage.figures.update(
                context_bytes_per_process=context,
                context_bytes_predicted=hbm.context_bytes_per_process,
                torch_cuda=inits[0].get("cuda"),
            )
            if any(i["uuid"] != self.base.uuid for i in inits):
                stage.add(
                    Severity.error,
                    "device-mapping",
                    f"CUDA's device {self.device} is {inits[0]['uuid']}, but NVML maps it to {self.base.uuid}: set "
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID so that --base-gpu-id means the same GPU to every tool",
                )
            _compare(stage, "context", context, hbm.context_bytes_per_process, "per tokenizer process")
            self.note(f"allocating {workers} × {format_size(nbytes)}")
            allocs = children.ask_all(pool, "alloc", nbytes=nbytes)
            _hook(self.request, "after_alloc", pool)
            step("allocate")
            reserved = [a["reserved"] for a in allocs]
            stage.figures.update(
                pool_bytes=nbytes,
                reserved_bytes_per_worker=reserved,
                reserved_bytes_predicted=hbm.pool_reserved_bytes_per_worker,
                pools_nvml_bytes=after_contexts - self.free(),
                alloc_seconds=max(a["seconds"] for a in allocs),
            )
            for r in sorted(set(reserved)):
                _compare(stage, "allocator", r, hbm.pool_reserved_bytes_per_worker, "per pool")
            if ipc is not None:
                self._start_ipc(ipc, pairs)
            self.note("writing and verifying every pool")
            verifies = children.ask_all(pool, "fill_verify")
            for child, result in zip(pool, verifies, strict=True):
                if not result["ok"]:
                    stage.add(
                        Severity.error,
                        "verify-mismatch",
                        f"{child.name}: {result['bad_blocks']} block(s) of its pool read back wrong: the GPU "
                        "memory or the allocation is faulty; do not launch on this GPU",
                    )
            step("verify")
            self._bandwidth(stage, pool[0])
            step("bandwidth")
            children.ask_all(pool, "release")
            _stage_vmm(vmm, pool[0].ask("vmm", children.timeout, nbytes=nbytes), self.plan)
            step("vmm")
        except ChildFailed as e:
            stage.add(Severity.error, e.code, f"{e}; the probe stopped its processes")
            if ipc is not None and pairs:
                ipc.figures["skipped"] = "the allocation stage failed"
                pairs.clear()
        finally:
            stage.seconds = time.perf_counter() - started
        return pool

    def _bandwidth(self, stage: Stage, child: Child) -> None:
        timeout = self.children.timeout
        verify = child.ask("verify_bandwidth", timeout)
        copy = child.ask("copy_bandwidth", timeout, nbytes=min(max(self.nbytes, COPY_MIN), COPY_MAX))
        ratio = verify["gbps"] / copy["gbps"]
        stage.figures.update(
            verify_seconds=verify["seconds"],
            verify_gbps=round(verify["gbps"], 1),
            copy_gbps=round(copy["gbps"], 1),
            verify_to_copy=round(ratio, 3),
        )
        stage.add(
            Severity.info if ratio >= VERIFY_GOAL else Severity.warning,
            "verify-bandwidth",
            f"verification read {verify['gbps']:,.0f} GB/s, {ratio:.0%} of this GPU's device-to-device copy "
            f"({copy['gbps']:,.0f} GB/s, read plus write)",
        )

    def _start_ipc(self, stage: Stage, pairs: dict[str, list[Child]]) -> None:
        """Fork the IPC processes and let them create their contexts while the pools are verified."""
        self.ipc_started = time.perf_counter()
        modes = {"default": None, "expandable_segments": "expandable_segments:True"}
        try:
            for mode, conf in modes.items():
                pairs[mode] = self.children.start([f"producer-{mode}", f"consumer-{mode}"], self.device, conf)
            for pair in pairs.values():
                for child in pair:
                    child.send("init")
        except ChildFailed as e:
            stage.add(Severity.error, e.code, f"{e}; the probe stopped its processes")

    def _ipc(self, stage: Stage, pairs: dict[str, list[Child]]) -> None:
        assert self.plan.header_bytes is not None
        stage.status = "pass"
        timeout = self.children.timeout
        offset = max(self.plan.header_bytes, 4)
        length = min(IPC_SLICE_BYTES, self.nbytes - offset)
        self.note("CUDA IPC round trips: default allocator and expandable segments")
        try:
            everyone = [c for pair in pairs.values() for c in pair]
            for child in everyone:
                child.receive(timeout)  # the init sent by _start_ipc
            self.children.ask_all([pair[0] for pair in pairs.values()], "alloc", nbytes=self.nbytes)
            for i, (mode, (producer, consumer)) in enumerate(pairs.items()):
                _round_trip(stage, mode, producer, consumer, offset, length, 7000 + i, timeout)
        except ChildFailed as e:
            stage.add(Severity.error, e.code, f"{e}; the probe stopped its processes")
        finally:
            stage.seconds = time.perf_counter() - self.ipc_started


def _stage_gpu(stage: Stage, request: ProbeRequest, plan: Plan, gpus: list[GpuInfo], base: GpuInfo | None) -> None:
    start = time.perf_counter()
    stage.status = "pass"
    stage.figures["cuda_visible_devices"] = request.cuda_visible_devices
    if base is None:
        visible = sum(g.cuda_index is not None for g in gpus)
        stage.add(
            Severity.error,
            "base-gpu-missing",
            f"--base-gpu-id {request.plan.base_gpu_id} names no GPU: {visible} visible "
            f"(CUDA_VISIBLE_DEVICES={request.cuda_visible_devices!r}); pick 0 to {max(visible - 1, 0)}",
        )
        stage.seconds = time.perf_counter() - start
        return
    stage.figures.update(base_gpu=base.cuda_index, free_bytes=base.free_bytes, total_bytes=base.total_bytes)
    if plan.hbm is None:
        stage.add(Severity.error, "plan-failed", "the plan has errors; fix them first (see the plan's findings)")
        stage.seconds = time.perf_counter() - start
        return
    need = plan.hbm.total_bytes
    stage.figures.update(predicted_bytes=need, headroom_bytes=base.free_bytes - need)
    if need > base.free_bytes:
        stage.add(
            Severity.error,
            "does-not-fit",
            f"the pools and tokenizer contexts need {format_size(need)} on GPU {base.cuda_index} but "
            f"{format_size(base.free_bytes)} is free; free memory there or lower the budget or the workers",
        )
    else:
        stage.add(
            Severity.info,
            "fits",
            f"{format_size(need)} predicted of {format_size(base.free_bytes)} free on GPU {base.cuda_index} "
            f"({base.name})",
        )
    if request.mem_fraction_static is not None:
        _kv_headroom(stage, request.mem_fraction_static, plan, base)
    stage.seconds = time.perf_counter() - start


def _kv_headroom(stage: Stage, fraction: Fraction, plan: Plan, base: GpuInfo) -> None:
    assert plan.hbm is not None
    # SGLang sizes its static pool (weights + KV) to mem_fraction_static of the memory it sees, and
    # takes the budget itself out of the KV cache; the contexts and allocator rounding on the base
    # GPU are not in that reservation, so they come out of the (1 - fraction) headroom.
    headroom = base.free_bytes - base.free_bytes * fraction.numerator // fraction.denominator
    unreserved = plan.hbm.context_bytes + plan.hbm.allocator_overhead_bytes
    stage.figures.update(kv_headroom_bytes=headroom, unreserved_bytes=unreserved)
    share = Fraction(unreserved, headroom) if headroom else Fraction(1)
    largest = 1 - Fraction(2 * unreserved, base.free_bytes)
    hint = f"--mem-fraction-static {float(largest) - 0.005:.2f} or lower, or fewer tokenizer workers"
    text = (
        f"the tokenizer contexts and allocator rounding ({format_size(unreserved)}) are not in SGLang's "
        f"reservation and take {float(share):.0%} of the {format_size(headroom)} that "
        f"--mem-fraction-static {float(fraction):g} leaves on GPU {base.cuda_index}"
    )
    if share >= 1:
        stage.add(Severity.error, "kv-headroom-exceeded", f"{text}: activations will run out of memory; use {hint}")
    elif share >= Fraction(1, 2):
        stage.add(Severity.warning, "kv-headroom-tight", f"{text}; consider {hint}")
    else:
        stage.add(Severity.info, "kv-headroom", text)


def _stage_vmm(stage: Stage, facts: dict[str, Any], plan: Plan) -> None:
    if not facts.get("available"):
        stage.figures["skipped"] = "cuda-bindings is not installed (pip install cuda-bindings)"
        if plan.transport == "cuda_vmm":
            stage.add(
                Severity.warning,
                "vmm-unchecked",
                "cuda_vmm is planned but cuda-bindings is missing, and SGLang needs it too: pip install cuda-bindings",
            )
        return
    stage.status = "pass"
    stage.figures["handle_types"] = facts["handle_types"]
    working = [name for name, e in facts["handle_types"].items() if e.get("create")]
    stage.figures["working_handle_types"] = working
    posix = facts["handle_types"].get("POSIX_FD", {})
    granularity = posix.get("recommended")
    if plan.transport == "cuda_vmm":
        if "FABRIC" not in working and "POSIX_FD" not in working:
            stage.add(Severity.error, "vmm-no-handle", "cuMemCreate accepts neither FABRIC nor POSIX_FD handles here")
        if granularity and granularity != plan.vmm_granularity_bytes:
            stage.add(
                Severity.warning,
                "vmm-granularity-differs",
                f"the GPU's recommended VMM granularity is {format_size(granularity)}, the plan assumed "
                f"{format_size(plan.vmm_granularity_bytes or 0)}: re-plan with --vmm-granularity {granularity}",
            )
    stage.add(
        Severity.info,
        "vmm-facts",
        f"VMM granularity {format_size(granularity or 0)} (POSIX_FD, recommended); cuMemCreate works with "
        f"{', '.join(working) or 'no handle type'}"
        + ("" if "FABRIC" in working else " (FABRIC needs an IMEX channel: multi-node cuda_vmm cannot work here)"),
    )


def _round_trip(
    stage: Stage, mode: str, producer: Child, consumer: Child, offset: int, length: int, seed: int, timeout: float
) -> None:
    figures: dict[str, Any] = {"slice_bytes": length}
    stage.figures[mode] = figures
    producer.ask("write_slice", timeout, offset=offset, nbytes=length, seed=seed)
    payload = producer.ask("share", timeout)["payload"]
    try:
        opened = consumer.ask("open_shared", timeout, payload=payload)
    except ChildFailed as e:
        figures["opened"] = False
        _ipc_refused(stage, mode, str(e))
        return
    figures.update(opened=True, open_seconds=opened["seconds"])
    read = consumer.ask("read_slice", timeout, offset=offset, nbytes=length, seed=seed)
    figures.update(read_ok=read["ok"], read_gbps=read["gbps"] and round(read["gbps"], 1))
    if not read["ok"]:
        stage.add(
            Severity.error, "ipc-data-mismatch", f"{mode}: the consumer read different bytes than the producer wrote"
        )
        return
    ack = producer.ask("wait_ack", timeout, value=seed, wait_seconds=min(timeout, 10.0))
    figures.update(ack_seen=ack["seen"], ack_seconds=ack["seconds"])
    if not ack["seen"]:
        stage.add(Severity.error, "ipc-ack-missing", f"{mode}: the producer never saw the consumer's acknowledgement")
        return
    consumer.ask("release", timeout)
    stage.add(Severity.info, "ipc-ok", f"{mode}: shared, read back exactly and acknowledged")


def _ipc_refused(stage: Stage, mode: str, error: str) -> None:
    if mode == "expandable_segments":
        check = check_pidfd_getfd()
        stage.figures["pidfd_getfd"] = {"allowed": check.allowed, "detail": check.detail}
        if check.allowed is False or "pidfd" in error or "Operation not permitted" in error:
            stage.add(
                Severity.error,
                "ipc-pidfd-refused",
                f"with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the consumer cannot open the pool "
                f"({check.detail}; {error}): {FIXES}",
            )
            return
    stage.add(Severity.error, "ipc-open-failed", f"{mode}: the consumer could not open the shared pool: {error}")


def _compare(stage: Stage, what: str, measured: int, predicted: int, unit: str) -> None:
    if measured == predicted:
        stage.add(Severity.info, f"{what}-as-predicted", f"{what}: {format_size(measured)} {unit}, as predicted")
        return
    stage.add(
        Severity.warning if what == "allocator" else Severity.info,
        f"{what}-differs",
        f"{what}: measured {format_size(measured)} {unit}, predicted {format_size(predicted)} "
        f"({measured - predicted:+,} bytes)",
    )


def _baseline(stage: Stage, base: GpuInfo, baseline: int) -> None:
    deadline = time.perf_counter() + BASELINE_WAIT_S
    free = dv.free_bytes(base.nvml_index)
    while abs(baseline - free) > BASELINE_TOLERANCE and time.perf_counter() < deadline:
        time.sleep(0.05)
        free = dv.free_bytes(base.nvml_index)
    stage.figures["free_after_bytes"] = free
    if abs(baseline - free) > BASELINE_TOLERANCE:
        stage.add(
            Severity.error,
            "memory-not-released",
            f"free memory on GPU {base.cuda_index} is {format_size(free)} after the stage, "
            f"{format_size(baseline)} before: {baseline - free:+,} bytes still held",
        )


def _hook(request: ProbeRequest, name: str, children: list[Child]) -> None:
    if name in request.hooks:
        request.hooks[name]([c.pid for c in children if c.pid is not None])
