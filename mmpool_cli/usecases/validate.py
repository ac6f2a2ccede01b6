"""``mmpool validate``: every file and the environment, every finding, in one run.

The engine reads each input (``Engine.read_environment``, ``Engine.read_file``); this use case
expands directories, keeps the input order and makes the report. The environment is one more
input, reported once. No typer, rich or torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult, Report
from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.inputs.filebytes import STDIN

Kind = Literal["auto", "mmpool", "sglang", "vllm"]
# The files a directory argument (and the pre-commit hook) checks: names that start with mmpool or
# sglang and end in .yaml, .yml or .json, so that other YAML in a repository is left alone.
CONFIG_NAME = re.compile(r"(mmpool|sglang)[^/]*\.(ya?ml|json)")
MAX_DIRECTORY_FILES = 10_000


def expand(paths: list[str]) -> tuple[list[str], list[FileResult]]:
    """Files to validate: each path as given, each directory walked for ``CONFIG_NAME`` files.

    Hidden directories are skipped; a directory with no config files, or with more than
    ``MAX_DIRECTORY_FILES`` of them, is a finding rather than a silent pass or an endless walk.
    """
    files: list[str] = []
    problems: list[FileResult] = []
    for path in paths:
        if path == STDIN or not os.path.isdir(path):
            files.append(path)
            continue
        found: list[str] = []
        for top, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(top, n) for n in sorted(names) if CONFIG_NAME.fullmatch(n)]
            if len(found) > MAX_DIRECTORY_FILES:
                break
        if not found or len(found) > MAX_DIRECTORY_FILES:
            why = "no" if not found else f"more than {MAX_DIRECTORY_FILES:,}"
            finding = Finding(
                Severity.error,
                "directory-no-configs" if not found else "directory-too-many",
                f"{why} files named mmpool*.yaml/.yml/.json or sglang*.yaml/.yml/.json under {path}; "
                "name the files to check",
                path,
            )
            problems.append(FileResult(path=path, kind="unknown", findings=[finding]))
        else:
            files += found
    return files, problems


def validate(
    paths: list[str],
    environ: Mapping[str, str],
    *,
    kind: Kind = "auto",
    stdin: bytes | Finding | None = None,
    env_file_findings: list[Finding] | None = None,
    strict: bool = False,
    sglang_version: str | None = None,
    sglang_version_chosen: str = "newest",
    engine_name: str = DEFAULT,
) -> Report:
    """Validate every path (``-`` is ``stdin``, a directory its config files) and the environment
    against one release of the engine (its newest unless ``sglang_version`` names one).

    Never raises for bad input; an unknown release raises MmpoolError.
    """
    files, problems = expand(paths)
    if kind == "auto" and engine_name == DEFAULT and files and all(is_vllm_config(p, stdin) for p in files):
        # every file is vLLM's: the report is the one --kind vllm gives, release and environment alike
        kind, engine_name = "vllm", "vllm"
        sglang_version, sglang_version_chosen = engine("vllm").choose_release(None, environ)
    eng = engine(engine_name)
    version, _ = eng.choose_release(sglang_version or eng.releases()[-1], {})
    if kind == "vllm":
        kind = "sglang"  # the engine's own kind: engine_name says which engine
    chosen = sglang_version_chosen
    results = [eng.read_environment(environ, env_file_findings or [], version), *problems]
    for p in files:
        if kind == "auto" and engine_name == DEFAULT and is_vllm_config(p, stdin):
            other = engine("vllm")
            v_version, v_chosen = other.choose_release(None, environ)
            results.append(other.read_file(p, environ, "engine", stdin, v_version, v_chosen))
        else:
            results.append(eng.read_file(p, environ, "engine" if kind == "sglang" else kind, stdin, version, chosen))
    return Report(
        command="validate",
        results=results,
        strict=strict,
        sglang_version=version,
        sglang_version_chosen=chosen,
        engine=engine_name,
    )


def is_vllm_config(path: str, stdin: bytes | Finding | None = None) -> bool:
    """Whether ``--kind auto`` reads ``path`` as a vLLM ``--config`` file: named ``vllm*``, or with a
    top-level key that is a ``vllm serve`` flag the newest SGLang lacks (``mm-processor-cache-gb``);
    ``mmpool*`` and ``sglang*`` files are never vLLM's."""
    name = os.path.basename(path).lower()
    if name.startswith("vllm"):
        return True
    if name.startswith(("mmpool", "sglang")):  # named for the other kinds: not read twice
        return False
    from mmpool_cli.engines.sglang.flags import table as sglang_table
    from mmpool_cli.engines.vllm.flags import table as vllm_table
    from mmpool_cli.inputs.yamlsrc import load

    src = load(path, stdin)
    if not isinstance(src.data, dict):
        return False
    vllm_options, sglang_options = vllm_table().by_string, sglang_table().options
    for key in src.data:
        if isinstance(key, str) and not key.startswith("-"):
            flag = "--" + key.replace("_", "-")
            if flag in vllm_options and flag not in sglang_options and "--" + key not in sglang_options:
                return True
    return False
