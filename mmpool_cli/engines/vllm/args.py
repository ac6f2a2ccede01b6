"""A ``vllm serve`` launch read the way vLLM's ``FlexibleArgumentParser`` reads it, with locations.

The steps of ``FlexibleArgumentParser.parse_args`` (``utils/argparse_utils.py``), in order: under
``vllm serve`` a ``--model X`` moves to the front; the exact word ``--config FILE`` splices the
YAML file's keys in after the model (``--key value``; ``true`` → ``--key``, ``false`` →
``--no-key`` where the flag has it, else nothing; lists expanded; mappings as JSON); ``--`` names
get dashes for underscores up to their first ``.``; ``--flag.key value`` words merge into one JSON
value appended at the end. Then argparse: exact option strings, unique prefixes of ``--`` ones, one
value each. Only the flags vLLM's multimodal memory depends on (``MM_DESTS``) are interpreted;
every other option is known by name from the release's own parser (``flags.table``), so that
abbreviations resolve and typos are caught as argparse would. Every word keeps where it came from
(``argv[N]`` or ``file:line:col``). Pure core: standard library only.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm import gib
from mmpool_cli.engines.vllm.flags import FlagTable, Option, table
from mmpool_cli.engines.vllm.processor_cache import DataParallel
from mmpool_cli.inputs.yamlsrc import Source, load

MAX_INT = 2**63 - 1
MAX_DOTS = 32  # nested keys of one --flag.a.b word
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
}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


@dataclass(frozen=True)
class Token:
    """One word and where it came from."""

    text: str
    origin: str


@dataclass(frozen=True)
class Setting:
    """A flag's value after parsing, and where the winning occurrence was written."""

    value: Any
    origin: str


@dataclass
class Reading:
    """What vLLM's parser makes of the launch, for the interpreted flags, plus every problem."""

    flags: FlagTable = field(default_factory=table)
    settings: dict[str, Setting] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    config_path: str | None = None

    def get(self, dest: str, default: Any = None) -> Any:
        setting = self.settings.get(dest)
        return default if setting is None else setting.value

    def origin(self, dest: str) -> str | None:
        setting = self.settings.get(dest)
        return None if setting is None else setting.origin

    def add(self, severity: Severity, code: str, message: str, location: str | None) -> None:
        self.findings.append(Finding(severity, code, message, location))


def launch_words(argv: list[str]) -> tuple[list[Token], bool] | None:
    """The parser's words of a vLLM launch command, located, and whether it is ``vllm serve``.

    ``vllm serve ...`` and ``python -m vllm.entrypoints.openai.api_server ...`` (any ``python``);
    None for anything else.
    """
    if len(argv) >= 2 and os.path.basename(argv[0]) == "vllm" and argv[1] == "serve":
        return [Token(t, f"argv[{i}]") for i, t in enumerate(argv) if i >= 2], True
    if (
        len(argv) >= 3
        and re.fullmatch(r"python[0-9.]*", os.path.basename(argv[0]))
        and argv[1] == "-m"
        and argv[2] == "vllm.entrypoints.openai.api_server"
    ):
        return [Token(t, f"argv[{i}]") for i, t in enumerate(argv) if i >= 3], False
    return None


def read(words: list[Token], *, serve: bool = True, flags: FlagTable | None = None, cwd: str | None = None) -> Reading:
    """Parse a launch's words as the release's ``FlexibleArgumentParser`` would; problems are findings."""
    reading = Reading(flags or table())
    words = list(words)
    if serve:
        words = _model_to_front(words)
    words = _merge_config(reading, words, serve, cwd)
    words = [_dashed(t) for t in words]
    words = _dotted(reading, words)
    _argparse(reading, words)
    return reading


def _model_to_front(words: list[Token]) -> list[Token]:
    for n, tok in enumerate(words):
        if tok.text == "--model" and n + 1 < len(words):
            return [words[n + 1], *words[:n], *words[n + 2 :]]
        if tok.text.startswith("--model="):
            return [Token(tok.text.removeprefix("--model="), tok.origin), *words[:n], *words[n + 1 :]]
    return words


