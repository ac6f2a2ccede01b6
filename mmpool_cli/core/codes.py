"""The registry of finding codes: every code a finding can carry, its severity and what it means.

Each owner keeps one registry (``NEUTRAL``, below, for mmpool's own inputs, one per
engine, one for the probe); each registry joins ``ALL`` when its module is imported, and a
``Finding`` with a code or severity no registry has is refused (a bug in mmpool, caught by the
tests), so the tables of docs/findings.md (checked against the registries by a test) list every code.
Neutral core: knows no engine; standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How much a finding matters: errors fail a run, warnings only under ``--strict``."""

    error = "error"
    warning = "warning"
    info = "info"


# code -> its entry, from every registry imported so far
ALL: dict[str, Code] = {}


@dataclass(frozen=True)
class Code:
    """One finding code: its usual severity, any other it takes (e.g. for older releases), its meaning."""

    code: str
    severity: Severity
    meaning: str
    also: tuple[Severity, ...] = ()

    @property
    def severities(self) -> tuple[Severity, ...]:
        return (self.severity, *self.also)


class CodeRegistry:
    """The codes of one owner (mmpool's inputs, an engine, the probe); a code belongs to one owner."""

    def __init__(self, owner: str, codes: Iterable[Code]) -> None:
        self.owner = owner
        self.codes: dict[str, Code] = {}
        for entry in codes:
            if entry.code in self.codes or entry.code in ALL:
                raise ValueError(f"finding code {entry.code!r} is registered twice")
            self.codes[entry.code] = entry
        ALL.update(self.codes)

    def __contains__(self, code: object) -> bool:
        return code in self.codes

    def __getitem__(self, code: str) -> Code:
        return self.codes[code]


def check(code: str, severity: Severity) -> None:
    """Refuse a finding that no registry knows, or with a severity its code does not take."""
    entry = ALL.get(code)
    if entry is None:
        raise ValueError(f"finding code {code!r} is in no registry (core.codes)")
    if severity not in entry.severities:
        raise ValueError(f"finding code {code!r} never has severity {severity.value}")


