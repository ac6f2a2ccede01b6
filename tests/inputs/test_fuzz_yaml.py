"""Random YAML structures through ``validate``, both file kinds: every input ends in bounded time and memory.

Anchors, aliases (fan-outs that would expand exponentially, and aliases to a value being defined),
deep nesting, huge scalars and many keys. Each input runs in-process under tracemalloc; the bounds
are generous (a loaded two-core machine), far below what an unbounded expansion takes.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mmpool_cli.core import codes
from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.sglang.env_vars import read_launch_env
from mmpool_cli.engines.sglang.files import validate_file

NO_ENV = read_launch_env({})
SECONDS = 20.0
PEAK_BYTES = 256 * 2**20
LONGEST_MESSAGE = 1_000

KEYS = [
    "pool", "parallel", "gpu", "workload", "size", "tokenizer_workers", "transport", "tp", "feature_sizes",
    "tp-size", "tokenizer-worker-num", "mm-feature-transport", "nnodes", "config", "enable-dp-attention",
    "SGLANG_MM_FEATURE_CACHE_MB", "model-path", "<<",
]  # fmt: skip
SCALARS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["true", "false", "null", "~", "1GiB", "1Gb", " 1 GiB ", "cuda_vmm", "0x1F", "1:30", ".inf"]),
    st.text(max_size=30).map(json.dumps),
)


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A YAML document in flow style, with anchors and aliases drawn as it is written."""
    anchors: list[str] = []  # written in full: an alias to one is a plain YAML alias
    open_anchors: list[str] = []  # being written: an alias to one makes a value that contains itself

    def value(depth: int) -> str:
        kind = draw(st.integers(0, 10 if depth < 5 else 3))
        if kind == 0:
            return draw(SCALARS)
        if kind == 1:  # a huge scalar: an integer past Python's digit limit, or a long string
            return draw(st.sampled_from(["9" * 4_400, "-" + "7" * 4_300, json.dumps("x" * 200_000)]))
        if kind == 2 and (anchors or open_anchors):
            return "*" + draw(st.sampled_from(anchors + open_anchors))
        if kind == 3:  # deep nesting, up to past libyaml's limit
            depth_ = draw(st.integers(1, 1_100))
            return "[" * depth_ + "]" * depth_
        if kind in (4, 5):
            return "[" + ", ".join(value(depth + 1) for _ in range(draw(st.integers(0, 4)))) + "]"
        if kind in (6, 7):
            items = (f"{key(depth + 1)}: {value(depth + 1)}" for _ in range(draw(st.integers(0, 4))))
            return "{" + ", ".join(items) + "}"
        if kind in (8, 9):
            name = f"a{len(anchors) + len(open_anchors)}"
            open_anchors.append(name)
            text = f"&{name} " + value(depth + 1)
            open_anchors.remove(name)
            anchors.append(name)
            return text
        if anchors:  # a fan-out of aliases: a few levels of these expand exponentially
            return "[" + ", ".join(["*" + anchors[-1]] * draw(st.integers(2, 12))) + "]"
        return draw(SCALARS)

    def key(depth: int) -> str:
        return json.dumps(draw(st.sampled_from(KEYS) | st.text(max_size=12))) if depth < 6 else '"k"'

    lines = [f"{key(0)}: {value(0)}" for _ in range(draw(st.integers(1, 6)))]
    many = draw(st.sampled_from([0, 0, 0, 2_000]))
    lines += [f"unknown-key-{i}: {i}" for i in range(many)]
    return "\n".join(lines) + "\n"


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _bounded(path: Path, kind: str) -> None:
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result = validate_file(str(path), NO_ENV, kind=kind)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < SECONDS, f"{elapsed:.1f} s"
    assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MiB"
    assert result.path == str(path)
    for f in result.findings:
        # a registered code with a severity it takes, a message, located in this file
        assert f.severity in codes.ALL[f.code].severities, f
        assert f.message, f
        assert len(f.message) < LONGEST_MESSAGE, f.message[:200]
        assert f.location and f.location.startswith(str(path)), f
    assert result.fails() == any(f.severity is Severity.error for f in result.findings)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=documents())
@example(text=_bomb(9))  # 9^10 values once expanded
@example(text="pool: &p {size: 1GiB, x: *p}\ntp-size: &t [1, *t]\n")
@example(text="tp-size: " + "[" * 999 + "]" * 999 + "\n")
@example(text="".join(f"unknown-key-{i}: {i}\n" for i in range(10_000)))
@example(text="pool: {size: " + "9" * 4_400 + "}\n" + "tp-size: " + json.dumps("x" * 3_000_000) + "\n")
@pytest.mark.parametrize("kind", ["mmpool", "sglang"])
def test_any_yaml_is_validated_in_bounded_time_and_memory(tmp_path: Path, kind: str, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text)
    _bounded(path, kind)
