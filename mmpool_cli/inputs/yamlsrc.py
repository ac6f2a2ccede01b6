"""Located YAML: read a file as SGLang or mmpool would, keeping where every key and value sits.

Reading never raises and never blocks: a missing, unreadable, non-regular (FIFO, device), binary,
non-UTF-8, oversized or empty file, a YAML syntax error, a duplicate key, aliases that expand without
bound or contain themselves, nesting too deep, an integer Python cannot read and a root that is not
a mapping all become findings with a ``file:line:column`` location (1-based). Time is linear in the
file's size.
JSON files take the same path (PyYAML reads JSON's syntax), so their locations come out the same way.
Pure core: PyYAML and the standard library.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mmpool_cli.core.excerpt import duplicate_key, excerpt
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.inputs.filebytes import decode, read_bytes
from mmpool_cli.inputs.yaml11 import CODE as YAML11
from mmpool_cli.inputs.yaml11 import surprises

# NOTE: the C loader is 5-10x faster; its marks carry the same line and column.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# What aliases may add to a file: far above any real configuration, far below what hurts to expand.
MAX_ALIAS_NODES = 100_000
# How deep values may nest (SGLang's pure-Python loader fails at about 490; a config needs a few).
MAX_DEPTH = 100
_INT_TAG = "tag:yaml.org,2002:int"
_STR_TAG = "tag:yaml.org,2002:str"

Path = tuple[Any, ...]


@dataclass
class Source:
    """A file's parsed content: the constructed data, the node tree and the findings on the way."""

    name: str
    data: Any = None
    root: Node | None = None
    findings: list[Finding] = field(default_factory=list)
    _keys: dict[int, dict[Any, tuple[Node, Node]]] = field(default_factory=dict, repr=False)

    def where(self, path: Path = (), *, key: bool = False) -> str:
        """``file:line:col`` of the value at ``path`` (or of its key), or the nearest enclosing node."""
        return self.at(self._node(path, key=key)[0])

    def text(self, path: Path) -> str | None:
        """The scalar at ``path`` as written (``1073741824.0``, not the float it makes), or None."""
        node, found = self._node(path)
        return node.value if found and isinstance(node, ScalarNode) else None

    def _node(self, path: Path, *, key: bool = False) -> tuple[Node | None, bool]:
        """The node at ``path`` (or its key's), else the nearest enclosing one; and whether it was found."""
        node = target = self.root
        for i, part in enumerate(path):
            last = i == len(path) - 1
            if isinstance(node, MappingNode):
                try:
                    match = self._index(node).get(part)
                except TypeError:  # an unhashable part names no key
                    match = None
                if match is None:
                    break
                target, node = (match[0] if key and last else match[1]), match[1]
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = target = node.value[part]
            else:
                break
        else:
            return target, True
        return target, False

    def _index(self, node: MappingNode) -> dict[Any, tuple[Node, Node]]:
        # Built once per mapping, so locating every key of a file is linear, not quadratic.
        index = self._keys.get(id(node))
        if index is None:
            index = {}
            for k, v in node.value:  # the last occurrence of a duplicated key is the one that counts
                key = _key_value(k)
                if key is not _UNHASHABLE:
                    index[key] = (k, v)
            self._keys[id(node)] = index
        return index

    def at(self, node: Node | None) -> str:
        """``file:line:col`` of a node (the file alone when there is none)."""
        if node is None:
            return self.name
        return f"{self.name}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"

    def add(self, severity: Severity, code: str, message: str, location: str | None = None) -> None:
        """Record a finding located at ``location`` (default: the file)."""
        self.findings.append(Finding(severity, code, message, location or self.name))


def load(name: str, stdin: bytes | Finding | None = None) -> Source:
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


