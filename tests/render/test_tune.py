"""``mmpool tune``'s human report: every figure whole, today's and the recommended row marked; the JSON's head."""

from __future__ import annotations

import json

from mmpool_cli.render.tune import to_json, tune_text
from mmpool_cli.tune.front import mark
from mmpool_cli.tune.split import Measures, Memory, Row, TuneReport


def _row(kv: int, pool: int, emb: int, work: int, fallback: int, today: bool = False) -> Row:
    m = Measures(
        requests=3,
        prompt_tokens=work + 7,
        prefix_served_tokens=7,
        encoder_tokens=0,
        fallback_items=fallback,
        fallback_bytes=fallback * 123_456_789_012,
        kv_tokens=kv,
        batch=kv // 1000,
    )
    values = {"kv": kv, "pool": pool, "embedding": emb}
    return Row(values, dict(values), m, (f"--max-total-tokens {kv}",), today=today, assumed=(0,))


def _report() -> TuneReport:
    rows = [
        _row(98_765_432_109, 20, 0, 1_000_001, 0),
        _row(98_765_432_000, 4_096, 100, 2_000_000, 0, today=True),
        _row(98_765_433_000, 8, 0, 1_000_001, 12_345),
    ]
    marked, status = mark(rows)
    mem = (
        Memory("kv", "--max-total-tokens", "tokens"),
        Memory("pool", "SGLANG_MM_FEATURE_CACHE_MB", "MiB"),
        Memory("embedding", "SGLANG_VLM_CACHE_SIZE_MB", "MiB"),
    )
    return TuneReport(
        "SGLang 0.5.23",
        "0.5.23",
        "t.jsonl",
        10**12,
        "--budget 1TB",
        mem,
        marked,
        "no-fallback",
        ("an assumption",),
        (),
        status,
    )


def test_every_figure_is_printed_whole_and_the_rows_are_marked() -> None:
    out = tune_text(_report())
    assert out.startswith("mmpool tune: BETTER SPLIT  (SGLang 0.5.23, t.jsonl)\n")
    for figure in (
        "98,765,432,109",
        "98,765,433,000",
        f"{12_345 * 123_456_789_012:,}",
        "4,096",
        "333,333.66",
        "666,666.66",
    ):
        assert figure in out
    lines = out.splitlines()
    (best,) = [line for line in lines if line.lstrip().startswith("*")]
    (today,) = [line for line in lines if line.lstrip().startswith("today")]
    assert "98,765,432,109" in best and "98,765,432,000" in today
    assert "  1. an assumption" in out
    assert "--max-total-tokens 98765432109" in out


def test_json_head() -> None:
    data = json.loads(to_json(_report()))
    assert list(data)[:2] == ["schema_version", "status"]
    assert (data["schema_version"], data["status"], data["recommended"], data["today"]) == (1, "fail", 0, 1)
    assert data["gain"]["work_tokens"] == 1_000_001 - 2_000_000
    assert data["rows"][0]["measures"]["work_per_request"] == "1000001/3"


def test_the_setting_columns_are_the_reports_memories():
    # vLLM's: the KV cache in blocks (its tokens are the measure's column), the encoder budget told apart from
    # the encoder tokens computed
    m = Measures(3, 10, 2, 5, 0, 0, 4_080, 2)
    values = {"kv": 256, "encoder": 16_384, "decode_pool": 0}
    rows, status = mark([Row(values, dict(values), m, ("--num-gpu-blocks-override 256",), today=True)])
    mem = (
        Memory("kv", "--num-gpu-blocks-override", "blocks"),
        Memory("encoder", "--max-num-batched-tokens", "tokens"),
        Memory("decode_pool", "--mm-ipc-gpu-memory-gb", "bytes"),
    )
    text = tune_text(TuneReport("vLLM 0.34.0", "0.34.0", "t.jsonl", 10**9, "today's", mem, rows, "no-fallback"))
    head = next(line for line in text.splitlines() if "KV tokens" in line and "batch" in line)
    assert head.split()[:7] == ["KV", "blocks", "encoder", "size", "tokens", "decode", "pool"]
    assert "encoder tokens" in head and "  today*" in text and "  256  " in text.replace("today*", "")
