"""Interfaces for engines: what mmpool needs of an inference engine to plan and check its pools.

An engine lives in a package of its own under ``mmpool_cli/engines/`` and is one subclass of
``Engine``, named in ``mmpool_cli.engines.REGISTRY``. The use cases (``mmpool_cli.usecases``) reach
an engine only through this interface, so a second engine is one new package and one registry
entry. An engine's request and plan are its own types; what crosses this interface otherwise is
the neutral core's (``core.findings``, ``core.reports``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

from mmpool_cli.core.findings import Finding
from mmpool_cli.core.reports import FileResult, PlanResult, Settings

if TYPE_CHECKING:  # the simulator, and the traffic readers, load only for the commands that use them
    from mmpool_cli.caches.report import CacheReport
    from mmpool_cli.inputs.traffic.cache_request import CacheRequest
    from mmpool_cli.inputs.traffic.model import Conversion, FileMap, TrafficRequest
    from mmpool_cli.inputs.traffic.tune_request import TuneRequest
    from mmpool_cli.pools.report import PoolSetup
    from mmpool_cli.tune.split import Row, TuneReport

RequestT = TypeVar("RequestT")
PlanT = TypeVar("PlanT", bound=PlanResult)
FileKind = Literal["auto", "mmpool", "engine"]


class Engine(ABC, Generic[RequestT, PlanT]):
    """One inference engine: its releases, how it reads its inputs, how it plans its pools."""

    name: ClassVar[str]  # the registry key and the ``--kind`` of its config files, e.g. "sglang"
    title: ClassVar[str]  # how reports name it, e.g. "SGLang"

    @abstractmethod
    def releases(self) -> tuple[str, ...]:
        """Every release this engine has rules for, oldest first."""

    @abstractmethod
    def choose_release(self, flag: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
        """The release to apply (from a flag, the environment, what is installed, else the newest)
        and how it was chosen. An unknown release raises ``MmpoolError``."""

    @abstractmethod
    def allocators(self, version: str) -> tuple[str, ...]:
        """The pool allocators (transports that create a GPU pool) release ``version`` has."""

    @abstractmethod
    def pooled(self, family: str) -> bool:
        """Whether the features of model ``family`` (``workload.families``) enter the pool."""

    def processor_kwargs(self, model_type: str) -> Mapping[str, Any]:
        """What the engine passes ``AutoProcessor.from_pretrained`` for a model of ``model_type``, beyond its path."""
        return {}

    @abstractmethod
    def read_environment(self, environ: Mapping[str, str], file_findings: list[Finding], version: str) -> FileResult:
        """The environment as one input: what the engine will silently do with each variable."""

    @abstractmethod
    def read_file(
        self,
        name: str,
        environ: Mapping[str, str],
        kind: FileKind,
        stdin: bytes | Finding | None,
        version: str,
        chosen: str,
    ) -> FileResult:
        """Read one config file (an mmpool config, or the engine's own) and plan what it sets with the
        rules of ``version`` (chosen as ``choose_release`` said: ``chosen``)."""

    @abstractmethod
    def read_launch(self, argv: list[str], environ: Mapping[str, str], assumptions: Any) -> FileResult:
        """Read a launch command as the engine would, with its config file and environment, and plan it."""

    @abstractmethod
    def plan(self, request: RequestT) -> PlanT:
        """Plan the pools of ``request``: never raises for a bad configuration (findings say it)."""

    @abstractmethod
    def simulation_refusal(self, version: str, allocator: str) -> str | None:
        """Why the simulator cannot replay ``allocator`` of release ``version``; None when it can."""

    @abstractmethod
    def simulation_setup(self, request: RequestT, environ: Mapping[str, str]) -> PoolSetup:
        """The pools ``request`` makes, for the simulator; a layout that makes none raises ``MmpoolError``."""

    @abstractmethod
    def settings_for_budget(self, request: RequestT, budget_mb: int) -> Settings | None:
        """What to copy into the launch for ``request`` with a budget of ``budget_mb`` MiB."""

    @abstractmethod
    def plan_for_budget(self, request: RequestT, budget_mb: int) -> PlanT:
        """The plan of ``request`` with a budget of ``budget_mb`` MiB (its settings, its KV cost)."""

    @abstractmethod
    def read_traffic(self, request: TrafficRequest, map_files: FileMap | None = None) -> Conversion:
        """Users' traffic (the engine's logs, OpenAI bodies, its benchmark's requests) as the leases the
        engine would take, timed as it holds them; traffic that cannot be sized raises ``MmpoolError``.
        ``map_files`` reads the files (default: one after another here); the answer never depends on it."""

    def caches(self, request: CacheRequest) -> CacheReport:
        """Each multimodal cache of the engine replayed over ``request``'s items as the engine drives it:
        its size in the deployment, its hits there and at every size. Raises ``MmpoolError`` for what
        the engine's rules cannot size (an unknown hidden size, a family it has no cache rules for)."""
        from mmpool_cli.errors import MmpoolError

        raise MmpoolError(f"mmpool sizes no multimodal caches of {self.title} yet")

    def recorded_caches(
        self, directory: str, target: Fraction, kv_cell_bytes: int | None, window: int = 1
    ) -> CacheReport:
        """The multimodal caches a recording of ``mmpool record`` holds, replayed at their recorded size and
        others (``window``: vLLM's encoder cache, the requests assumed to hold entries at once);
        ``MmpoolError`` (or ``TraceError``) for a recording that holds none or cannot be replayed."""
        from mmpool_cli.errors import MmpoolError

        raise MmpoolError(f"mmpool replays no recorded caches of {self.title}")

    @abstractmethod
    def tune(self, request: TuneRequest) -> TuneReport:
        """The engine's GPU memories divided over ``request``'s budget: every candidate split scored from one
        replay of the traffic per memory, the Pareto front and the split the objective recommends. Raises
        ``MmpoolError`` for a budget it cannot find or input the separate commands refuse."""

    @abstractmethod
    def tune_at(self, request: TuneRequest, values: dict[str, int] | None = None) -> Row:
        """The measures of one split (memory name -> its setting; None: the launch's own, "today"),
        computed by the code that scores ``tune``'s rows."""
