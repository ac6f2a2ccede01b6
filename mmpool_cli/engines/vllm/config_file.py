"""The ``--config FILE`` merge of vLLM's ``FlexibleArgumentParser``, with locations.

Only the exact word ``--config`` merges (``utils/argparse_utils.py``); the YAML file's keys become
words (``load_config_file``: ``--key value``; ``true`` → ``--key``, ``false`` → ``--no-key`` where
the flag has it, else nothing; lists expanded; mappings as JSON), spliced in after the model so that
the command line wins over the file. Each word is located at the file's ``line:col``.
"""

from __future__ import annotations

import json
import os

from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm.reading import Reading, Token
from mmpool_cli.inputs.yamlsrc import Source, load


def merge_config(reading: Reading, words: list[Token], serve: bool, cwd: str | None) -> list[Token]:
    """The words with a ``--config FILE`` pair replaced by the file's words, as vLLM splices them in."""
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
