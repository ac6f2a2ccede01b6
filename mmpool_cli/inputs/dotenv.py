"""Where the checked environment comes from: the process, ``--env-file`` files, ``--env`` arguments.

``--env-file`` files are dotenv-style. No typer, rich or torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mmpool_cli.core.excerpt import excerpt
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.filebytes import decode, read_bytes

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Environment(dict[str, str]):
    """The environment to check, and where each variable read from an ``--env-file`` was set.

    ``places`` maps a variable to ``file:line:col`` of the value that counts, so that a finding
    about it points at that line (``sglang.environment.where``).
    """

    def __init__(self, *args: object, **kwargs: str) -> None:
        super().__init__(*args, **kwargs)
        self.places: dict[str, str] = {}


class EnvArgError(MmpoolError):
    """An ``--env`` argument that is not ``KEY=VALUE`` (a usage error)."""


def parse_env_arg(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` from an ``--env`` argument.

    Raises:
        EnvArgError: there is no ``=`` or the key is not a variable name.
    """
    key, eq, value = text.partition("=")
    if not eq or not _KEY.fullmatch(key):
        raise EnvArgError(f"--env {excerpt(text)}: write KEY=VALUE, e.g. --env SGLANG_MM_FEATURE_CACHE_MB=2048")
    return key, value


def read_env_file(path: str) -> tuple[Environment, list[Finding]]:
    """A dotenv-style file: ``KEY=VALUE`` lines, optional ``export``, ``#`` comments, quoted values.

    A line that is none of these is a finding located at it; the file's other lines still count.
    Each value's place (``path:line:col`` of its line) is kept in ``places``.
    """
    raw, problem = read_bytes(path)
    text = None
    if problem is None and raw is not None:
        text, problem = decode(path, raw, "a dotenv file (KEY=VALUE lines); pass the environment file")
    if problem is not None or text is None:
        return Environment(), [problem] if problem else []
    values = Environment()
    findings: list[Finding] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body = stripped.removeprefix("export ").lstrip()
        key, eq, value = body.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            findings.append(
                Finding(
                    Severity.error,
                    "env-file-syntax",
                    f"not a KEY=VALUE line: {stripped[:60]!r}; write e.g. SGLANG_MM_FEATURE_CACHE_MB=2048",
                    f"{path}:{number}:{len(line) - len(line.lstrip()) + 1}",
                )
            )
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
        values.places[key] = f"{path}:{number}:{len(line) - len(line.lstrip()) + 1}"
    return values, findings


def assemble(
    process: Mapping[str, str] | None, env_files: list[str], env_args: list[str]
) -> tuple[Environment, list[Finding]]:
    """The environment to check: the process's (unless None), then ``--env-file`` files, then ``--env``.

    Raises:
        EnvArgError: an ``--env`` argument is not ``KEY=VALUE``.
    """
    environ = Environment(process or {})
    findings: list[Finding] = []
    for path in env_files:
        values, found = read_env_file(path)
        environ.update(values)
        environ.places.update(values.places)
        findings += found
    for text in env_args:
        key, value = parse_env_arg(text)
        environ[key] = value
        environ.places.pop(key, None)  # --env wins, and is no file's line
    return environ, findings
