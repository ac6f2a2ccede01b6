"""argparse's pass over a vLLM launch's words, after ``FlexibleArgumentParser`` has rewritten them.

Exact option strings, unique prefixes of ``--`` ones, one value each. Only the flags vLLM's
multimodal memory depends on (``MM_DESTS``) are interpreted, each converted as its flag's type
does; every other option is known by name from the release's own parser (``flags.table``), so that
abbreviations resolve and typos are caught as argparse would.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

from mmpool_cli.core.bounds import (
    LARGEST_GPU_HBM_BYTES,
    LARGEST_HOST_MEMORY_BYTES,
    MAX_PARALLEL,
    count_problem,
    largest_gpu,
    largest_host,
)
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.vllm import gib
from mmpool_cli.engines.vllm.flags import FlagTable, Option
from mmpool_cli.engines.vllm.reading import Reading, Setting, Token

MAX_INT = 2**63 - 1
# the dests mmpool interprets, and how vLLM converts each
MM_DESTS: dict[str, str] = {
    "model": "str",
    "model_tag": "str",
    "mm_processor_cache_gb": "gib",
    "mm_processor_cache_type": "choice",
    "mm_ipc_gpu_memory_gb": "gib",
    "mm_shm_cache_max_object_size_mb": "int",
    "limit_mm_per_prompt": "json",
    "media_io_kwargs": "json",
    "mm_processor_kwargs": "json",
    "video_pruning_rate": "float",
    "max_num_batched_tokens": "human_int",
    "max_model_len": "human_int_or_auto",
    "max_num_seqs": "int",
    "data_parallel_size": "int",
    "data_parallel_size_local": "int",
    "data_parallel_rank": "int",
    "data_parallel_start_rank": "int",
    "data_parallel_external_lb": "bool",
    "data_parallel_hybrid_lb": "bool",
    "data_parallel_multi_port_external_lb": "bool",
    "api_server_count": "int",
    "headless": "bool",
    "tensor_parallel_size": "int",
    "performance_mode": "choice",
    "enable_chunked_prefill": "bool",
    "disable_chunked_mm_input": "bool",
    "kv_cache_dtype": "choice",
    "block_size": "int",
    "num_gpu_blocks_override": "int",  # the KV blocks (tune, check --from: the prefix cache's capacity)
    "tokenizer": "str",
    "dtype": "choice",
    "mm_device_do_normalize": "bool",
}
# The bounds the SGLang side applies (core.bounds): ranks count GPUs, a GPU pool lives on one GPU,
# and one host cache lives in one host's RAM. Beyond them a plan would describe no deployment.
_RANKS = ("data_parallel_size", "data_parallel_size_local", "data_parallel_rank", "data_parallel_start_rank")
COUNT_BOUNDS = dict.fromkeys((*_RANKS, "tensor_parallel_size"), (MAX_PARALLEL, "ranks"))
COUNT_BOUNDS["api_server_count"] = (MAX_PARALLEL, "API servers")
GIB_BOUNDS = {
    "mm_processor_cache_gb": (LARGEST_HOST_MEMORY_BYTES, "one host has", largest_host),
    "mm_ipc_gpu_memory_gb": (LARGEST_GPU_HBM_BYTES, "any GPU has", largest_gpu),
}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def human_int(text: str) -> int:
    """vLLM's ``human_readable_int``: ``16k`` is 16 000, ``16K`` 16 384, ``1.5k`` 1 500.

    >>> human_int("16k"), human_int("16K"), human_int("25.6k")
    (16000, 16384, 25600)

    Raises:
        ValueError: what vLLM refuses (decimals with a binary suffix, anything else ``int`` refuses).
    """
    value = text.strip()
    m = _HUMAN.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in "kmgt":
            # int(float(number) * mult): the float product, truncated
            from fractions import Fraction

            product = float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix]
            return int(Fraction(product))
        if "." in number:
            raise ValueError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            )
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(value)


def _looks_like_option(text: str) -> bool:
    return text.startswith("-") and text != "-" and not _NEGATIVE_NUMBER.match(text)


def resolve(text: str, flags: FlagTable) -> tuple[Option | None, str | None, str | None, list[str]]:
    """argparse's look-up of an option word: ``(option, its string, explicit value, ambiguous matches)``."""
    if text in flags.by_string:
        return flags.by_string[text], text, None, []
    name, eq, value = text.partition("=")
    explicit = value if eq else None
    if name in flags.by_string:
        return flags.by_string[name], name, explicit, []
    hidden = flags.by_string.get("--" + name[5:]) if name.startswith("--no-") else None
    if hidden is not None and hidden.action == "EnableDisableAction":
        return hidden, name, explicit, []  # --no-enable-x / --no-disable-x, kept out of --help
    if not name.startswith("--"):
        return None, None, None, []
    ordered = flags.sorted_long
    matches, i = [], bisect.bisect_left(ordered, name)
    while i < len(ordered) and ordered[i].startswith(name):
        matches.append(ordered[i])
        i += 1
    if len(matches) == 1:
        return flags.by_string[matches[0]], matches[0], explicit, []
    return None, None, None, matches


