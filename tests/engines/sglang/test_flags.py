"""The generated flag tables against what each release's real parser did with recorded argvs.

``tests/data/sglang_parser_probes.json`` is written by ``scripts/gen_sglang_tables.py``: every option
string of every release from 0.5.10 to 0.5.23 (and a few prefixes and combinations) run through
each wheel's own ``ServerArgs.add_cli_args(ArgumentParser())``, with what argparse refused.
mmpool must recognise, refuse and call ambiguous exactly the same options, without network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang import flags, versions
from mmpool_cli.engines.sglang.args import Reading, cli_tokens, read

PROBES = json.loads((Path(__file__).parents[3] / "tests" / "data" / "sglang_parser_probes.json").read_text())
UNKNOWN = {"unrecognized-argument", "flag-not-in-release"}


def _real(message: str | None) -> str:
    if message is None:
        return "accepted"
    if message.startswith("unrecognized arguments"):
        return "unknown"
    if message.startswith("ambiguous option"):
        return "ambiguous"
    return "bad value"  # a type or choice error: the option itself was recognised


def _mmpool(version: str, argv: list[str]) -> str:
    codes = {f.code for f in read(cli_tokens(argv), Reading(flags=flags.table(version))).findings}
    if codes & UNKNOWN:
        return "unknown"
    if "ambiguous-option" in codes:
        return "ambiguous"
    return "accepted or bad value"


def test_the_fixture_covers_every_release() -> None:
    assert PROBES["versions"] == list(versions.known())
    assert len(PROBES["probes"]) > 600


@pytest.mark.parametrize("version", versions.known())
def test_recognition_matches_the_real_parser(version: str) -> None:
    mismatches = []
    for probe in PROBES["probes"]:
        real = _real(probe["refused"].get(version))
        ours = _mmpool(version, probe["argv"])
        if (real in ("accepted", "bad value")) != (ours == "accepted or bad value") or (
            real in ("unknown", "ambiguous") and real != ours
        ):
            mismatches.append((probe["argv"][2:], real, ours))
    assert mismatches == []


def test_the_recorded_drift_is_real() -> None:
    by_argv = {tuple(p["argv"][2:]): p["refused"] for p in PROBES["probes"]}
    keep = by_argv[("--keep-mm-feature-on-device",)]
    assert "0.5.20" not in keep and keep["0.5.21"] == "unrecognized arguments: --keep-mm-feature-on-device"
    attn = by_argv[("--attn-dp-size", "1")]
    assert "0.5.22" not in attn and attn["0.5.21"].startswith("unrecognized arguments")
    transport = by_argv[("--mm-feature-transport", "cpu")]
    assert transport["0.5.15.post1"].startswith("unrecognized arguments") and "0.5.16" not in transport


def test_missing_flags_name_the_releases_that_have_them() -> None:
    newest = flags.table("0.5.23")
    assert newest.missing("--keep-mm-feature-on-device") == "was removed after 0.5.20 (SGLang 0.5.10 … 0.5.20 has it)"
    assert flags.table("0.5.20").missing("--attn-dp-size") == "is new in 0.5.22 (SGLang 0.5.22 … 0.5.23 has it)"
    assert newest.missing("--no-such-flag") is None


def test_a_removed_flag_is_an_error_with_its_range_and_replacement() -> None:
    reading = read(cli_tokens(["--keep-mm-feature-on-device"]), Reading(flags=flags.table("0.5.23")))
    [finding] = reading.findings
    assert finding.code == "flag-not-in-release"
    assert "SGLang 0.5.23 has no --keep-mm-feature-on-device: it was removed after 0.5.20" in finding.message
    assert "write --mm-feature-transport cuda_ipc instead" in finding.message


def test_choices_follow_the_release() -> None:
    old = read(cli_tokens(["--mm-feature-transport", "cuda_vmm"]), Reading(flags=flags.table("0.5.17")))
    assert [f.code for f in old.findings] == ["flag-bad-value"]
    assert "choose from 'cpu', 'cuda_ipc'" in old.findings[0].message
    new = read(cli_tokens(["--mm-feature-transport", "cuda_vmm"]), Reading(flags=flags.table("0.5.18")))
    assert new.findings == [] and new.get("mm_feature_transport") == "cuda_vmm"


def test_config_keys_refused_per_release() -> None:
    # 0.5.22 and earlier key the refused actions by dest only; 0.5.23 by every long spelling
    assert flags.table("0.5.23").config_unsupported["no_mm_enable_dp_encoder"] == "BooleanOptionalAction"
    assert flags.table("0.5.23").config_unsupported["enable_dp_attention"] == "DeprecatedStoreTrueAction"
    assert "no_mm_enable_dp_encoder" not in flags.table("0.5.22").config_unsupported


def test_flags_json_rows_carry_first_last_and_change_points() -> None:
    row = flags.row("--mm-enable-dp-encoder")
    assert row is not None
    assert row["spans"][-1][1] == "0.5.23"
    actions = [action for _, action in row["action"]]
    assert actions[-1] == "BooleanOptionalAction" and len(actions) >= 2
