"""Launch words read as vLLM's parser reads them, replayed against every release's own parser."""

from __future__ import annotations

import pytest

from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.vllm import args, options, versions
from mmpool_cli.engines.vllm.flags import table
from mmpool_cli.engines.vllm.gib import GibValue
from mmpool_cli.engines.vllm.reading import Token


def _plain(value):
    if isinstance(value, GibValue):
        return repr(value.value)
    if isinstance(value, float):
        return repr(value)
    return value


def _words(argv):
    return [Token(t, f"argv[{i}]") for i, t in enumerate(argv)]


def _beyond_bounds(f) -> bool:
    return f.code == "flag-bad-value" and f.message.endswith(("use a realistic value", "no deployment has more"))


@pytest.mark.parametrize("version", versions.known())
def test_every_probe_is_refused_or_read_as_the_release_did(probes, version):
    for probe in probes[1:]:
        outcome = next(o for o in probe["outcomes"] if version in o["releases"])
        reading = args.read(_words(probe["argv"]), serve=False, flags=table(version))
        errors = [f for f in reading.findings if f.severity is Severity.error]
        if "error" in outcome:
            structural = outcome["error"].startswith(("unrecognized", "ambiguous")) or outcome["error"].endswith(
                "expected one argument"
            )
            if not errors and not structural:
                # a value refusal of a flag mmpool does not interpret: its value is left alone
                option = options.resolve(probe["argv"][1], table(version))[0]
                assert option is not None and option.dest not in options.MM_DESTS, (probe["argv"], version)
                continue
            assert errors, (probe["argv"], version, outcome)
            assert all(f.location and f.location.startswith("argv[") for f in errors)
        else:
            # vLLM parses these and refuses them at start-up (its config's ge=0, int() of an infinity), or
            # they are beyond mmpool's bounds on any deployment (options.COUNT_BOUNDS, GIB_BOUNDS)
            assert all(f.code == "vllm-value-refused" or _beyond_bounds(f) for f in errors), (
                probe["argv"],
                version,
                errors,
            )
            if errors:
                continue
            for dest, want in outcome["read"].items():
                if dest in options.MM_DESTS:
                    assert _plain(reading.get(dest)) == want, (probe["argv"], version, dest)


def test_vllm_serve_and_the_api_server_entry_point():
    w, serve = args.launch_words(["vllm", "serve", "Qwen/Qwen2.5-VL-7B-Instruct", "-dp", "4"])
    assert serve and [t.origin for t in w] == ["argv[2]", "argv[3]", "argv[4]"]
    w, serve = args.launch_words(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    assert not serve and w[0].origin == "argv[3]"
    assert args.launch_words(["sglang", "serve", "m"]) is None


def test_serve_moves_the_model_flag_to_the_front():
    w, _ = args.launch_words(["vllm", "serve", "-dp", "4", "--model", "m"])
    reading = args.read(w)
    assert reading.get("model_tag") == "m" and reading.get("data_parallel_size") == 4
    assert reading.origin("data_parallel_size") == "argv[3]"


def test_underscores_and_dotted_keys_as_vllm_merges_them():
    w, _ = args.launch_words(["vllm", "serve", "m", "--mm_processor_cache_gb", "2", "--limit-mm-per-prompt.video", "0"])
    reading = args.read(w)
    assert reading.get("mm_processor_cache_gb").bytes == 2 << 30
    assert reading.get("limit_mm_per_prompt") == {"video": 0}


def test_a_config_file_alone_is_checked_key_by_key(tmp_path):
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("model: Qwen/Qwen2.5-VL-7B-Instruct\nmm-processor-cache-gb: -2\nno-such-key: 1\n")
    reading = args.read_config_file(str(cfg), table("0.34.0"))
    got = sorted((f.code, f.location) for f in reading.findings)
    assert got == [("unrecognized-argument", f"{cfg}:3:1"), ("vllm-value-refused", f"{cfg}:2:24")]
    assert reading.get("model") == "Qwen/Qwen2.5-VL-7B-Instruct"


def test_deep_or_huge_inputs_are_bounded_findings():
    deep = "--limit-mm-per-prompt" + ".a" * 40
    reading = args.read(_words(["m", deep, "1"]), serve=False)
    assert [f.code for f in reading.findings] == ["flag-bad-value"]
    nested = "[" * 100_000 + "]" * 100_000
    reading = args.read(_words(["m", "--limit-mm-per-prompt", nested]), serve=False)
    assert [f.code for f in reading.findings] == ["flag-bad-value"]
    reading = args.read(_words(["m", "--limit-mm-per-prompt.video", nested]), serve=False)
    assert all(f.severity is not Severity.error or f.code == "flag-bad-value" for f in reading.findings)