def parse(reading: Reading, words: list[Token]) -> None:
    """Each word as argparse takes it: interpreted flags' values into ``reading.settings``, problems as findings."""
    positional_seen = False
    i = 0
    while i < len(words):
        tok = words[i]
        i += 1
        if tok.text == "--":
            break
        if not _looks_like_option(tok.text):
            if not positional_seen:
                positional_seen = True
                reading.settings["model_tag"] = Setting(tok.text, tok.origin)
            else:
                _refuse_unrecognized(reading, tok)
            continue
        option, string, explicit, ambiguous = resolve(tok.text, reading.flags)
        if option is None:
            _unknown(reading, tok, ambiguous)
            continue
        assert string is not None
        if string != tok.text.partition("=")[0] and string.startswith("--"):
            reading.add(
                Severity.info,
                "abbreviated-option",
                f"{shorten(tok.text.partition('=')[0])} is read as {string} (argparse accepts unique prefixes); "
                "spell it out, a future vLLM flag could make it ambiguous",
                tok.origin,
            )
        if not option.takes_value:
            if explicit is not None:
                reading.add(
                    Severity.error,
                    "flag-bad-value",
                    f"vLLM refuses this: 'argument {option.label}: ignored explicit argument {excerpt(explicit)}'",
                    tok.origin,
                )
                continue
            on = not _negative(option, string)
            reading.settings[option.dest] = Setting(on, tok.origin)
            continue
        values: list[Token] = []
        if explicit is not None:
            values.append(Token(explicit, tok.origin))
        elif option.nargs in ("+", "*"):
            while i < len(words) and not _looks_like_option(words[i].text):
                values.append(words[i])
                i += 1
        elif i < len(words) and not _looks_like_option(words[i].text):
            values.append(words[i])
            i += 1
        if not values and option.nargs not in ("*", "?"):
            reading.add(
                Severity.error,
                "flag-bad-value",
                f"vLLM refuses this: 'argument {option.label}: expected one argument'",
                tok.origin,
            )
            continue
        if option.dest in MM_DESTS and values:
            _store(reading, option, string, values[0])


def _negative(option: Option, string: str) -> bool:
    """Whether an on/off option string switches off (``EnableDisableAction``'s negative strings)."""
    if option.action == "_StoreTrueAction":
        return False
    first = option.strings[0]
    inverse = (string.startswith("--disable-") and first.startswith("--enable-")) or (
        string.startswith("--enable-") and first.startswith("--disable-")
    )
    return string.startswith("--no-") or inverse


def _refuse_unrecognized(reading: Reading, tok: Token) -> None:
    reading.add(
        Severity.error,
        "unrecognized-argument",
        f"vLLM fails with 'unrecognized arguments: {shorten(tok.text)}': the model is already given and every flag "
        "takes one value",
        tok.origin,
    )


