"""An SGLang release's command line and ``--config`` file, read the way SGLang reads them, with locations.

Only the flags that shape the feature pools are interpreted (``POOL_FLAGS``); every other option is
known by name (``flags.table(version)``, the chosen release's parser) so that abbreviations resolve
and typos are caught as argparse would, and its values are left alone. A config file becomes such
tokens in ``config_merge`` (``--key value``, YAML ``null`` → ``"None"``, lists expanded, store-true
only switched on), merged as ``config + before + after``, so the command line wins. Every token
keeps where it came from (``argv[3]`` or ``file:line:col``). Pure core: no typer, rich or torch.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal

from mmpool_cli.core.bounds import MAX_PARALLEL, MAX_WORKERS, count_problem, gpu_id_problem
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.sglang.flags import FlagTable, table

Kind = Literal["int", "float", "str", "store_true", "deprecated_store_true"]


@dataclass(frozen=True)
class Flag:
    """One pool-relevant SGLang flag: its names (the first is the main one), type and default."""

    dest: str
    names: tuple[str, ...]
    kind: Kind
    default: Any = None
    choices: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        """How argparse names the flag in its errors: ``--tp-size/--tensor-parallel-size``."""
        return "/".join(self.names)


POOL_FLAGS = (
    Flag("mm_feature_transport", ("--mm-feature-transport",), "str", None, ("cpu", "cuda_ipc", "cuda_vmm")),
    Flag("tokenizer_worker_num", ("--tokenizer-worker-num",), "int", 1),
    Flag("tp_size", ("--tp-size", "--tensor-parallel-size"), "int", 1),
    Flag("dp_size", ("--dp-size", "--data-parallel-size"), "int", 1),
    Flag("attn_dp_size", ("--attn-dp-size", "--attention-data-parallel-size"), "int", 1),
    Flag("enable_dp_attention", ("--enable-dp-attention",), "deprecated_store_true", False),
    Flag("dwdp_size", ("--dwdp-size",), "int", 1),
    Flag("pp_size", ("--pp-size", "--pipeline-parallel-size"), "int", 1),
    Flag("nnodes", ("--nnodes",), "int", 1),
    Flag("base_gpu_id", ("--base-gpu-id",), "int", 0),
    Flag("gpu_id_step", ("--gpu-id-step",), "int", 1),
    Flag("mem_fraction_static", ("--mem-fraction-static",), "float", None),
    Flag("max_running_requests", ("--max-running-requests",), "int", None),
    Flag("mm_preprocess_cache_size_mb", ("--mm-preprocess-cache-size-mb",), "int", None),
    Flag("encoder_only", ("--encoder-only",), "store_true", False),
    # 0.5.10-0.5.20 only; from 0.5.16 it means --mm-feature-transport cuda_ipc
    Flag("keep_mm_feature_on_device", ("--keep-mm-feature-on-device",), "store_true", False),
    Flag("language_only", ("--language-only",), "store_true", False),
    Flag("language_model_only", ("--language-model-only",), "store_true", False),
    Flag("disaggregation_mode", ("--disaggregation-mode",), "str", "null", ("null", "prefill", "decode")),
    Flag("model_path", ("--model-path", "--model"), "str", None),
)
BY_NAME = {name: flag for flag in POOL_FLAGS for name in flag.names}
BY_DEST = {flag.dest: flag for flag in POOL_FLAGS}
# The bounds mmpool plan puts on its own flags, applied to the same numbers in a launch or config.
COUNT_BOUNDS = {
    "tokenizer_worker_num": (MAX_WORKERS, "tokenizer workers"),
    "tp_size": (MAX_PARALLEL, "ranks"),
    "dp_size": (MAX_PARALLEL, "ranks"),
    "attn_dp_size": (MAX_PARALLEL, "ranks"),
}
# What to write instead of a flag that the chosen release lacks, where there is a replacement.
INSTEAD = {
    "--keep-mm-feature-on-device": "write --mm-feature-transport cuda_ipc instead",
    "--attn-dp-size": "write --dp-size N --enable-dp-attention instead",
    "--attention-data-parallel-size": "write --dp-size N --enable-dp-attention instead",
}
ENV_ONLY_PREFIXES = ("SGLANG_", "SGL_")
ENV_ONLY_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES")
MAX_INT = 2**63 - 1
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class Token:
    """One argv word and where it came from."""

    text: str
    origin: str


@dataclass(frozen=True)
class Setting:
    """A pool flag's value after parsing, and where the winning occurrence was written."""

    value: Any
    origin: str


