"""mmpool's own config file: pydantic models, their JSON Schema, and the plan request they make.

A config has up to four sections, ``pool``, ``parallel``, ``gpu`` and ``workload``; unknown keys
are refused, sizes are size strings or integers of bytes. pydantic is imported only inside these
functions, so commands that never read a config do not pay for it. Errors come back located at the
offending key or value. No typer, rich or torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from mmpool_cli.core.bounds import (
    LARGEST_GPU_HBM_BYTES,
    MAX_GRANULARITY,
    MAX_PARALLEL,
    MAX_WORKERS,
    MIN_CONTEXT,
    MIN_GRANULARITY,
    context_problem,
    count_problem,
    gpu_id_problem,
    granularity_problem,
)
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import MAX_BYTES, SIZE_PATTERN, parse_size
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import settings
from mmpool_cli.engines.sglang.config_data import at, replaced, sizes_as_written
from mmpool_cli.engines.sglang.env_vars import LaunchEnv, read_launch_env, resolve_budget
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.errors import SizeError
from mmpool_cli.inputs.yamlsrc import Source

SECTIONS = ("pool", "parallel", "gpu", "workload")

# The key that sets each plan subject in a config file (declared once, in settings.py).
SUBJECT_PATHS = settings.SUBJECT_PATHS


def subject_path(subject: str | None, renumbered: Mapping[str, list[int]] | None = None) -> tuple[Any, ...] | None:
    """The config path of a plan finding's subject: ``feature_sizes.2`` is the list's third item.

    ``renumbered``: for a list that lost bad items before planning, the original index of each kept one.
    """
    name, _, index = (subject or "").partition(".")
    path = SUBJECT_PATHS.get(name)
    if path is None or not index.isdigit():
        return path
    n = int(index)
    kept = (renumbered or {}).get(name)
    return (*path, kept[n] if kept is not None and n < len(kept) else n)


def _byte_count(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected a size such as 1GiB or a whole number of bytes, not true/false")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative ({shorten(str(value))})")
        if value > MAX_BYTES:
            raise ValueError(
                f"{shorten(str(value))} bytes is larger than 2^63 - 1 (8 EiB), the most torch and CUDA can address"
            )
        return value
    if isinstance(value, str):
        try:
            return parse_size(value)
        except SizeError as e:
            raise ValueError(str(e)) from None
    raise ValueError("expected a size such as 1GiB or a whole number of bytes")


def _within(problem: Callable[[int], str | None]) -> Callable[[int | None], int | None]:
    """A validator applying one of ``core.bounds``' rules, the same the command-line flags apply."""

    def check(value: int | None) -> int | None:
        if value is not None and (why := problem(value)):
            raise ValueError(why)
        return value

    return check