def _unknown(reading: Reading, tok: Token, ambiguous: list[str]) -> None:
    name = tok.text.partition("=")[0]
    if ambiguous:
        shown = ", ".join(ambiguous[:6]) + (f", … ({len(ambiguous) - 6} more)" if len(ambiguous) > 6 else "")
        reading.add(
            Severity.error,
            "ambiguous-option",
            f"vLLM refuses this: 'ambiguous option: {shorten(tok.text)} could match {shown}'; write the full flag name",
            tok.origin,
        )
    elif (elsewhere := reading.flags.missing(name)) is not None:
        reading.add(
            Severity.error,
            "flag-not-in-release",
            f"vLLM {reading.flags.version} has no {name}: it {elsewhere}, and this release fails with "
            f"'unrecognized arguments: {shorten(tok.text)}'; remove it or pick the release you run with --vllm-version",
            tok.origin,
        )
    else:
        reading.add(
            Severity.error,
            "unrecognized-argument",
            f"vLLM {reading.flags.version} has no option {shorten(name)}: it fails with "
            f"'unrecognized arguments: {shorten(tok.text)}'",
            tok.origin,
        )


def _bad(reading: Reading, option: Option, message: str, origin: str) -> None:
    reading.add(Severity.error, "flag-bad-value", f"vLLM refuses this: 'argument {option.label}: {message}'", origin)


def _store(reading: Reading, option: Option, string: str, value_tok: Token) -> None:
    kind = MM_DESTS[option.dest]
    text = value_tok.text
    value: Any
    if kind == "gib":
        try:
            parsed = gib.parse(string, text)
        except gib.GibError as e:
            reading.add(
                Severity.error, "flag-bad-value" if e.by_parser else "vllm-value-refused", str(e), value_tok.origin
            )
            return
        limit, holder, name = GIB_BOUNDS[option.dest]
        if parsed.bytes > limit:
            reading.add(
                Severity.error,
                "flag-bad-value",
                f"{option.strings[0]} {shorten(text)}: more GiB than {holder} ({name()}); use a realistic value",
                value_tok.origin,
            )
            return
        value = parsed
    elif kind in ("int", "human_int", "human_int_or_auto"):
        try:
            if kind == "int":
                value = int(text)
            elif kind == "human_int_or_auto" and (text.strip() == "-1" or text.strip().lower() == "auto"):
                value = -1
            else:
                value = human_int(text)
        except ValueError as e:
            # argparse: an ArgumentTypeError's own text, else "invalid <type's __name__> value"
            typename = (option.type or "int").rpartition(".")[2]
            message = str(e) if str(e).startswith("Decimals") else f"invalid {typename} value: {excerpt(text)}"
            _bad(reading, option, message, value_tok.origin)
            return
        if abs(value) > MAX_INT:
            reading.add(
                Severity.error,
                "flag-bad-value",
                f"{option.strings[0]} {shorten(text)}: beyond the 64-bit integers vLLM can run with; "
                "use a realistic value",
                value_tok.origin,
            )
            return
        problem = count_problem(value, *COUNT_BOUNDS[option.dest]) if option.dest in COUNT_BOUNDS else None
        if problem:
            message = f"{option.strings[0]} {problem}: no deployment has more"
            reading.add(Severity.error, "flag-bad-value", message, value_tok.origin)
            return
    elif kind == "float":
        try:
            value = float(text)
        except ValueError:
            _bad(reading, option, f"Value {excerpt(text)} cannot be converted to <class 'float'>.", value_tok.origin)
            return
    elif kind == "json":
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            _bad(reading, option, f"Value {excerpt(text)} cannot be converted to <function loads>.", value_tok.origin)
            return
    else:
        value = text
    if option.choices and text not in option.choices:
        allowed = ", ".join(repr(c) for c in option.choices)
        _bad(reading, option, f"invalid choice: {excerpt(text)} (choose from {allowed})", value_tok.origin)
        return
    reading.settings[option.dest] = Setting(value, value_tok.origin)
