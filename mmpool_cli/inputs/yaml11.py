"""YAML 1.1's readings a YAML 1.2 or JSON reader would not make: octal ``010``, base-60 ``1:30``, ``yes``/``off``.

PyYAML (mmpool's loader, and ``yaml.safe_load`` in the engines' config readers) implements YAML 1.1,
which reads ``010`` as 8, ``1:30`` as 90 and ``on`` as true. Each such plain (unquoted) scalar is a
located ``yaml-1.1-value`` finding that says what it is read as and how to write what was meant.
Pure core: PyYAML and the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

CODE = "yaml-1.1-value"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_OCTAL = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1's octal; its "0o17" is text
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_WORDS = {"yes": True, "on": True, "no": False, "off": False}
_LOADER = "PyYAML's safe_load, the engines' loader, does too"


def surprises(root: Node) -> Iterator[tuple[Node, str]]:
    """Each plain scalar under ``root`` that YAML 1.1 reads otherwise than it reads, and the message."""
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, is_key = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            stack.extend(x for k, v in reversed(node.value) for x in ((v, False), (k, True)))
        elif isinstance(node, SequenceNode):
            stack.extend((child, False) for child in reversed(node.value))
        elif isinstance(node, ScalarNode) and not node.style:  # plain: None (Python loader) or "" (C loader)
            message = _message(node, is_key)
            if message is not None:
                yield node, message


def _message(node: ScalarNode, is_key: bool) -> str | None:
    text = node.value
    quoted = f"or quote it ('{text}') to keep the text"
    if node.tag == _BOOL_TAG and text.lower() in _WORDS:
        value = "true" if _WORDS[text.lower()] else "false"
        read = f"YAML 1.1 reads {text} as {value} ({_LOADER}; YAML 1.2 and JSON read a word)"
        if is_key:
            return f"{read}: this key is the boolean {value}; quote it ('{text}') to keep the word"
        return f"{read}; write {value}, {quoted}"
    if node.tag not in (_INT_TAG, _FLOAT_TAG):
        return None
    if ":" in text and _BASE60.fullmatch(text):
        number = _base60(text)
        return f"YAML 1.1 reads {text} as the base-60 number {number} ({_LOADER}); write {number}, {quoted}"
    digits = text.lstrip("+-").replace("_", "")
    if node.tag == _INT_TAG and _OCTAL.fullmatch(text) and int(digits, 8) != int(digits):  # 07 is 7 either way
        sign = "-" if text.startswith("-") else ""
        number = f"{sign}{int(digits, 8)}"
        return (
            f"YAML 1.1 reads {text} as the octal number {number} ({_LOADER}); write {number} for that number, "
            f"{sign}{int(digits)} for the decimal one, {quoted}"
        )
    return None


def _base60(text: str) -> str:
    sign = -1 if text.startswith("-") else 1
    *whole, last = text.lstrip("+-").replace("_", "").split(":")
    value = 0
    for part in whole:
        value = value * 60 + int(part)
    if "." in last:
        seconds, _, fraction = last.partition(".")
        total = f"{value * 60 + int(seconds)}.{fraction}" if fraction else str(value * 60 + int(seconds))
        return ("-" if sign < 0 else "") + total
    return str(sign * (value * 60 + int(last)))
