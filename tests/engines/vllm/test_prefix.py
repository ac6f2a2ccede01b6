"""vLLM's prefix caching in front of the encoder cache: which items a cached prefix covers."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from mmpool_cli.engines.vllm.prefix import PrefixFlags, replay
from mmpool_cli.inputs.traffic.prompts import Prompt, messages_of

BYTES = str(Path(__file__).parents[2] / "data" / "byte-tokenizer")


def turn(*parts: str) -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "-"}} if p == "<img>" else {"type": "text", "text": p}
            for p in parts
        ],
    }


def chat(*messages: dict) -> Prompt:
    got = messages_of(list(messages))
    assert got is not None
    return Prompt(got)


FIRST = turn("<img>", "Hi")
SECOND = [FIRST, {"role": "assistant", "content": "A cat."}, turn("<img>", "And this one, please?")]
REQUESTS = [["a"], ["a", "b"], ["b"]]
PROMPTS = [chat(FIRST), chat(*SECOND), chat(turn("<img>", "Hi"))]


def test_an_item_inside_the_cached_prefix_never_reaches_the_encoder() -> None:
    pytest.importorskip("transformers")
    got = replay(REQUESTS, PROMPTS, {"a": 64, "b": 32}, "qwen2.5-vl", PrefixFlags(tokenizer=BYTES), Fraction(99))
    # turn 2 re-sends turn 1 whole (a's 64 tokens in its first full blocks): a is served, b is new;
    # request 3 has b where turn 1 had a: its blocks' keys carry b's hash, nothing past the user tag matches
    assert got.covered == [set(), {0}, set()]
    assert got.items_served == 1
    assert got.entry["tokens_estimated"] is False and got.entry["hits"] > 0
    assert [f["code"] for f in got.entry["findings"]] == ["prefix-capacity-assumed"]


def test_prefix_caching_off_serves_nothing() -> None:
    flags = PrefixFlags(enabled=False, tokenizer=BYTES)
    got = replay(REQUESTS, PROMPTS, {"a": 64, "b": 32}, "qwen2.5-vl", flags, Fraction(99))
    assert got.covered == [set(), set(), set()] and got.entry["hits"] == 0 and got.entry["size_tokens"] == 0
    assert [f["code"] for f in got.entry["findings"]] == ["prefix-cache-off"]


def test_the_servers_cached_tokens_are_compared() -> None:
    pytest.importorskip("transformers")
    flags = PrefixFlags(tokenizer=BYTES, num_blocks=1000)
    served = replay(REQUESTS, PROMPTS, {"a": 64, "b": 32}, "qwen2.5-vl", flags, Fraction(99)).entry["hits"]
    told = [Prompt(p.messages, cached_tokens=c) for p, c in zip(PROMPTS, [0, served, 0], strict=True)]
    got = replay(REQUESTS, told, {"a": 64, "b": 32}, "qwen2.5-vl", flags, Fraction(99))
    assert [f["code"] for f in got.entry["findings"]] == ["prefix-replay-matches"]
    told[1] = Prompt(PROMPTS[1].messages, cached_tokens=served + 16)
    got = replay(REQUESTS, told, {"a": 64, "b": 32}, "qwen2.5-vl", flags, Fraction(99))
    assert got.entry["findings"][0]["code"] == "prefix-replay-differs"
    assert got.entry["findings"][0]["message"].startswith(f"request 2 of the log: the server served {served + 16}")


def test_a_launchs_prefix_flags_are_read_as_vllm_reads_them() -> None:
    from mmpool_cli.engines.vllm import args
    from mmpool_cli.engines.vllm.flags import table
    from mmpool_cli.engines.vllm.prefix import flags_of_launch

    argv = ["vllm", "serve", "m", "--num-gpu-blocks-override", "500", "--no-enable-prefix-caching", "--block-size", "32"]
    words, serve = args.launch_words([*argv, "--tokenizer", "tok"]) or ([], True)
    got = flags_of_launch(args.read(words, serve=serve, flags=table("0.34.0")), "/models/m")
    assert got == PrefixFlags(False, 500, 32, "tok", "/models/m")
    words, serve = args.launch_words(["vllm", "serve", "m"]) or ([], True)
    assert flags_of_launch(args.read(words, serve=serve, flags=table("0.34.0"))) == PrefixFlags()