def _merge_config(reading: Reading, words: list[Token], serve: bool, cwd: str | None) -> list[Token]:
    places = [n for n, tok in enumerate(words) if tok.text == "--config"]
    for tok in words:
        abbreviated = tok.text != "--config" and tok.text.startswith("--conf") and "--config".startswith(tok.text)
        if tok.text.startswith("--config=") or abbreviated:
            reading.add(
                Severity.error,
                "config-not-merged",
                f"vLLM merges a config file only after the exact word --config: {excerpt(tok.text)} is accepted by "
                "argparse and the file is silently ignored; write '--config FILE' as two words",
                tok.origin,
            )
    if not places:
        return words
    if len(places) > 1:
        for n in places[1:]:
            reading.add(
                Severity.error,
                "config-multiple",
                "vLLM fails with 'More than one config file specified!'; merge them into one",
                words[n].origin,
            )
        return words
    n = places[0]
    if n == len(words) - 1:
        reading.add(
            Severity.error,
            "config-missing-path",
            "vLLM fails with 'No config file specified! Please check your command-line arguments.'; add the file",
            words[n].origin,
        )
        return words[:n]
    path = words[n + 1].text
    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        reading.add(
            Severity.error,
            "config-not-yaml",
            f"vLLM fails with 'Config file must be of a yaml/yml type. {shorten(extension)} supplied'; name it .yaml",
            words[n + 1].origin,
        )
        return words[:n] + words[n + 2 :]
    full = path if cwd is None or os.path.isabs(path) else os.path.join(cwd, path)
    src = load(full)
    reading.config_path = path
    for f in src.findings:
        reading.findings.append(
            Finding(f.severity, f.code, f.message, path + f.location[len(full) :] if f.location else path)
        )
    src.name = path
    config = config_words(reading, src)
    before, after = words[:n], words[n + 2 :]
    first_is_model = bool(before) and not before[0].text.startswith("-")
    if serve and not first_is_model and not any(t.text == "--model" for t in config):
        reading.add(
            Severity.error,
            "vllm-no-model",
            "vLLM fails with 'No model specified! Please specify model either as a positional argument or in a "
            "config file.'; add the model after 'vllm serve' or a model key to the file",
            words[n].origin,
        )
    if first_is_model:  # the model (or the entry point's first word) stays in front: cli > config > defaults
        return [before[0], *config, *before[1:], *after]
    return [*config, *before, *after]


def config_words(reading: Reading, src: Source) -> list[Token]:
    """A ``--config`` file's keys as the words ``load_config_file`` makes of them, located."""
    out: list[Token] = []
    data = src.data
    if src.findings and data is None:
        return out
    if not isinstance(data, dict):
        reading.add(
            Severity.error,
            "vllm-config-not-mapping",
            "vLLM reads a config file as a mapping of flag names to values ('config.items()' fails otherwise); "
            "write 'key: value' lines",
            src.where(()),
        )
        return out
    for key, value in data.items():
        where_key, where_value = src.where((key,), key=True), src.where((key,))
        if not isinstance(key, str):
            reading.add(
                Severity.error,
                "vllm-config-key-not-string",
                f"the key {excerpt(repr(key))} is not text: vLLM makes '--{shorten(str(key))}' of it; quote it",
                where_key,
            )
            key = str(key)
        if isinstance(value, bool):
            if value:
                out.append(Token(f"--{key}", where_key))
            elif f"--no-{key}" in reading.flags.by_string:
                out.append(Token(f"--no-{key}", where_key))
            else:
                reading.add(
                    Severity.warning,
                    "vllm-config-false-ignored",
                    f"{shorten(key)}: false makes no flag in vLLM's config merge (there is no --no-{shorten(key)}), "
                    "so it cannot undo the flag given elsewhere; remove the key",
                    where_value,
                )
        elif isinstance(value, list):
            if value:
                out.append(Token(f"--{key}", where_key))
                out += [Token(str(item), src.where((key, i))) for i, item in enumerate(value)]
        elif isinstance(value, dict):
            out += [Token(f"--{key}", where_key), Token(json.dumps(value), where_value)]
        else:
            out += [Token(f"--{key}", where_key), Token(str(value), where_value)]
    return out


