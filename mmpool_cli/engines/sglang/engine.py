"""SGLang behind the engine interface: its releases, its inputs, its plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from mmpool_cli.core.findings import Finding
from mmpool_cli.core.reports import FileResult, Settings
from mmpool_cli.engines.interface import Engine, FileKind
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.models import Plan, PlanRequest

if TYPE_CHECKING:  # the simulator, and the traffic readers, load only for the commands that use them
    from mmpool_cli.caches.report import CacheReport
    from mmpool_cli.inputs.traffic.cache_request import CacheRequest
    from mmpool_cli.inputs.traffic.model import Conversion, FileMap, TrafficRequest
    from mmpool_cli.inputs.traffic.tune_request import TuneRequest
    from mmpool_cli.pools.report import PoolSetup
    from mmpool_cli.tune.split import Row, TuneReport

# The families whose features SGLang moves through the pool (every release mmpool knows); the
# others' processors keep their features on the CPU path, so a pool for them is pure cost.
POOLED_FAMILIES = frozenset({"qwen2-vl", "qwen2.5-vl", "qwen3-vl", "gemma3", "llama4", "kimi-k2.5"})


class SGLangEngine(Engine[PlanRequest, Plan]):
    """SGLang, every release from the generated tables (``data/releases.json``)."""

    name: ClassVar[str] = "sglang"
    title: ClassVar[str] = "SGLang"

    def releases(self) -> tuple[str, ...]:
        return versions.known()

    def choose_release(self, flag: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
        release, chosen = versions.choose(flag, environ)
        return release.version, chosen

    def allocators(self, version: str) -> tuple[str, ...]:
        return versions.release(version).pool_transports

    def pooled(self, family: str) -> bool:
        return family in POOLED_FAMILIES

    def processor_kwargs(self, model_type: str) -> Mapping[str, Any]:
        # get_processor (utils/hf_transformers/processor.py:312-314): a size every sub-processor takes,
        # under the flat min_pixels / max_pixels of the checkpoint's own config
        if model_type == "qwen2_vl":
            return {"size": {"shortest_edge": 3136, "longest_edge": 1003520}}
        return {}

    def read_environment(self, environ: Mapping[str, str], file_findings: list[Finding], version: str) -> FileResult:
        from mmpool_cli.engines.sglang import env_vars as envmod
        from mmpool_cli.engines.sglang.files import environment_result

        return environment_result(environ, envmod.read_launch_env(environ), file_findings, version)

    def read_file(
        self,
        name: str,
        environ: Mapping[str, str],
        kind: FileKind,
        stdin: bytes | Finding | None,
        version: str,
        chosen: str,
    ) -> FileResult:
        from mmpool_cli.engines.sglang import env_vars as envmod
        from mmpool_cli.engines.sglang.files import validate_file

        result = validate_file(
            name, envmod.read_launch_env(environ), "sglang" if kind == "engine" else kind, stdin, version
        )
        # every plan says how its release was chosen, as the report does
        if isinstance(result.plan, Plan):
            result = replace(result, plan=replace(result.plan, sglang_version_chosen=chosen))
        return result

    def read_launch(self, argv: list[str], environ: Mapping[str, str], assumptions: Any) -> FileResult:
        from mmpool_cli.engines.sglang.launch import check_launch

        return check_launch(argv, environ, assumptions)

    def plan(self, request: PlanRequest) -> Plan:
        from mmpool_cli.engines.sglang.plan import make_plan

        return make_plan(request)

    def simulation_refusal(self, version: str, allocator: str) -> str | None:
        from mmpool_cli.engines.sglang.simulation import refusal

        return refusal(versions.release(version), allocator)

    def simulation_setup(self, request: PlanRequest, environ: Mapping[str, str]) -> PoolSetup:
        from mmpool_cli.engines.sglang.simulation import setup

        return setup(request, self.plan(request), environ)

    def read_traffic(self, request: TrafficRequest, map_files: FileMap | None = None) -> Conversion:
        from mmpool_cli.engines.sglang.traffic.convert import convert

        return convert(request, map_files)

    def caches(self, request: CacheRequest) -> CacheReport:
        from mmpool_cli.engines.sglang.caches import caches

        return caches(request)

    def tune(self, request: TuneRequest) -> TuneReport:
        from mmpool_cli.engines.sglang.tune import tune

        return tune(request, self._tune_setup(request))

    def tune_at(self, request: TuneRequest, values: dict[str, int] | None = None) -> Row:
        from mmpool_cli.engines.sglang.tune import tune_at

        return tune_at(request, self._tune_setup(request), values)

    def _tune_setup(self, request: TuneRequest) -> PoolSetup:
        """The pools of the launch, as ``simulate`` takes them (its refusals first)."""
        from mmpool_cli.errors import MmpoolError

        refused = self.simulation_refusal(request.pools.sglang_version, request.pools.transport)
        if refused is not None:
            raise MmpoolError(refused)
        return self.simulation_setup(request.pools, request.environ)

    def recorded_caches(
        self, directory: str, target: Fraction, kv_cell_bytes: int | None, window: int = 1
    ) -> CacheReport:
        from mmpool_cli.engines.sglang.cache_recording import recorded_caches

        return recorded_caches(directory, target, kv_cell_bytes)

    def settings_for_budget(self, request: PlanRequest, budget_mb: int) -> Settings | None:
        return self.plan_for_budget(request, budget_mb).settings

    def plan_for_budget(self, request: PlanRequest, budget_mb: int) -> Plan:
        from mmpool_cli.core.units import MiB
        from mmpool_cli.engines.sglang.models import Budget

        budget = Budget(bytes=budget_mb * MiB, source="flag")
        return self.plan(replace(request, budget=budget, feature_sizes=()))
