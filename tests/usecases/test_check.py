"""`check --from`: the launch's row over the traffic held to --max-fallback and --min-prefix-hit."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mmpool_cli.core.findings import Severity
from mmpool_cli.errors import MmpoolError
from mmpool_cli.tune.split import Measures, Row
from mmpool_cli.usecases.check import TRAFFIC, TrafficBounds, prefix_hit, traffic_findings


def _row(prompt: int = 1000, served: int = 300, fallback: int = 2) -> Row:
    m = Measures(
        requests=4,
        prompt_tokens=prompt,
        prefix_served_tokens=served,
        encoder_tokens=640,
        fallback_items=fallback,
        fallback_bytes=fallback * 4096,
        kv_tokens=2048,
        batch=3,
    )
    return Row({"kv": 2048, "pool": 64, "embedding": 100}, {}, m, ())


def _codes(found) -> list[tuple[Severity, str]]:
    return [(f.severity, f.code) for f in found]


def test_the_measures_are_said_once_and_nothing_fails_without_bounds() -> None:
    found = traffic_findings(_row(), "chats.jsonl", TrafficBounds())
    assert _codes(found) == [(Severity.info, "tune-measures")]
    said = found[0].message
    assert found[0].location == TRAFFIC
    assert "(kv 2,048, pool 64, embedding 100)" in said
    assert "2 features fall back" in said and "300 of 1,000 prompt tokens (30.00%)" in said
    assert "640 encoder tokens" in said and "2,048 KV tokens" in said


@pytest.mark.parametrize(("bound", "fails"), [(0, True), (1, True), (2, False), (50, False)])
def test_max_fallback_is_the_most_features_that_may_fall_back(bound: int, fails: bool) -> None:
    found = traffic_findings(_row(fallback=2), "f", TrafficBounds(max_fallback=bound))
    assert ((Severity.error, "tune-fallback-over") in _codes(found)) is fails
    if fails:
        assert f"more than --max-fallback {bound}" in found[-1].message


@pytest.mark.parametrize(
    ("pct", "fails"), [(Fraction(30), False), (Fraction(29), False), (Fraction(3001, 100), True), (Fraction(100), True)]
)
def test_min_prefix_hit_is_exact_at_the_boundary(pct: Fraction, fails: bool) -> None:
    found = traffic_findings(_row(served=300), "f", TrafficBounds(min_prefix_hit=pct))
    assert ((Severity.error, "tune-prefix-hit-under") in _codes(found)) is fails


def test_a_share_is_floored_when_shown_so_it_never_reads_as_the_bound_it_misses() -> None:
    row = _row(prompt=10_000, served=9_999)
    assert prefix_hit(row) == Fraction(9999, 100)
    found = traffic_findings(row, "f", TrafficBounds(min_prefix_hit=Fraction(100)))
    assert "(99.99%) at the launch's KV capacity (2,048 tokens), below --min-prefix-hit 100%" in found[-1].message
    found = traffic_findings(_row(served=300), "f", TrafficBounds(min_prefix_hit=Fraction(305, 10)))
    assert "below --min-prefix-hit 30.5%" in found[-1].message


def test_a_prefix_bound_over_traffic_without_prompts_is_refused() -> None:
    with pytest.raises(MmpoolError, match="carries no prompt text"):
        traffic_findings(_row(prompt=0, served=0), "trace.jsonl", TrafficBounds(min_prefix_hit=Fraction(1)))
    # without that bound the measures are still said
    assert "no prompt tokens" in traffic_findings(_row(prompt=0, served=0), "t", TrafficBounds())[0].message


def test_one_rule_for_both_engines_said_in_each_engines_words() -> None:
    bounds = TrafficBounds(max_fallback=0, min_prefix_hit=Fraction(50))
    sglang = traffic_findings(_row(), "chats.jsonl", bounds)
    vllm = traffic_findings(_row(), ["a.jsonl", "my bodies.jsonl"], bounds, engine_name="vllm")
    assert (
        _codes(sglang)
        == _codes(vllm)
        == [
            (Severity.info, "tune-measures"),
            (Severity.error, "tune-fallback-over"),
            (Severity.error, "tune-prefix-hit-under"),
        ]
    )
    assert "2 features fall back to the CPU path" in sglang[0].message
    assert "over a.jsonl, my bodies.jsonl (4 requests)" in vllm[0].message
    assert "2 videos refused by the GPU decode pool (each fails its request)" in vllm[0].message
    assert vllm[1].message.startswith("2 videos of a.jsonl, my bodies.jsonl are refused by the GPU decode pool")
    # the tune command to run names each file with its own --from, quoted for a shell
    tune = "'mmpool tune --engine vllm --from a.jsonl --from \"my bodies.jsonl\"'"
    assert tune in vllm[1].message and tune in vllm[2].message
    assert "'mmpool tune --from chats.jsonl' gives a split where fewer do" in sglang[1].message


def test_a_file_name_the_shell_would_split_is_said_as_the_shell_reads_it_back() -> None:
    import subprocess

    name = 'my "$HOME" `x` \\.jsonl'
    said = traffic_findings(_row(), [name], TrafficBounds(max_fallback=0))[1].message
    command = said.split("; '", 1)[1].rsplit("' gives", 1)[0]
    words = command.split(" --from ", 1)[1]
    echoed = subprocess.run(["sh", "-c", f"printf '%s' {words}"], capture_output=True, text=True, check=True)
    assert echoed.stdout == name