def _dashed(tok: Token) -> Token:
    text = tok.text
    if not text.startswith("--"):
        return tok
    key, eq, value = text.partition("=")
    head, dot, tail = key[2:].partition(".")
    return Token("--" + head.replace("_", "-") + dot + tail + eq + value, tok.origin)


def _dotted(reading: Reading, words: list[Token]) -> list[Token]:
    """``--flag.key value`` words merged into ``--flag JSON`` at the end, as vLLM does."""
    merged: dict[str, tuple[dict[str, Any], str]] = {}
    out: list[Token] = []
    skip = False
    for n, tok in enumerate(words):
        if skip:
            skip = False
            continue
        text = tok.text
        if not (text.startswith("-") and "." in text) or (text.startswith("--") and "." not in text):
            out.append(tok)
            continue
        if "=" in text:
            name, value_text = text.split("=", 1)
            if "." not in name:
                out.append(tok)
                continue
        else:
            name = text
            if n + 1 >= len(words):
                reading.add(
                    Severity.error, "flag-bad-value", f"vLLM fails on {excerpt(text)} without a value", tok.origin
                )
                continue
            value_text, skip = words[n + 1].text, True
        if name.endswith("+"):
            name, value_text = name[:-1], json.dumps(value_text.split(","))
        key, *keys = name.split(".")
        if name.count(".") > MAX_DOTS:
            reading.add(
                Severity.error,
                "flag-bad-value",
                f"{excerpt(name)}: more than {MAX_DOTS} nested keys; no vLLM config is that deep",
                tok.origin,
            )
            continue
        try:
            value: Any = json.loads(value_text)
        except (json.JSONDecodeError, RecursionError):
            try:
                value = human_int(value_text)
            except ValueError:
                value = value_text
        for k in reversed(keys):
            value = {k: value}
        target, _ = merged.setdefault(key, ({}, tok.origin))
        _update(target, value)
        merged[key] = (target, tok.origin)
    for key, (value, origin) in merged.items():
        out += [Token(key, origin), Token(json.dumps(value), origin)]
    return out


def _update(original: dict[str, Any], update: dict[str, Any]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _update(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


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


def _argparse(reading: Reading, words: list[Token]) -> None:
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


def read_config_file(path: str, flags: FlagTable | None = None, stdin: bytes | Finding | None = None) -> Reading:
    """A ``vllm serve --config`` YAML file on its own, read as vLLM would splice it in: every key a
    flag of the release, every value converted as the flag's parser does; findings at ``file:line:col``."""
    reading = Reading(flags or table())
    src = load(path, stdin)
    reading.config_path = path
    reading.findings.extend(src.findings)
    words = [_dashed(t) for t in config_words(reading, src)]
    _argparse(reading, _dotted(reading, words))
    return reading


def data_parallel(reading: Reading) -> DataParallel:
    """The data-parallel and API-server flags of a reading (vLLM's defaults where not given)."""
    return DataParallel(
        size=reading.get("data_parallel_size", 1),
        size_local=reading.get("data_parallel_size_local"),
        rank=reading.get("data_parallel_rank"),
        start_rank=reading.get("data_parallel_start_rank"),
        external_lb=bool(reading.get("data_parallel_external_lb", False)),
        hybrid_lb=bool(reading.get("data_parallel_hybrid_lb", False)),
        multi_port=bool(reading.get("data_parallel_multi_port_external_lb", False)),
        api_server_count=reading.get("api_server_count"),
        headless=bool(reading.get("headless", False)),
    )
