"""vLLM behind the engine interface: its releases, its launch command and config files, its plan."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult, Settings
from mmpool_cli.engines.interface import Engine, FileKind
from mmpool_cli.engines.vllm import versions
from mmpool_cli.engines.vllm.request import VllmPlan, VllmRequest

if TYPE_CHECKING:
    from fractions import Fraction

    from mmpool_cli.caches.report import CacheReport
    from mmpool_cli.inputs.traffic.model import Conversion, FileMap, TrafficRequest
    from mmpool_cli.inputs.traffic.tune_request import TuneRequest
    from mmpool_cli.pools.report import PoolSetup
    from mmpool_cli.tune.split import Row, TuneReport

ENV_BACKEND = "VLLM_VIDEO_LOADER_BACKEND"


@dataclass(frozen=True)
class VllmAssumptions:
    """What ``check`` cannot read from the launch: the release, the GPU, the host, the model and items."""

    version: str
    version_chosen: str = "newest"
    gpu: Any = None  # encoder_budget.Gpu
    host_memory: int | None = None
    shm_size: int | None = None
    model: str | None = None  # --model NAME|PATH when the launch names a hub id
    items: tuple[Any, ...] = ()
    cwd: str | None = None


class VllmEngine(Engine[VllmRequest, VllmPlan]):
    """vLLM, every release from the generated tables (``data/releases.json``)."""

    name: ClassVar[str] = "vllm"
    title: ClassVar[str] = "vLLM"

    def releases(self) -> tuple[str, ...]:
        return versions.known()

    def choose_release(self, flag: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
        release, chosen = versions.choose(flag, environ)
        return release.version, chosen

    def allocators(self, version: str) -> tuple[str, ...]:
        return ()  # vLLM has no feature pool of SGLang's kind for the simulator or the probe

    def pooled(self, family: str) -> bool:
        return False

    def read_environment(self, environ: Mapping[str, str], file_findings: list[Finding], version: str) -> FileResult:
        return FileResult(path="environment", kind="environment", findings=list(file_findings))

    def read_file(
        self,
        name: str,
        environ: Mapping[str, str],
        kind: FileKind,
        stdin: bytes | Finding | None,
        version: str,
        chosen: str,
    ) -> FileResult:
        from mmpool_cli.engines.vllm import args
        from mmpool_cli.engines.vllm.flags import table
        from mmpool_cli.engines.vllm.plan import make_plan, request_from_reading

        reading = args.read_config_file(name, table(version), stdin)
        # planned even with a refused value (vLLM's default stands in), so every problem shows at once
        req = request_from_reading(reading, versions.release(version), release_source=chosen)
        plan = make_plan(with_env(req, environ))
        findings = reading.findings + plan.findings
        return FileResult(path=name, kind="vllm", findings=findings, plan=plan)

    def read_launch(self, argv: list[str], environ: Mapping[str, str], assumptions: Any) -> FileResult:
        from mmpool_cli.engines.vllm.plan import make_plan

        launch = read_launch_request(argv, environ, assumptions)
        plan = make_plan(launch.request)
        return FileResult(path="launch command", kind="launch", findings=launch.findings + plan.findings, plan=plan)

    def recorded_caches(
        self, directory: str, target: Fraction, kv_cell_bytes: int | None, window: int = 1
    ) -> CacheReport:
        from mmpool_cli.engines.vllm.cache_recording import recorded_caches

        return recorded_caches(directory, target, window)  # the processor cache is host RAM: no KV figure

    def plan(self, request: VllmRequest) -> VllmPlan:
        from mmpool_cli.engines.vllm.plan import make_plan

        return make_plan(request)

    def simulation_setup(self, request: VllmRequest, environ: Mapping[str, str]) -> PoolSetup:
        from mmpool_cli.errors import MmpoolError

        raise MmpoolError(self.simulation_refusal(request.release.version, "") or "")

    def settings_for_budget(self, request: VllmRequest, budget_mb: int) -> Settings | None:
        return None  # vLLM has no feature-pool budget to search

    def simulation_refusal(self, version: str, allocator: str) -> str | None:
        return (
            "vLLM has no feature-transport pool to replay: its multimodal memory is planned exactly by "
            "'mmpool plan --engine vllm'"
        )

    def plan_for_budget(self, request: VllmRequest, budget_mb: int) -> VllmPlan:
        from mmpool_cli.errors import MmpoolError

        raise MmpoolError(self.simulation_refusal(request.release.version, "") or "")

    def read_traffic(self, request: TrafficRequest, map_files: FileMap | None = None) -> Conversion:
        from mmpool_cli.errors import MmpoolError

        raise MmpoolError(
            "vLLM's traffic is not replayed: its multimodal memory has no pool to simulate; "
            "'mmpool plan --engine vllm' plans it from the items of one request"
        )

    def tune(self, request: TuneRequest) -> TuneReport:
        from mmpool_cli.engines.vllm import tune

        return tune.tune(
            _tune_input(request),
            budget_bytes=request.budget_bytes,
            budget_text=request.budget_text,
            objective=request.objective,
            points=request.points,
            source=request.source,
        )

    def tune_at(self, request: TuneRequest, values: dict[str, int] | None = None) -> Row:
        from mmpool_cli.engines.vllm import tune

        return tune.tune_at(_tune_input(request), values)


def _tune_input(request: TuneRequest) -> Any:
    """vLLM's tune input: ``mmpool cache --engine vllm`` reads its own traffic and launch (no ``CacheRequest``
    of SGLang's kind), so the request carries them in ``pools`` (``tune.VllmTuneInput``)."""
    from mmpool_cli.engines.vllm.tune import VllmTuneInput
    from mmpool_cli.errors import MmpoolError

    if not isinstance(request.pools, VllmTuneInput):
        raise MmpoolError("mmpool tune --engine vllm: the request carries no vLLM launch and traffic")
    return request.pools