@cache
def models() -> Any:
    """The pydantic models, built on first use (``models().Config`` is the root)."""
    from typing import Annotated, Literal

    from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

    # The schema says what JSON Schema can of the validator: the size grammar, the integer ranges.
    size_schema = {
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": MAX_BYTES},
            {"type": "string", "pattern": SIZE_PATTERN, "examples": ["1GiB", "512MiB", "4.35MB"]},
        ],
        "description": "bytes: an integer, or a size string (kB/MB/GB = 1000^n, KiB/MiB/GiB = 1024^n)",
    }
    ByteCount = Annotated[int, BeforeValidator(_byte_count), WithJsonSchema(size_schema)]

    def bounded(integers: dict[str, Any]) -> dict[str, Any]:
        # what JSON Schema can say of a bound: on integers; a size string is checked by mmpool alone
        return {**size_schema, "anyOf": [{"type": "integer", **integers}, size_schema["anyOf"][1]]}

    # the bounds of --context-size and --vmm-granularity (core.bounds), for the keys that set them
    ContextSize = Annotated[
        int,
        BeforeValidator(_byte_count),
        AfterValidator(_within(context_problem)),
        WithJsonSchema(bounded({"minimum": MIN_CONTEXT, "maximum": LARGEST_GPU_HBM_BYTES})),
    ]
    powers = [1 << n for n in range(MIN_GRANULARITY.bit_length() - 1, MAX_GRANULARITY.bit_length())]
    Granularity = Annotated[
        int,
        BeforeValidator(_byte_count),
        AfterValidator(_within(granularity_problem)),
        WithJsonSchema(bounded({"enum": powers})),
    ]
    # SGLang needs at least 1 of each; the plan says so with SGLang's own words, the schema with a minimum.
    # Above, the bounds of --workers, --tp/--dp/--attn-dp-size and --base-gpu-id (core.bounds).
    Workers = Annotated[
        int,
        AfterValidator(_within(lambda value: count_problem(value, MAX_WORKERS, "tokenizer workers"))),
        Field(json_schema_extra={"minimum": 1, "maximum": MAX_WORKERS}),
    ]
    Ranks = Annotated[
        int,
        AfterValidator(_within(lambda value: count_problem(value, MAX_PARALLEL, "ranks"))),
        Field(json_schema_extra={"minimum": 1, "maximum": MAX_PARALLEL}),
    ]
    GpuId = Annotated[
        int, Field(ge=0, json_schema_extra={"maximum": MAX_PARALLEL}), AfterValidator(_within(gpu_id_problem))
    ]
    Integer = Annotated[int, Field(ge=-MAX_BYTES, le=MAX_BYTES)]
    strict = ConfigDict(extra="forbid", strict=True, frozen=True)

    class Pool(BaseModel):
        """The node's pool budget and how it is split."""

        model_config = strict
        size: ByteCount | None = Field(None, description="pool budget; unset: SGLANG_MM_FEATURE_CACHE_MB")
        tokenizer_workers: Workers = Field(1, description="--tokenizer-worker-num: one pool per worker")
        transport: Literal["cuda_ipc", "cuda_vmm", "cpu"] = Field("cuda_ipc", description="--mm-feature-transport")
        vmm_granularity: Granularity = Field(
            sg.DEFAULT_VMM_GRANULARITY, description="CUDA VMM granularity: a power of two from 4 KiB to 1 GiB"
        )

    class Parallel(BaseModel):
        """The parallel layout: it sets the consumers per feature and the transport's limits."""

        model_config = strict
        tp: Ranks = Field(1, description="--tp-size")
        dp: Ranks = Field(1, description="--dp-size")
        attn_dp: Ranks = Field(1, description="--attn-dp-size")
        enable_dp_attention: bool = Field(False, description="deprecated --enable-dp-attention")
        pp: Integer = Field(1, description="--pp-size")
        nnodes: Integer = Field(1, description="--nnodes")
        base_gpu_id: GpuId = Field(0, description="--base-gpu-id: the GPU that holds the pools")

    class Gpu(BaseModel):
        """The base GPU, for offline planning."""

        model_config = strict
        total_hbm: ByteCount | None = Field(None, description="total memory of the base GPU")
        free_hbm: ByteCount | None = Field(None, description="memory free on the base GPU before the launch")
        context_size: ContextSize | None = Field(
            None, description="CUDA context per tokenizer process: 1 MiB to 288 GiB"
        )

    class Workload(BaseModel):
        """The features the pools must hold."""

        model_config = strict
        feature_sizes: list[ByteCount] = Field(default_factory=list, description="bytes of one feature tensor each")

    class Config(BaseModel):
        """An mmpool config file."""

        model_config = ConfigDict(extra="forbid", strict=True, frozen=True, title="mmpool config")
        pool: Pool = Field(default_factory=Pool)
        parallel: Parallel = Field(default_factory=Parallel)
        gpu: Gpu = Field(default_factory=Gpu)
        workload: Workload = Field(default_factory=Workload)

    return Config