def _nothing(src: Source, text: str) -> None:
    """A file with no YAML node: empty, or comments only (a file cut before its first key reads so)."""
    comments = sum(1 for line in text.splitlines() if line.lstrip().startswith("#"))
    if not comments:
        src.add(Severity.error, "file-empty", "the file is empty: write the configuration as a YAML mapping")
        return
    lines = "1 line" if comments == 1 else f"{comments} lines"
    src.add(
        Severity.error,
        "file-only-comments",
        f"the file holds only comments ({lines}), no configuration: was it cut? "
        "write the configuration as a YAML mapping after them",
    )


def parse_text(name: str, text: str) -> Source:
    """Parse YAML (or JSON) text into a located mapping; every problem is a finding."""
    src = Source(name)
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            _nothing(src, text)
            return src
        src.root = root
        # Aliases and huge integers are checked on the node tree, before anything is built from it.
        if _shape(src, root) or _long_integers(src, root):
            return src
        _duplicates(src, root)
        for node, message in surprises(root):
            src.add(Severity.warning, YAML11, message, src.at(node))
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        problem = " ".join(str(part) for part in (e.context, e.problem) if part) or "invalid YAML"
        message = _long_key(text, mark) or _not_yaml(text) or f"YAML syntax error: {problem}"
        src.add(Severity.error, "yaml-syntax", message, where)
        return src
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError) as e:
        src.add(Severity.error, "yaml-syntax", f"YAML cannot be read: {type(e).__name__}: {excerpt(str(e), 200)}")
        return src
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        other = _not_yaml(text) if isinstance(data, str) else None
        src.add(
            Severity.error,
            "root-not-mapping",
            (f"{other}; " if other else "") + f"the top level is {_a(kind)}, not a mapping of keys to values "
            "(SGLang: 'Config file must contain a dictionary at root level')",
            src.at(root),
        )
        return src
    src.data = data
    return src


# PyYAML (C and Python loaders alike, so SGLang's too) reads a key of at most this many characters.
MAX_KEY_CHARS = 1024
_TOML_LINE = re.compile(
    r"""^[ \t]*(?:\[\[?[ \t]*[A-Za-z0-9_.\-"' ]+\]\]?[ \t]*(?:\#.*)?|[A-Za-z0-9_.\-"']+[ \t]*=[ \t]*\S.*)$""",
    re.MULTILINE,
)


def _long_key(text: str, mark: Any) -> str | None:
    """The message for a key past PyYAML's 1024-character limit, which it reports as a misplaced ':'."""
    index = getattr(mark, "index", None)
    if not isinstance(index, int) or not 0 <= index < len(text) or text[index] != ":":
        return None
    start = text.rfind("\n", 0, index) + 1
    key = text[start:index].strip().lstrip("-? ").strip()
    if len(key) <= MAX_KEY_CHARS:
        return None
    return (
        f"a key of {len(key):,} characters: YAML reads keys of at most {MAX_KEY_CHARS} characters "
        "(SGLang's loader fails on it too); shorten the key"
    )


def _not_yaml(text: str) -> str | None:
    """What to say when YAML cannot read ``text`` and it looks like TOML or INI (``[section]``, ``key = value``)."""
    match = _TOML_LINE.search(text)
    if match is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    return (
        f"this is not YAML: line {line} ({excerpt(match.group(0).strip())}) reads as TOML or INI; SGLang's "
        "--config files and mmpool configs are YAML (or JSON): write 'key: value', a section as a nested mapping"
    )


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
                            duplicate_key(str(key), f"on line {prev}"),
                            src.at(k),
                        )
                    else:
                        first[key] = k
                stack.append(v)
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, MappingNode):
        for k, v in node.value:
            yield k
            yield v
    elif isinstance(node, SequenceNode):
        yield from node.value