# The codes of mmpool's own inputs, whatever the engine: files, YAML, directories, env files.
NEUTRAL = CodeRegistry(
    "neutral",
    [
        Code("file-missing", Severity.error, "the file cannot be read (over 4 MiB, stdin too, is not a config)"),
        Code("file-unreadable", Severity.error, "the file cannot be read (over 4 MiB, stdin too, is not a config)"),
        Code("file-too-large", Severity.error, "the file cannot be read (over 4 MiB, stdin too, is not a config)"),
        Code("file-not-regular", Severity.error, "a FIFO, device or socket: refused unread, so nothing blocks"),
        Code("file-binary", Severity.error, "NUL bytes, or a byte that is not UTF-8 (located at the byte)"),
        Code("file-not-utf8", Severity.error, "NUL bytes, or a byte that is not UTF-8 (located at the byte)"),
        *(
            Code(
                name,
                Severity.error,
                "nothing to read (an empty file, or one of comments only: a file cut early), "
                "or the top level is not a mapping",
            )
            for name in ("file-empty", "file-only-comments", "root-not-mapping")
        ),
        Code("yaml-syntax", Severity.error, "YAML SGLang cannot read, or a key given twice (only the last counts)"),
        Code(
            "yaml-duplicate-key", Severity.error, "YAML SGLang cannot read, or a key given twice (only the last counts)"
        ),
        Code(
            "yaml-alias-expansion",
            Severity.error,
            "aliases that add more than 100 000 values, or a value that contains itself",
        ),
        Code(
            "yaml-recursive-alias",
            Severity.error,
            "aliases that add more than 100 000 values, or a value that contains itself",
        ),
        Code(
            "yaml-too-deep",
            Severity.error,
            "nesting deeper than 100 levels; an integer of more than 4 300 digits (Python's int() limit)",
        ),
        Code(
            "yaml-int-too-long",
            Severity.error,
            "nesting deeper than 100 levels; an integer of more than 4 300 digits (Python's int() limit)",
        ),
        Code(
            "yaml-1.1-value",
            Severity.warning,
            "an unquoted 010 (octal), 1:30 (base 60), yes/no/on/off (booleans) that YAML 1.1 reads otherwise "
            "than written; an error in an mmpool config",
            also=(Severity.error,),
        ),
        Code("env-file-syntax", Severity.error, "an --env-file line that is not KEY=VALUE"),
        Code(
            "directory-no-configs",
            Severity.error,
            "a directory argument holds no file named mmpool* or sglang* ending in .yaml, .yml or .json",
        ),
        Code("directory-too-many", Severity.error, "a directory argument holds more than 10 000 config files"),
        # users' traffic (mmpool trace, simulate --from): what any engine's traffic reader finds
        Code(
            "traffic-image-unsized",
            Severity.error,
            "an image mmpool cannot measure: an http(s) URL without --assume-image, a header past what the log "
            "kept, a truncated image, not an image",
        ),
        Code(
            "traffic-video-unsized",
            Severity.error,
            "a video mmpool cannot measure: an http(s) URL without --assume-video, a string the log cut, a "
            "missing file, PyAV not installed",
        ),
        Code(
            "traffic-video-rate-varies",
            Severity.warning,
            "a variable-rate MP4/MOV with B-frames: its average frame rate depends on the FFmpeg release",
        ),
        Code(
            "traffic-image-too-large",
            Severity.warning,
            "an image over Pillow's 178,956,970-pixel limit that the server decodes with Pillow: the request fails",
        ),
        Code(
            "traffic-item-refused", Severity.error, "the family takes no such item, or its processor refuses the size"
        ),
        Code("traffic-body-line", Severity.error, "a line of an OpenAI body log that is not a chat-completions body"),
        Code("traffic-line-too-long", Severity.error, "a line over 256 MiB"),
        Code("traffic-long-id", Severity.warning, "a request id over 200 characters: the trace names it line<N>"),
        Code("tune-measures", Severity.info, "check --from: what the launch does with the traffic (fallback, prefix hits)"),
        Code("tune-fallback-over", Severity.error, "check --from: more features fall back at the launch than --max-fallback"),
        Code("tune-prefix-hit-under", Severity.error, "check --from: the prefix cache serves less than --min-prefix-hit"),
        Code("cache-off", Severity.info, "a cache the deployment turns off (size 0): its curve shows what a size buys"),
        Code(
            "cache-below-target",
            Severity.warning,
            "a cache whose hits at the deployment's size fall short of --target-hits of an unbounded one's",
        ),
        Code(
            "cache-item-unkeyed", Severity.warning, "items without a content key (their data not in the input): used once"
        ),
        Code("cache-url-key", Severity.info, "http(s) URLs are never fetched: the same URL is taken as the same item"),
        Code("cache-replay-differs", Severity.warning, "a recorded cache's replay at its own size misses its hits"),
        Code("encoder-cache-recorded", Severity.info, "what a recorded vLLM encoder cache did at its budget"),
        Code("encoder-cache-waits", Severity.warning, "a recorded vLLM encoder cache made items wait for room"),
        Code("prefix-tokens-estimated", Severity.warning, "no tokenizer loaded: the prompts' text tokens are estimated"),
        Code("prefix-capacity-assumed", Severity.warning, "the KV capacity unknown: the prefix cache replayed unbounded"),
        Code("prefix-cache-off", Severity.info, "the prefix cache is off: it serves nothing, every item is looked up"),
        Code("prefix-not-replayed", Severity.warning, "requests without a prompt mmpool can tokenize: none served"),
        Code("prefix-replay-matches", Severity.info, "the prefix replay serves each request the server's cached tokens"),
        Code("prefix-replay-differs", Severity.warning, "the prefix replay differs from the server's cached tokens"),
        Code("tune-today-over-budget", Severity.warning, "today's launch takes more memory per rank than the budget"),
        Code("tune-today-not-scored", Severity.warning, "today's pool is refused, or leaves no KV: today is not scored"),
    ],
)

# The codes of reading an engine's command line and --config file, the same for every engine:
# each engine mirrors its own parser, and these are argparse's (and the config merge's) refusals.
LAUNCH = CodeRegistry(
    "launch",
    [
        Code("flag-not-in-release", Severity.error, "a flag another release of the engine has, but not the chosen one"),
        Code(
            "flag-bad-value",
            Severity.error,
            "the engine's parser refuses a flag's value (not a number, not a choice, no value), or an integer past "
            "2^63 - 1",
        ),
        Code("unrecognized-argument", Severity.error, "not an option of the chosen release, or a stray word"),
        Code("ambiguous-option", Severity.error, "a prefix of several options"),
        Code("abbreviated-option", Severity.info, "a unique prefix, read as the full flag"),
        Code(
            "config-not-merged",
            Severity.error,
            "--config=FILE or an abbreviation: argparse accepts it, the file is ignored",
        ),
        Code("config-not-yaml", Severity.error, "the engine's own --config refusals"),
        Code("config-multiple", Severity.error, "the engine's own --config refusals"),
        Code("config-missing-path", Severity.error, "the engine's own --config refusals"),
        Code("parallel-not-positive", Severity.error, "a parallel size below 1"),
        # simulate --trace DIR: a replay of mmpool record's recording against what its pools did
        Code("record-replay-matches", Severity.info, "the replay made every decision the recorded pools made"),
        Code("record-replay-differs", Severity.error, "an allocation the replay decided otherwise than the real pool"),
        Code(
            "record-not-compared",
            Severity.info,
            "another layout than the recording's (the flags to compare are given), or an incomplete recording",
            also=(Severity.warning,),
        ),
        Code("record-damaged", Severity.warning, "a file of the recording is not whole: which, and what of it is read"),
    ],
)