def json_schema() -> dict[str, Any]:
    """The JSON Schema of an mmpool config file."""
    schema = models().model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def is_mmpool_config(data: Mapping[Any, Any]) -> bool:
    """The recognition rule: a mapping with at least one of ``pool``, ``parallel``, ``gpu``, ``workload``."""
    return any(section in data for section in SECTIONS)


def parse(src: Source) -> tuple[Any | None, list[Finding]]:
    """Validate a located mapping as an mmpool config: the model, or located findings.

    With errors, the layout rules (the transport's limits, the worker and parallel sizes) are still
    checked on the keys that are valid, so one run reports a bad value and a layout SGLang refuses
    together.
    """
    from pydantic import ValidationError

    data = sizes_as_written(src)
    try:
        return models().model_validate(data), []
    except ValidationError as e:
        errors = e.errors(include_url=False)
    findings = [_finding(src, err) for err in errors]
    return None, findings + _layout_despite(src, data, [tuple(err.get("loc", ())) for err in errors])


_LAYOUT_KEYS = (("pool", "transport"), ("parallel", "nnodes"), ("parallel", "pp"))
# The plan's findings that depend on one key each, and those that combine the parallel keys.
_SINGLE_KEY_CODES = ("workers-not-positive", "parallel-not-positive", "feature-empty")
_PARALLEL_CODES = ("dp-replicas-with-attention-dp", "attention-dp-not-divisor")


def _layout_despite(src: Source, data: Any, bad: list[tuple[Any, ...]]) -> list[Finding]:
    renumbered: dict[str, list[int]] = {}
    cfg = _valid_part(data, bad, renumbered)
    if cfg is None:
        return []
    findings: list[Finding] = []
    if not any(_overlaps(loc, key) for loc in bad for key in _LAYOUT_KEYS):  # else its own finding says so
        where = src.where(("pool", "transport"))
        findings += [
            Finding(Severity.error, "transport-layout", f"SGLang refuses this layout: '{message}'", where)
            for message in sg.transport_errors(cfg.pool.transport, cfg.parallel.nnodes, cfg.parallel.pp)
        ]
    if cfg.pool.transport == "cpu" or any(_overlaps(loc, ("pool", "transport")) for loc in bad):
        return findings  # no pool, or none known: the plan's rules do not apply
    codes: tuple[str, ...] = _SINGLE_KEY_CODES
    if not any(_overlaps(loc, ("parallel",)) for loc in bad):
        codes += _PARALLEL_CODES  # a bad parallel key leaves its default: a combination would be a guess
        if not any(_overlaps(loc, ("pool",)) for loc in bad):
            codes += ("feature-never-fits",)  # the pool is as written: the list's other items are judged
    for f in make_plan(request(cfg, read_launch_env({}))).findings:
        if f.code in codes:
            findings.append(f.at(src.where(subject_path(f.subject, renumbered) or ())))
    return findings


def _overlaps(loc: tuple[Any, ...], key: tuple[str, ...]) -> bool:
    return loc[: len(key)] == key or key[: len(loc)] == loc


def _valid_part(data: Any, bad: list[tuple[Any, ...]], renumbered: dict[str, list[int]]) -> Any | None:
    """The config made of the valid keys alone (the bad ones left at their defaults), or None.

    A list keeps its good items (``renumbered`` maps each plan subject's list to the kept indices),
    so that one run reports every bad item of it, not the first alone.
    """
    from pydantic import ValidationError

    data = dict(data)
    for subject, path in SUBJECT_PATHS.items():
        items = at(data, path)
        drop = {loc[len(path)] for loc in bad if len(loc) > len(path) and loc[: len(path)] == path}
        if isinstance(items, list) and drop and all(isinstance(i, int) for i in drop):
            kept = [i for i in range(len(items)) if i not in drop]
            data = replaced(data, path, [items[i] for i in kept])
            renumbered[subject] = kept
            bad = [loc for loc in bad if loc[: len(path)] != path]
    try:
        return models().model_validate(_without(data, bad))
    except ValidationError:
        return None