@dataclass
class Reading:
    """What SGLang's parser would make of the pool flags, plus every problem it or mmpool sees."""

    settings: dict[str, Setting] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    flags: FlagTable = field(default_factory=table)  # the release whose parser is mirrored
    help_at: Token | None = None  # -h/--help: argparse prints the help and exits 0 there, reading no further
    # every other option given, by its full name: the last occurrence's value as written (its next word, or
    # the text after '='; None for a word that takes none), uninterpreted (``check --from`` reads a few)
    others: dict[str, Setting] = field(default_factory=dict)

    def get(self, dest: str) -> Any:
        """The flag's value, or SGLang's default when it was not given."""
        setting = self.settings.get(dest)
        return BY_DEST[dest].default if setting is None else setting.value

    def given(self, dest: str) -> bool:
        """Whether the flag was given at all."""
        return dest in self.settings

    def add(self, severity: Severity, code: str, message: str, location: str | None) -> None:
        self.findings.append(Finding(severity, code, message, location))


def cli_tokens(argv: list[str], start: int = 0) -> list[Token]:
    """Command-line words located as ``argv[i]`` (``i`` counts from the launch command's first word)."""
    return [Token(text, f"argv[{start + i}]") for i, text in enumerate(argv)]


def _looks_like_option(text: str) -> bool:
    return text.startswith("-") and text != "-" and not _NEGATIVE_NUMBER.match(text)


def resolve_option(text: str, flags: FlagTable | None = None) -> tuple[str | None, str | None, list[str]]:
    """argparse's lookup of an option word: ``(option, explicit value, ambiguous matches)``.

    Exact names win; otherwise a unique prefix is accepted (``allow_abbrev=True``), the text after
    ``=`` being the value. Python 3.11's argparse calls a prefix of two names ambiguous even when
    both belong to one flag. ``flags``: the release's options (default: the newest's).
    """
    flags = flags or table()
    known = flags.options
    if text in known:
        return text, None, []
    name, eq, value = text.partition("=")
    explicit = value if eq else None
    if name in known:
        return name, explicit, []
    if not text.startswith("--"):
        return None, None, []
    ordered = flags.sorted_long
    matches, i = [], bisect.bisect_left(ordered, name)
    while i < len(ordered) and ordered[i].startswith(name):
        matches.append(ordered[i])
        i += 1
    if len(matches) == 1:
        return matches[0], explicit, []
    return None, None, matches


def read(tokens: list[Token], reading: Reading | None = None) -> Reading:
    """Parse words as the release's argparse parser would (``reading.flags``), for the pool flags.

    Every problem is a finding.
    """
    reading = reading or Reading()
    i, loose = 0, True  # loose: positional words may belong to a non-pool option before them
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok.text == "--":
            break
        if not _looks_like_option(tok.text):
            if not loose:
                reading.add(
                    Severity.error,
                    "unrecognized-argument",
                    f"SGLang refuses this: 'unrecognized arguments: {shorten(tok.text)}'; "
                    "a pool flag takes exactly one value",
                    tok.origin,
                )
            continue
        option, explicit, ambiguous = resolve_option(tok.text, reading.flags)
        if option is None:
            loose = True
            _unknown(reading, tok, ambiguous)
            continue
        if option in ("-h", "--help") and explicit is None:
            reading.help_at = tok
            break
        flag = BY_NAME.get(option)
        if option == "--config":
            reading.add(
                Severity.error,
                "config-not-merged",
                f"SGLang merges a config file only after the exact word --config: {excerpt(tok.text)} "
                "is accepted by argparse and the file is silently ignored; write '--config FILE' as two words",
                tok.origin,
            )
        if flag is None:
            loose = True
            following = tokens[i].text if i < len(tokens) and not _looks_like_option(tokens[i].text) else None
            reading.others[option] = Setting(following if explicit is None else explicit, tok.origin)
            continue
        loose = False
        if option != tok.text.partition("=")[0]:
            reading.add(
                Severity.info,
                "abbreviated-option",
                f"{shorten(tok.text.partition('=')[0])} is read as {option} (argparse accepts unique prefixes); "
                "spell it out, a future SGLang flag could make it ambiguous",
                tok.origin,
            )
        if flag.kind in ("store_true", "deprecated_store_true"):
            if explicit is not None:
                reading.add(
                    Severity.error,
                    "flag-bad-value",
                    f"SGLang refuses this: 'argument {flag.label}: ignored explicit argument {excerpt(explicit)}'; "
                    f"write {flag.names[0]} alone",
                    tok.origin,
                )
                continue
            reading.settings[flag.dest] = Setting(True, tok.origin)
            continue
        if explicit is None:
            if i >= len(tokens) or _looks_like_option(tokens[i].text):
                reading.add(
                    Severity.error,
                    "flag-bad-value",
                    f"SGLang refuses this: 'argument {flag.label}: expected one argument'",
                    tok.origin,
                )
                continue
            value_tok = tokens[i]
            i += 1
        else:
            value_tok = Token(explicit, tok.origin)
        _store(reading, flag, tok, value_tok)
    return reading