def _shape(src: Source, root: Node) -> bool:
    """Refuse a value that contains itself, nesting deeper than ``MAX_DEPTH``, or aliases that add
    more than ``MAX_ALIAS_NODES`` values.

    PyYAML builds an alias as one shared object, but SGLang's config merge writes every copy out
    (``str()``, ``json.dumps()``), so a few hundred bytes of nested aliases cost minutes and gigabytes;
    both recurse, as SGLang's pure-Python loader does, so deep nesting ends in RecursionError. Sizes and
    depths are counted once per node, iteratively: linear in the file, whatever the nesting.
    """
    cap = MAX_ALIAS_NODES * 1000  # counts stay small integers whatever the expansion
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()  # the nodes on the path from the root to the current one
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            open_nodes.discard(id(node))
            children = [id(child) for child in _children(node)]
            size[id(node)] = min(cap, 1 + sum(size[c] for c in children))
            depth[id(node)] = 1 + max((depth[c] for c in children), default=0)
            continue
        if id(node) in size:
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                src.add(
                    Severity.error,
                    "yaml-recursive-alias",
                    "this value contains itself through an alias: SGLang's config merge cannot write it "
                    "as a flag value ('Circular reference detected'); remove the alias",
                    src.at(child),
                )
                return True
            if isinstance(child, ScalarNode):  # most nodes: sized here, without a second visit
                size[id(child)] = depth[id(child)] = 1
            elif id(child) not in size:
                stack.append((child, False))
    if depth[id(root)] > MAX_DEPTH + 1:  # the root mapping is not a level of nesting
        node = root
        for _ in range(MAX_DEPTH + 1):  # follow the deepest branch to where it passes the bound
            node = max(_children(node), key=lambda child: depth[id(child)])
        src.add(
            Severity.error,
            "yaml-too-deep",
            f"values nest more than {MAX_DEPTH} levels deep here: SGLang's YAML loader fails at about 490 "
            "(RecursionError) and no configuration needs more than a few; flatten it",
            src.at(node),
        )
        return True
    if size[id(root)] - len(size) <= MAX_ALIAS_NODES:
        return False
    node = root
    while True:  # the smallest value that is too large alone: there the aliases are written
        biggest = max(_children(node), key=lambda child: size[id(child)], default=None)
        if biggest is None or size[id(biggest)] <= MAX_ALIAS_NODES:
            break
        node = biggest
    src.add(
        Severity.error,
        "yaml-alias-expansion",
        f"the aliases here expand to more than {MAX_ALIAS_NODES:,} values: SGLang's config merge writes "
        "out every copy (str(), json.dumps()), taking time and memory without bound; write the values "
        "out or use fewer aliases",
        src.at(node),
    )
    return True


def _long_integers(src: Source, root: Node) -> bool:
    """Refuse integers with more digits than Python's ``int()`` reads (4 300 unless configured)."""
    limit = sys.get_int_max_str_digits() or None
    found = False
    seen: set[int] = set()
    stack = [root]
    while stack and limit:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ScalarNode):
            long_int = node.tag == _INT_TAG and len(node.value) > limit
            count = sum(ch.isdigit() for ch in node.value) if long_int else 0
            if count > limit and not node.value.lstrip("+-").startswith(("0x", "0o", "0b")):
                src.add(
                    Severity.error,
                    "yaml-int-too-long",
                    f"this integer has {count:,} digits: SGLang's YAML loader fails on it (Python's int() "
                    f"reads at most {limit:,}), and no setting needs such a number; write a realistic value",
                    src.at(node),
                )
                found = True
        else:
            stack.extend(_children(node))
    return found


_UNHASHABLE = object()


def _key_value(node: Node) -> Any:
    """A scalar key's value as the safe constructor gives it; other keys are opaque."""
    if not isinstance(node, ScalarNode):
        return _UNHASHABLE
    if node.tag == _STR_TAG:  # most keys: the constructor would return the text itself
        return node.value
    try:
        value = SafeConstructor().construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return node.value
    return value if isinstance(value, Hashable) else node.value


def _a(kind: str) -> str:
    names = {"list": "a list", "str": "a string", "int": "a number", "float": "a number", "bool": "a boolean"}
    return names.get(kind, f"a {kind}")
