"""A ``vllm serve`` launch read the way vLLM's ``FlexibleArgumentParser`` reads it, with locations.

The steps of ``FlexibleArgumentParser.parse_args`` (``utils/argparse_utils.py``), in order: under
``vllm serve`` a ``--model X`` moves to the front; the exact word ``--config FILE`` splices the
YAML file's keys in after the model (``config_file``); ``--`` names get dashes for underscores up
to their first ``.``; ``--flag.key value`` words merge into one JSON value appended at the end.
Then argparse (``options``): exact option strings, unique prefixes of ``--`` ones, one value each.
Every word keeps where it came from (``argv[N]`` or ``file:line:col``). Pure core: standard
library only.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from mmpool_cli.core.excerpt import excerpt
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm.config_file import config_words, merge_config
from mmpool_cli.engines.vllm.flags import FlagTable, table
from mmpool_cli.engines.vllm.options import human_int, parse
from mmpool_cli.engines.vllm.processor_cache import DataParallel
from mmpool_cli.engines.vllm.reading import Reading, Token
from mmpool_cli.inputs.yamlsrc import load

MAX_DOTS = 32  # nested keys of one --flag.a.b word


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
    words = merge_config(reading, words, serve, cwd)
    words = [_dashed(t) for t in words]
    words = _dotted(reading, words)
    parse(reading, words)
    return reading


def _model_to_front(words: list[Token]) -> list[Token]:
    for n, tok in enumerate(words):
        if tok.text == "--model" and n + 1 < len(words):
            return [words[n + 1], *words[:n], *words[n + 2 :]]
        if tok.text.startswith("--model="):
            return [Token(tok.text.removeprefix("--model="), tok.origin), *words[:n], *words[n + 1 :]]
    return words


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


def read_config_file(path: str, flags: FlagTable | None = None, stdin: bytes | Finding | None = None) -> Reading:
    """A ``vllm serve --config`` YAML file on its own, read as vLLM would splice it in: every key a
    flag of the release, every value converted as the flag's parser does; findings at ``file:line:col``."""
    reading = Reading(flags or table())
    src = load(path, stdin)
    reading.config_path = path
    reading.findings.extend(src.findings)
    words = [_dashed(t) for t in config_words(reading, src)]
    parse(reading, _dotted(reading, words))
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