def _unknown(reading: Reading, tok: Token, ambiguous: list[str]) -> None:
    name = tok.text.partition("=")[0]
    if ambiguous:
        reading.add(
            Severity.error,
            "ambiguous-option",
            f"SGLang refuses this: 'ambiguous option: {shorten(tok.text)} could match {_some(ambiguous)}'; "
            "write the full flag name",
            tok.origin,
        )
    elif " " in tok.text:
        return
    elif (elsewhere := reading.flags.missing(name)) is not None:
        fix = INSTEAD.get(name, "remove it or pick the release you run with --sglang-version")
        reading.add(
            Severity.error,
            "flag-not-in-release",
            f"SGLang {reading.flags.version} has no {name}: it {elsewhere}, and this release fails with "
            f"'unrecognized arguments: {shorten(tok.text)}'; {fix}",
            tok.origin,
        )
    else:
        reading.add(
            Severity.error,
            "unrecognized-argument",
            f"SGLang {reading.flags.version} has no option {shorten(name)}: it fails with "
            f"'unrecognized arguments: {shorten(tok.text)}'{_dash_fix(name, tok.origin, reading.flags)}",
            tok.origin,
        )


def _is_dash(ch: str) -> bool:
    return ch != "-" and (unicodedata.category(ch) == "Pd" or ch == "\u2212")  # U+2212 MINUS SIGN is a math sign


def _dash_fix(name: str, origin: str, flags: FlagTable) -> str:
    """The fix for an option spelled with a dash that is not ASCII's '-' (U+2010 from a word processor)."""
    odd = next((ch for ch in name if _is_dash(ch)), None)
    if odd is None:
        return ""
    ascii_name = "".join("-" if _is_dash(ch) else ch for ch in name)
    option = resolve_option(ascii_name, flags)[0]
    if option is None:
        return ""
    fix = ascii_name if origin.startswith("argv[") else ascii_name.removeprefix("--")
    return (
        f"; it holds U+{ord(odd):04X} ({unicodedata.name(odd, 'a dash')}) where SGLang needs the ASCII "
        f"hyphen-minus: write '{fix}'"
    )


def _some(names: list[str], shown: int = 6) -> str:
    more = f", … ({len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _store(reading: Reading, flag: Flag, tok: Token, value_tok: Token) -> None:
    text = value_tok.text
    hint = ""
    if text == "None" and ":" in value_tok.origin:
        hint = " (a YAML null becomes the text 'None' in SGLang's config merge; remove the key instead)"
    try:
        if flag.kind == "int":
            value: Any = int(text)
        elif flag.kind == "float":
            value = float(text)
        else:
            value = text
    except ValueError:
        reading.add(
            Severity.error,
            "flag-bad-value",
            f"SGLang refuses this: 'argument {flag.label}: invalid {flag.kind} value: {excerpt(text)}'{hint}",
            value_tok.origin,
        )
        return
    if isinstance(value, int) and abs(value) > MAX_INT:
        reading.add(
            Severity.error,
            "flag-bad-value",
            f"{flag.label} {shorten(text)} (a {len(text):,}-character number): argparse's int() reads it, but it "
            "is beyond the 64-bit integers torch and CUDA use, and SGLang cannot run with it; use a realistic value",
            value_tok.origin,
        )
        return
    problem = count_problem(value, *COUNT_BOUNDS[flag.dest]) if flag.dest in COUNT_BOUNDS else None
    if problem:
        reading.add(
            Severity.error, "flag-bad-value", f"{flag.label} {problem}: no deployment has more", value_tok.origin
        )
        return
    if flag.dest == "base_gpu_id" and (problem := gpu_id_problem(value)):
        reading.add(Severity.error, "flag-bad-value", f"{flag.label} {problem}", value_tok.origin)
        return
    choices = flag.choices and (reading.flags.choices(flag.names[0]) or flag.choices)
    if choices and value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        reading.add(
            Severity.error,
            "flag-bad-value",
            f"SGLang refuses this: 'argument {flag.label}: invalid choice: {excerpt(text)} "
            f"(choose from {allowed})'{hint}",
            value_tok.origin,
        )
        return
    reading.settings[flag.dest] = Setting(value, value_tok.origin)
