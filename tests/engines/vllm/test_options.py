"""argparse's pass: options known by the release, values converted as each flag's type does."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import args, options, versions
from mmpool_cli.engines.vllm.flags import table
from mmpool_cli.engines.vllm.reading import Token


def _words(argv):
    return [Token(t, f"argv[{i}]") for i, t in enumerate(argv)]


def test_a_flag_of_another_release_names_the_releases_that_have_it():
    old = versions.known()[0]
    newer_only = next(
        s for s in table().by_string if s.startswith("--") and s not in table(old).by_string and len(s) > 8
    )
    reading = args.read(_words(["m", newer_only, "1"]), serve=False, flags=table(old))
    f = next(f for f in reading.findings if f.code == "flag-not-in-release")
    assert f.location == "argv[1]" and f"vLLM {old} has no {newer_only}" in f.message and "is new in" in f.message


def test_non_number_cache_gb_is_a_located_error():
    w, _ = args.launch_words(["vllm", "serve", "m", "--mm-processor-cache-gb", "4GB"])
    (f,) = args.read(w).findings
    assert (f.code, f.location) == ("flag-bad-value", "argv[4]") and "invalid float value: '4GB'" in f.message


def test_negative_values_are_located_errors():
    w, _ = args.launch_words(["vllm", "serve", "m", "--mm-ipc-gpu-memory-gb=-1"])
    (f,) = args.read(w).findings
    assert f.location == "argv[3]" and "greater than or equal to 0" in f.message


def test_human_readable_ints():
    assert options.human_int("16k") == 16_000 and options.human_int("16K") == 16_384
    with pytest.raises(ValueError, match="Decimals are not allowed"):
        options.human_int("1.5K")
