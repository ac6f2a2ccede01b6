"""bench_serving's image dataset (SGLang 0.5.23) as requests."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.sglang.traffic.bench import requests
from mmpool_cli.engines.sglang.traffic.convert import Options, convert
from mmpool_cli.inputs.traffic.model import TrafficError
from mmpool_cli.workload.families import family

S = 10**9


def test_presets_and_height_by_width() -> None:
    assert requests(["--image-resolution", "4k"], S).requests[0].images == [(3840, 2160)]
    assert requests([], S).requests[0].images == [(1920, 1080)]  # 1080p, bench_serving's default
    assert requests(["--image-resolution", "720p"], S).requests[0].images == [(1280, 720)]
    assert requests(["--image-resolution", "1080x1920"], S).requests[0].images == [(1920, 1080)]  # HEIGHTxWIDTH


def test_counts_random_sizes_and_seeds() -> None:
    args = [
        "--num-prompts",
        "200",
        "--image-count",
        "3",
        "--random-image-count",
        "--image-resolution",
        "random:100x200-300x400",
        "--seed",
        "5",
    ]
    bench = requests(args, S)
    counts = {len(r.images) for r in bench.requests}
    assert counts == {1, 2, 3}
    sides = [(w, h) for r in bench.requests for w, h in r.images]
    assert all(200 <= w <= 400 and 100 <= h <= 300 for w, h in sides)
    assert len(set(sides)) > 50
    assert requests(args, S) == bench


def test_arrivals_inf_poisson_and_max_concurrency() -> None:
    assert {r.t_ns for r in requests(["--num-prompts", "5"], S).requests} == {0}
    poisson = [r.t_ns for r in requests(["--num-prompts", "2000", "--request-rate", "10"], S).requests]
    assert poisson == sorted(poisson) and 180 * S < poisson[-1] < 220 * S
    capped = [r.t_ns for r in requests(["--num-prompts", "6", "--max-concurrency", "2"], 2 * S).requests]
    assert capped == [0, 0, 2 * S, 2 * S, 4 * S, 4 * S]


def test_arguments_it_does_not_model_are_listed() -> None:
    bench = requests(["--backend", "sglang", "--port", "30000", "--image-count", "2"], S)
    assert bench.not_modelled == ["--backend", "--port"]
    fam = family("qwen2.5-vl")
    conv = convert(Options(fam, dict(fam.settings), "bench-serving", ["--num-prompts", "3", "--backend", "sglang"]))
    assert any("--backend" in n for n in conv.summary.notes)
    assert [le.id for le in conv.leases] == ["req1/0", "req2/0", "req3/0"]
    assert {le.nbytes for le in conv.leases} == {50_633_856}  # 1080p for Qwen2.5-VL, as plan computes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image-resolution", "huge"], "choose 4k"),
        (["--image-resolution", "random:300x300-100x100"], "minimum exceeds"),
        (["--dataset-name", "sharegpt"], "image dataset only"),
        (["--request-rate", "0"], "above 0"),
        (["--num-prompts", "x"], "invalid int value"),
        (["--image-format", "bmp"], "jpeg or png"),
    ],
)
def test_bad_arguments(args: list[str], message: str) -> None:
    with pytest.raises(TrafficError, match=message):
        requests(args, S)


def test_a_video_dataset_is_one_bench_serving_does_not_have() -> None:
    from mmpool_cli.engines.sglang.traffic import bench
    from mmpool_cli.inputs.traffic.model import TrafficError

    with pytest.raises(TrafficError, match="bench_serving in SGLang 0.5.23 has no video dataset"):
        bench.requests(["--dataset-name", "video"], 10**9)
