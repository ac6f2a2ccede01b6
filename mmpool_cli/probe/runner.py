"""Run the probe's stages: NVML read, pool allocation, CUDA IPC round trips, CUDA VMM facts.

This process reads the GPUs through NVML only; every CUDA context lives in a child process
(``mmpool_cli.probe.processes``), and what each measurement means is decided in
``mmpool_cli.probe.stages``. Here the stages are ordered and overlapped. A crash, an
out-of-memory, a timeout or a wrong byte is a finding, never a traceback or a leaked allocation.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import MiB, format_size
from mmpool_cli.engines.sglang.models import Plan, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe import stages as st
from mmpool_cli.probe.probe_report import GpuInfo, ProbeReport, Stage
from mmpool_cli.probe.processes import RELEASE_GRACE_S, Child, ChildFailed, Children, Deadline, server_started_at

IPC_SLICE_BYTES = 8 * MiB
COPY_MIN, COPY_MAX = 64 * MiB, 1024 * MiB
BASELINE_TOLERANCE = st.BASELINE_TOLERANCE
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


def run_probe(request: ProbeRequest, on_event: Event | None = None) -> ProbeReport:
    """Run every stage and return the report. Raises ``ProbeUnavailable`` when it cannot run here."""
    note = on_event or (lambda _message: None)
    started = time.perf_counter()
    deadline = Deadline(request.timeout)
    plan = make_plan(request.plan)
    if importlib.util.find_spec("torch") is None:
        raise dv.ProbeUnavailable(f"torch is not installed: {dv.INSTALL_HINT}")
    server_started_at()  # the fork server imports torch (the probe's longest wait) while NVML is read
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
    st.stage_gpu(gpu, request, plan, gpus, base)
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
        ipc_stage = ipc if "skipped" not in ipc.figures else None
        _GpuRun(request, plan, base, note, deadline).run(allocate, ipc_stage, vmm, release)
    return ProbeReport(plan=plan, gpus=gpus, base_gpu=base, stages=stages, seconds=time.perf_counter() - started)


class _GpuRun:
    """The stages that need CUDA contexts, overlapped where measurements allow.

    The pool workers create their contexts alone, as SGLang's tokenizer processes would, so the
    context figure is theirs; the IPC processes create theirs after the pool measurements, while
    the pools are being verified.
    """

    def __init__(self, request: ProbeRequest, plan: Plan, base: GpuInfo, note: Event, deadline: Deadline) -> None:
        assert plan.hbm is not None
        assert plan.allocation_bytes_per_worker is not None
        self.request, self.plan, self.base, self.note = request, plan, base, note
        self.hbm = plan.hbm
        self.nbytes = plan.allocation_bytes_per_worker
        self.device = base.cuda_index or 0
        self.deadline = deadline
        self.children = Children(deadline)
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
            self.children.stop(_unique(pool + [pair[0] for pair in pairs.values()]))
            self.children.close()
            grace = RELEASE_GRACE_S if self.deadline.expired else self.deadline.left()
            st.baseline(release, self.base, baseline, wait=min(st.BASELINE_WAIT_S, max(grace, RELEASE_GRACE_S)))
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
            hello = pool[0].hello
            if "loaded_at" in hello:  # when the fork server had imported torch, and when its fork ran
                stage.figures["torch_import_seconds"] = round(hello["loaded_at"] - children.server_started_at, 3)
                stage.figures["fork_seconds"] = round(hello["entered_at"] - hello["loaded_at"], 3)
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
            st.compare(stage, "context", context, hbm.context_bytes_per_process, "per tokenizer process")
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
                st.compare(stage, "allocator", r, hbm.pool_reserved_bytes_per_worker, "per pool")
            if ipc is not None:
                self._start_ipc(ipc, pairs, pool[0])
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
            st.stage_vmm(vmm, pool[0].ask("vmm", nbytes=nbytes), self.plan)
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
        verify = child.ask("verify_bandwidth")
        copy = child.ask("copy_bandwidth", nbytes=min(max(self.nbytes, COPY_MIN), COPY_MAX))
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

    def _start_ipc(self, stage: Stage, pairs: dict[str, list[Child]], worker: Child) -> None:
        """Fork the IPC processes and let them create their contexts while the pools are verified.

        The first pool worker produces for the mode its own allocator runs in (the default, unless
        PYTORCH_CUDA_ALLOC_CONF says otherwise): one CUDA context fewer to create.
        """
        self.ipc_started = time.perf_counter()
        modes = {"default": None, "expandable_segments": "expandable_segments:True"}
        own = (self.request.alloc_conf or "").strip() or None
        try:
            for mode, conf in modes.items():
                if conf == own:
                    pairs[mode] = [worker, *self.children.start([f"consumer-{mode}"], self.device, conf)]
                else:
                    pairs[mode] = self.children.start([f"producer-{mode}", f"consumer-{mode}"], self.device, conf)
            for child in self._ipc_children(pairs, worker):
                child.send("init")
        except ChildFailed as e:
            stage.add(Severity.error, e.code, f"{e}; the probe stopped its processes")

    @staticmethod
    def _ipc_children(pairs: dict[str, list[Child]], worker: Child) -> list[Child]:
        """The processes started for the round trips (not the pool worker that produces for one)."""
        return [c for pair in pairs.values() for c in pair if c is not worker]

    def _ipc(self, stage: Stage, pairs: dict[str, list[Child]]) -> None:
        assert self.plan.header_bytes is not None
        stage.status = "pass"
        offset = max(self.plan.header_bytes, 4)
        length = min(IPC_SLICE_BYTES, self.nbytes - offset)
        self.note("CUDA IPC round trips: default allocator and expandable segments")
        try:
            worker = self.children.all[0]
            for child in self._ipc_children(pairs, worker):
                child.receive()  # the init sent by _start_ipc
            # the worker's pool was released after its measurements: every producer allocates a fresh one
            self.children.ask_all([pair[0] for pair in pairs.values()], "alloc", nbytes=self.nbytes)
            for i, (mode, (producer, consumer)) in enumerate(pairs.items()):
                st.round_trip(stage, mode, producer, consumer, offset, length, 7000 + i)
        except ChildFailed as e:
            stage.add(Severity.error, e.code, f"{e}; the probe stopped its processes")
        finally:
            stage.seconds = time.perf_counter() - self.ipc_started


def _unique(children: list[Child]) -> list[Child]:
    return list(dict.fromkeys(children))


def _hook(request: ProbeRequest, name: str, children: list[Child]) -> None:
    if name in request.hooks:
        request.hooks[name]([c.pid for c in children if c.pid is not None])
