"""Located YAML: read a file as SGLang or mmpool would, keeping where every key and value sits.

Reading never raises: a missing, unreadable, binary, non-UTF-8, oversized or empty file, a YAML
syntax error, a duplicate key and a root that is not a mapping all become findings with a
``file:line:column`` location (1-based). JSON files take the same path (PyYAML reads JSON's
syntax), so their locations come out the same way. Pure core: PyYAML and the standard library.
"""

from __future__ import annotations

import codecs
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mmpool_cli.core.models import Finding, Severity

# NOTE: the C loader is 5-10x faster; its marks carry the same line and column.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_FILE_BYTES = 4 * 1024 * 1024
STDIN = "-"

Path = tuple[Any, ...]


@dataclass
class Source:
    """A file's parsed content: the constructed data, the node tree and the findings on the way."""

    name: str
    data: Any = None
    root: Node | None = None
    findings: list[Finding] = field(default_factory=list)

    def where(self, path: Path = (), *, key: bool = False) -> str:
        """``file:line:col`` of the value at ``path`` (or of its key), or the nearest enclosing node."""
        node = target = self.root
        for i, part in enumerate(path):
            last = i == len(path) - 1
            if isinstance(node, MappingNode):
                # the last occurrence of a duplicated key is the one that counts
                match = next(((k, v) for k, v in reversed(node.value) if _key_value(k) == part), None)
                if match is None:
                    break
                target, node = (match[0] if key and last else match[1]), match[1]
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = target = node.value[part]
            else:
                break
        return self.at(target)

    def at(self, node: Node | None) -> str:
        """``file:line:col`` of a node (the file alone when there is none)."""
        if node is None:
            return self.name
        return f"{self.name}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"

    def add(self, severity: Severity, code: str, message: str, location: str | None = None) -> None:
        """Record a finding located at ``location`` (default: the file)."""
        self.findings.append(Finding(severity, code, message, location or self.name))


def read_bytes(name: str, stdin: bytes | None = None) -> tuple[bytes | None, Finding | None]:
    """A file's bytes (``-`` is ``stdin``), or the finding that says why they cannot be read."""
    if name == STDIN:
        return (stdin or b""), None
    try:
        with open(name, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None, Finding(Severity.error, "file-missing", "no such file: check the path", name)
    except IsADirectoryError:
        return None, Finding(Severity.error, "file-unreadable", "this is a directory, not a file", name)
    except OSError as e:
        why = e.strerror or type(e).__name__
        return None, Finding(Severity.error, "file-unreadable", f"cannot read the file: {why}", name)
    if len(raw) > MAX_FILE_BYTES:
        return None, Finding(
            Severity.error,
            "file-too-large",
            f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB: not a configuration file",
            name,
        )
    return raw, None


def decode(name: str, raw: bytes) -> tuple[str | None, Finding | None]:
    """UTF-8 text (a BOM is allowed), or a ``file-binary``/``file-not-utf8`` finding at the bad byte."""
    if b"\0" in raw:
        return None, Finding(
            Severity.error,
            "file-binary",
            "the file holds NUL bytes: it is binary, not YAML; pass the configuration file",
            _byte_location(name, raw, raw.index(b"\0")),
        )
    try:
        return codecs.decode(raw, "utf-8-sig"), None
    except UnicodeDecodeError as e:
        offset = e.start + (3 if raw.startswith(codecs.BOM_UTF8) else 0)
        return None, Finding(
            Severity.error,
            "file-not-utf8",
            f"byte 0x{raw[offset]:02x} is not UTF-8: save the file as UTF-8",
            _byte_location(name, raw, offset),
        )


def load(name: str, stdin: bytes | None = None) -> Source:
    """Read, decode and parse one file into a located mapping; every problem is a finding."""
    src = Source(name)
    raw, problem = read_bytes(name, stdin)
    text = None
    if problem is None and raw is not None:
        text, problem = decode(name, raw)
    if problem is not None or text is None:
        src.findings.append(problem or Finding(Severity.error, "file-unreadable", "cannot read the file", name))
        return src
    return parse_text(name, text)


def parse_text(name: str, text: str) -> Source:
    """Parse YAML (or JSON) text into a located mapping; every problem is a finding."""
    src = Source(name)
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            src.add(Severity.error, "file-empty", "the file is empty: write the configuration as a YAML mapping")
            return src
        src.root = root
        _duplicates(src, root)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        problem = " ".join(str(part) for part in (e.context, e.problem) if part) or "invalid YAML"
        src.add(Severity.error, "yaml-syntax", f"YAML syntax error: {problem}", where)
        return src
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError) as e:
        src.add(Severity.error, "yaml-syntax", f"YAML cannot be read: {type(e).__name__}: {e}")
        return src
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        src.add(
            Severity.error,
            "root-not-mapping",
            f"the top level is {_a(kind)}, not a mapping of keys to values "
            "(SGLang: 'Config file must contain a dictionary at root level')",
            src.at(root),
        )
        return src
    src.data = data
    return src


def _duplicates(src: Source, root: Node) -> None:
    """Report keys that appear twice in one mapping (PyYAML would silently keep the last)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[Hashable, Node] = {}
            for k, v in node.value:
                key = _key_value(k)
                if key is not _UNHASHABLE and key != "<<":
                    if key in first:
                        prev = first[key].start_mark.line + 1
                        src.add(
                            Severity.error,
                            "yaml-duplicate-key",
                            f"key {key!r} appears again (first on line {prev}); only the last one counts: keep one",
                            src.at(k),
                        )
                    else:
                        first[key] = k
                stack.append(v)
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)


_UNHASHABLE = object()


def _key_value(node: Node) -> Any:
    """A scalar key's value as the safe constructor gives it; other keys are opaque."""
    if not isinstance(node, ScalarNode):
        return _UNHASHABLE
    try:
        value = SafeConstructor().construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return node.value
    return value if isinstance(value, Hashable) else node.value


def _byte_location(name: str, raw: bytes, offset: int) -> str:
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return f"{name}:{line}:{column}"


def _a(kind: str) -> str:
    names = {"list": "a list", "str": "a string", "int": "a number", "float": "a number", "bool": "a boolean"}
    return names.get(kind, f"a {kind}")
