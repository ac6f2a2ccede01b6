"""SGLang 0.5.23's start-up refusals, whatever the transport, with SGLang's own words."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.sglang.args import BY_DEST
from mmpool_cli.engines.sglang.startup import startup_errors


def errors(**values: object) -> dict[str, str]:
    def get(dest: str) -> object:
        return values.get(dest, BY_DEST[dest].default)

    return {e.code: e.message for e in startup_errors(get)}


def test_sglang_defaults_start() -> None:
    assert errors() == {}


@pytest.mark.parametrize(
    ("values", "code", "text"),
    [
        ({"tokenizer_worker_num": 0}, "workers-not-positive", "'Tokenizer worker num must >= 1'"),
        ({"tokenizer_worker_num": -3}, "workers-not-positive", "'Tokenizer worker num must >= 1'"),
        ({"base_gpu_id": -1}, "base-gpu-id-negative", "'base_gpu_id must be non-negative'"),
        ({"gpu_id_step": 0}, "gpu-id-step-not-positive", "'gpu_id_step must be positive'"),
        ({"tp_size": 3, "nnodes": 2}, "tp-not-divisible-by-nodes", "'tp_size must be divisible by number of nodes'"),
        ({"nnodes": 0}, "nnodes-not-positive", "ZeroDivisionError: integer modulo by zero"),
        (
            {"dp_size": 2, "tp_size": 2, "nnodes": 2},
            "dp-replicas-multi-node",
            "'multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes'",
        ),
        ({"attn_dp_size": 0}, "parallel-not-positive", "'--attn-dp-size must be positive (got 0).'"),
        (
            {"dp_size": 2, "attn_dp_size": 2, "tp_size": 2},
            "dp-replicas-with-attention-dp",
            "data-parallel replicas combined with attention data parallelism are not supported.",
        ),
        ({"attn_dp_size": 3, "tp_size": 8}, "attention-dp-not-divisor", "bare AssertionError"),
        ({"dwdp_size": 4, "tp_size": 8}, "dwdp-not-tp", "'dwdp_size (4) must equal tp_size (8)'"),
        (
            {"dwdp_size": 8, "tp_size": 8, "disaggregation_mode": "decode"},
            "dwdp-disaggregation",
            "'DWDP requires --disaggregation-mode null or prefill'",
        ),
    ],
)
def test_each_refusal_quotes_sglang(values: dict[str, object], code: str, text: str) -> None:
    found = errors(**values)
    assert code in found, found
    assert text in found[code]


def test_deprecated_dp_attention_is_attention_dp_not_replicas() -> None:
    # --dp-size 2 --enable-dp-attention is --attn-dp-size 2: not multi-node replicas
    assert errors(dp_size=2, enable_dp_attention=True, tp_size=2, nnodes=2) == {}
    # --dwdp-size sets attention DP of that width and no replicas
    assert errors(dwdp_size=4, tp_size=4, dp_size=1, nnodes=2) == {}
