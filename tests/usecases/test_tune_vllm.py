"""``mmpool tune --engine vllm``'s request: read as ``cache --engine vllm`` reads its traffic and launch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mmpool_cli.cli.vllm_options import VllmOptions
from mmpool_cli.engines.vllm.prefix import PrefixFlags
from mmpool_cli.engines.vllm.tune import VllmTuneInput
from mmpool_cli.errors import MmpoolError
from mmpool_cli.usecases import tune_vllm
from mmpool_cli.usecases.cache_vllm import vllm_caches
from mmpool_cli.workload.hf import resolve

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "examples" / "qwen2.5-vl-7b")
EXAMPLE = str(ROOT / "examples" / "traffic" / "vllm-chats.jsonl")


def _request(model: str = MODEL):
    return VllmOptions().request(os.environ, resolve(model), ())


def test_the_request_carries_the_traffic_cache_reads_and_the_images_as_the_processor_cache_sizes_them():
    req = tune_vllm.tune_request([EXAMPLE], _request(), PrefixFlags(num_blocks=400), window=2, points=3)
    inp = req.pools
    assert isinstance(inp, VllmTuneInput) and (inp.window, inp.flags.num_blocks, req.points) == (2, 400, 3)
    traffic = vllm_caches([EXAMPLE], _request())["traffic"]
    assert len(inp.traffic.requests) == traffic["requests_with_images"] and inp.traffic.images == traffic["images"]
    assert len(req.cache.items) == traffic["images"] and all(i.kind == "image" and i.nbytes > 0 for i in req.cache.items)
    assert inp.videos == () and inp.unsized == ()


@pytest.mark.parametrize(
    ("files", "kw", "message"),
    [
        ([], {}, "give the traffic: --from FILE"),
        ([EXAMPLE], {"window": 0}, "--encoder-window 0"),
    ],
)
def test_bad_input_is_one_line(files, kw, message):
    with pytest.raises(MmpoolError, match=message):
        tune_vllm.tune_request(files, _request(), PrefixFlags(), **kw)


def test_no_model_is_refused():
    request = VllmOptions().request(os.environ, None, ())
    with pytest.raises(MmpoolError, match="--model DIR is needed"):
        tune_vllm.tune_request([EXAMPLE], request, PrefixFlags())