LAUNCHERS = "'vllm serve MODEL …' or 'python -m vllm.entrypoints.openai.api_server …'"


@dataclass(frozen=True)
class LaunchRequest:
    """A ``vllm serve`` launch as ``check`` reads it: its parsed flags, the plan request they make (with the
    environment), the reading's findings, and the model's local folder (None: a family or a hub id)."""

    reading: Any  # reading.Reading
    request: VllmRequest
    findings: list[Finding]
    model_dir: str | None


def read_launch_request(argv: list[str], environ: Mapping[str, str], assumptions: Any) -> LaunchRequest:
    """Read a vLLM launch command as vLLM 0.34.0's parser does, for ``check`` (and ``check --from``, which
    replays the same request over traffic). Raises ``MmpoolError`` for a command that is no vLLM launch."""
    from mmpool_cli.engines.vllm import args, host
    from mmpool_cli.engines.vllm.flags import table
    from mmpool_cli.engines.vllm.plan import request_from_reading
    from mmpool_cli.errors import MmpoolError
    from mmpool_cli.workload.hf import resolve

    assume: VllmAssumptions = assumptions
    found = args.launch_words(argv)
    if found is None:
        raise MmpoolError(f"{' '.join(argv[:3])!r} is not a vLLM launch: mmpool check accepts {LAUNCHERS}")
    words, serve = found
    reading = args.read(words, serve=serve, flags=table(assume.version), cwd=assume.cwd)
    findings = list(reading.findings)
    model = None
    model_dir = None
    named = reading.get("model_tag") or reading.get("model")
    source = assume.model or named
    if source:
        path = source if assume.cwd is None or os.path.isabs(source) else os.path.join(assume.cwd, source)
        if assume.model or os.path.exists(path):
            local = assume.model or path
            model = resolve(local)
            model_dir = local if os.path.isdir(local) else None
        else:
            findings.append(
                Finding(
                    Severity.info,
                    "vllm-model-not-local",
                    f"the model {source[:60]!r} is not a local directory: mmpool reads no hub, so the encoder "
                    "cache is planned without it; pass --model FAMILY|PATH",
                    reading.origin("model_tag") or reading.origin("model"),
                )
            )
    ram = assume.host_memory if assume.host_memory is not None else host.ram_bytes()
    shm = assume.shm_size if assume.shm_size is not None else host.shm_bytes()
    req = request_from_reading(
        reading,
        versions.release(assume.version),
        release_source=assume.version_chosen,
        model=model,
        items=assume.items,
        gpu=assume.gpu,
        host_memory=ram,
        shm_size=shm,
    )
    return LaunchRequest(reading, with_env(req, environ), findings, model_dir)


def with_env(req: VllmRequest, environ: Mapping[str, str]) -> VllmRequest:
    """``req`` with ``VLLM_VIDEO_LOADER_BACKEND``: the loader where neither the launch nor the model picks
    one, and ``pynvvideocodec`` selects the GPU video backend as the flag does."""
    from dataclasses import replace

    backend = environ.get(ENV_BACKEND)
    if backend is not None:
        req = replace(req, video_loader_env=backend)
    if backend == "pynvvideocodec" and not req.gpu_video_backend:
        return replace(req, gpu_video_backend=True)
    return req