def _without(data: dict[Any, Any], bad: list[tuple[Any, ...]]) -> dict[Any, Any]:
    # One pass over the bad keys, copying only the mappings on their way (no deepcopy: a value may
    # nest deep; no copy per key: a file may have thousands of unknown keys).
    below: dict[Any, list[tuple[Any, ...]]] = {}
    for loc in bad:
        if loc and loc[0] in data:
            below.setdefault(loc[0], []).append(loc[1:])
    pruned = dict(data)
    for head, rests in below.items():
        child = data[head]
        if isinstance(child, dict) and all(rests):
            pruned[head] = _without(child, rests)
        else:
            del pruned[head]  # the bad key itself, or the list that holds a bad item
    return pruned


def _finding(src: Source, err: Mapping[str, Any]) -> Finding:
    loc = tuple(err.get("loc", ()))
    dotted = ".".join(str(part) for part in loc) or "(top level)"
    if err.get("type") == "extra_forbidden":
        known = _known_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        fix = f"did you mean {close[0]!r}?" if close else f"known keys here: {', '.join(known)}"
        where = src.where(loc, key=True)
        return Finding(Severity.error, "config-unknown-key", f"unknown key {excerpt(dotted)}: {fix}", where)
    message = _wrong_type(err) or str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return Finding(Severity.error, "config-invalid-value", f"{dotted}: {message}", src.where(loc))


def _wrong_type(err: Mapping[str, Any]) -> str | None:
    """pydantic's 'Input should be a valid integer/boolean' in the user's terms, with what to write."""
    kind = err.get("type")
    value = err.get("input")
    if kind == "bool_type":
        return f"{_yaml_text(value)} is not a boolean: write true or false"
    if kind != "int_type":
        return None
    if isinstance(value, float) and value.is_integer():
        return f"{value!r} is a number with a decimal point: write {int(value)}"
    if isinstance(value, float):
        return f"{value!r} is not a whole number: write a whole number, e.g. {max(1, int(value))}"
    if isinstance(value, str) and value.strip().isdigit():
        return f"{excerpt(value)} is text (quoted): write the number without quotes, e.g. {value.strip()}"
    if isinstance(value, str):
        return f"{excerpt(value)} is text, not a number: write a whole number, e.g. 1"
    if value is None:
        return "null is no value: write a whole number, e.g. 1, or remove the key"
    what = "a boolean" if isinstance(value, bool) else "not a number"
    return f"{_yaml_text(value)} is {what}: write a whole number, e.g. 1"


def _yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a mapping"
    return excerpt(str(value))


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    model = models()
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not hasattr(field.annotation, "model_fields"):
            return list(SECTIONS)
        model = field.annotation
    return list(model.model_fields)


def request(cfg: Any, launch: LaunchEnv) -> PlanRequest:
    """The plan request a config makes; an unset size is the environment's, as SGLang reads it."""
    config = None if cfg.pool.size is None else Budget(bytes=cfg.pool.size, source="config")
    return PlanRequest(
        budget=resolve_budget(launch, config=config),
        vlm_cache=launch.vlm_cache if launch.vlm_cache.variable else None,
        workers=cfg.pool.tokenizer_workers,
        tp_size=cfg.parallel.tp,
        dp_size=cfg.parallel.dp,
        attn_dp_size=cfg.parallel.attn_dp,
        enable_dp_attention=cfg.parallel.enable_dp_attention,
        transport="cuda_vmm" if cfg.pool.transport == "cuda_vmm" else "cuda_ipc",
        transport_asked="transport" in cfg.pool.model_fields_set,
        legacy_transport=launch.legacy_transport_on if launch.legacy_transport_set else None,
        vmm_granularity=cfg.pool.vmm_granularity,
        feature_sizes=tuple(cfg.workload.feature_sizes),
        base_gpu_id=cfg.parallel.base_gpu_id,
        expandable_segments=launch.expandable_segments,
        context_bytes=cfg.gpu.context_size,
        nnodes=cfg.parallel.nnodes,
    )
