"""Child process of gen_sglang_tables.py: build one SGLang release's server parser and dump it.

Runs with ``PYTHONPATH`` on an unpacked SGLang wheel. Reads a JSON list of argvs on stdin, writes
JSON on stdout: every option of ``ServerArgs.add_cli_args(ArgumentParser())`` and, for each argv,
whether that parser accepted it (or the message argparse exited with). Uses only the standard
library besides SGLang and its dependencies.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import sys
import types

# Optional modules some older wheels import at module level although building the parser needs
# nothing from them. Stood in only when the interpreter lacks them; the dump records which were.
STAND_INS = ("xgrammar", "partial_json_parser", "sentencepiece", "outlines", "llguidance", "decord")

_MARK = "mmpool-stand-in"


class _StandIn(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__module__": self.__name__, "__doc__": _MARK})


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    used: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top not in STAND_INS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                return None
        self.used.add(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        return None


class _Refused(Exception):
    pass


def _plain(value):
    """A JSON-safe rendering of an argparse attribute (stand-ins are refused loudly)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType):
        text = f"{value.__module__}.{value.__qualname__}"
    else:
        text = repr(value)
    if _MARK in text or "_StandIn" in text:
        raise SystemExit(f"a stand-in module leaked into the parser: {text}")
    return text


def main() -> int:
    probes = json.load(sys.stdin)
    finder = _StandInFinder()
    sys.meta_path.insert(0, finder)
    logging.disable(logging.CRITICAL)
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)

    options = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        options.append(
            {
                "options": list(action.option_strings),
                "dest": action.dest,
                "action": type(action).__name__,
                "nargs": _plain(action.nargs),
                "type": _plain(action.type),
                "choices": None if action.choices is None else sorted(_plain(list(action.choices)), key=str),
                "default": _plain(action.default),
                "required": bool(action.required),
                # what SGLang's --config merger tests with isinstance
                "is_store": isinstance(action, argparse._StoreAction),
                "is_store_true": isinstance(action, argparse._StoreTrueAction),
            }
        )

    def refuse(message):
        raise _Refused(message)

    parser.error = refuse
    outcomes = []
    for argv in probes:
        try:
            parser.parse_args(argv)
        except _Refused as exc:
            outcomes.append(str(exc))
        except SystemExit as exc:  # an action that exits by itself
            outcomes.append(f"exit {exc.code}")
        else:
            outcomes.append(None)
    json.dump({"options": options, "outcomes": outcomes, "stand_ins": sorted(finder.used)}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
