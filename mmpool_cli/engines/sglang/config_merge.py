"""SGLang's ``--config FILE`` merge: a YAML file's keys become the words SGLang parses.

``merge_config`` splices the file's words in as SGLang does (``config words + words before +
words after``) after the exact word ``--config``; ``config_tokens`` turns one file into words,
with every key SGLang's merger refuses or silently skips as a located finding.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.sglang.args import BY_NAME, ENV_ONLY_NAMES, ENV_ONLY_PREFIXES, Token, resolve_option
from mmpool_cli.engines.sglang.flags import FlagTable, table
from mmpool_cli.inputs.yamlsrc import Source, load


def config_tokens(src: Source, flags: FlagTable | None = None) -> tuple[list[Token], list[Finding]]:
    """An SGLang ``--config`` mapping as the flag words SGLang's merger makes of it, with findings.

    Mirrors ``ConfigArgumentMerger._convert_config_to_args``: keys become ``--{key}`` literally, in
    file order; a refused key (an unsupported action, an environment variable, an underscore
    spelling) produces a finding and no words. ``flags``: the release (default: the newest).
    """
    flags = flags or table()
    unsupported = flags.config_unsupported
    tokens: list[Token] = []
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str, location: str) -> None:
        findings.append(Finding(severity, code, message, location))

    for key, value in (src.data or {}).items():
        where_key = src.where((key,), key=True)
        where_value = src.where((key,))
        if not isinstance(key, str):
            add(
                Severity.error,
                "sglang-config-key-not-string",
                f"the key {excerpt(repr(key))} is not text: SGLang's merger fails on it "
                f"('{type(key).__name__}' object has no attribute 'replace'); quote it or remove it",
                where_key,
            )
            continue
        key_norm = key.replace("-", "_")
        if key_norm.upper().startswith(ENV_ONLY_PREFIXES) or key_norm.upper() in ENV_ONLY_NAMES:
            env = key_norm.upper()
            add(
                Severity.error,
                "sglang-config-env-var",
                f"{excerpt(key)} is an environment variable: a --config file only sets command-line flags "
                f"(SGLang makes it '--{shorten(key)}', which it refuses); export {shorten(env)}=... before the launch "
                "instead",
                where_key,
            )
            continue
        if key_norm in unsupported:
            fix = (
                "write 'attn-dp-size: <dp-size>' (and no dp-size) instead"
                if key_norm == "enable_dp_attention"
                else "pass it on the command line instead"
            )
            add(
                Severity.error,
                "sglang-config-unsupported",
                f"SGLang fails with \"Unsupported config option '{key_norm}' with action "
                f"'{unsupported[key_norm]}'\"; {fix}",
                where_key,
            )
            continue
        dashed = "--" + key.replace("_", "-")
        if "_" in key and f"--{key}" not in flags.options and resolve_option(dashed, flags)[0] is not None:
            add(
                Severity.error,
                "sglang-config-underscore-key",
                f"SGLang turns the key into '--{shorten(key)}', which argparse refuses ('unrecognized arguments'); "
                f"write {excerpt(key.replace('_', '-'))}",
                where_key,
            )
            continue
        option = resolve_option(f"--{key}", flags)[0]
        flag = BY_NAME.get(option or "")
        if isinstance(value, bool) and flag is not None and flag.kind == "store_true":
            if value:
                tokens.append(Token(f"--{key}", where_key))
                add(
                    Severity.info,
                    "sglang-config-store-true",
                    f"{shorten(key)}: true switches {flag.names[0]} on, and no command-line flag can switch it "
                    "off again",
                    where_value,
                )
            else:
                add(
                    Severity.warning,
                    "sglang-config-false-ignored",
                    f"{shorten(key)}: false does nothing (SGLang emits no flag for it), so it cannot undo a "
                    f"{flag.names[0]} given elsewhere; remove the key",
                    where_value,
                )
            continue
        if isinstance(value, bool):
            tokens += [Token(f"--{key}", where_key), Token(str(value).lower(), where_value)]
        elif isinstance(value, list):
            if not value:
                if flag is not None:
                    add(
                        Severity.warning,
                        "sglang-config-empty-list",
                        f"{shorten(key)}: [] is skipped by SGLang's merge: the flag keeps its default; remove the key",
                        where_value,
                    )
                continue
            tokens.append(Token(f"--{key}", where_key))
            tokens += [Token(str(item), src.where((key, n))) for n, item in enumerate(value)]
        elif isinstance(value, dict):
            tokens += [Token(f"--{key}", where_key), Token(json.dumps(value), where_value)]
        else:
            tokens += [Token(f"--{key}", where_key), Token(str(value), where_value)]
    return tokens, findings


@dataclass
class Launch:
    """A launch command after the ``--config`` merge: the words SGLang parses, and the findings so far."""

    tokens: list[Token]
    findings: list[Finding]
    config: str | None = None


def merge_config(tokens: list[Token], cwd: str | None = None, flags: FlagTable | None = None) -> Launch:
    """SGLang's ``--config`` merge: ``config words + words before + words after``.

    Only the exact word ``--config`` triggers it; one file at most, ending ``.yaml``/``.yml``.
    """
    findings: list[Finding] = []
    places = [n for n, tok in enumerate(tokens) if tok.text == "--config"]
    if not places:
        return Launch(tokens, findings)
    if len(places) > 1:
        for n in places[1:]:
            findings.append(
                Finding(
                    Severity.error,
                    "config-multiple",
                    "SGLang fails with 'Multiple config files specified! Only one allowed.'; merge them into one",
                    tokens[n].origin,
                )
            )
        return Launch(tokens, findings)
    n = places[0]
    if n == len(tokens) - 1:
        findings.append(
            Finding(
                Severity.error,
                "config-missing-path",
                "SGLang fails with 'No config file specified after --config flag!'; add the file",
                tokens[n].origin,
            )
        )
        return Launch(tokens[:n], findings)
    path = tokens[n + 1].text
    rest = tokens[:n] + tokens[n + 2 :]
    suffix = os.path.splitext(path)[1]
    if suffix.lower() not in (".yaml", ".yml"):
        findings.append(
            Finding(
                Severity.error,
                "config-not-yaml",
                f"SGLang fails with 'Config file must be YAML format, got: {suffix}'; name it .yaml or .yml",
                tokens[n + 1].origin,
            )
        )
        return Launch(rest, findings, path)
    full = path if cwd is None or os.path.isabs(path) else os.path.join(cwd, path)
    src = load(full)
    src.name = path
    src.findings = [
        Finding(f.severity, f.code, f.message, path + f.location[len(full) :] if f.location else path)
        for f in src.findings
    ]
    findings += src.findings
    if not isinstance(src.data, dict):
        return Launch(rest, findings, path)
    words, found = config_tokens(src, flags)
    findings += found
    return Launch(words + rest, findings, path)
