"""Merge per-release parser dumps into mmpool's tables (used by gen_sglang_tables.py).

A flag is matched across releases by any option string it shares with itself in another release
(0.5.10 spelled ``tensor_parallel_size`` where 0.5.23 has ``tp_size``, but both have ``--tp-size``).
Each row keeps the releases that have it and the change points of every attribute: the first
release a value holds from, carried forward until the next change point.
"""

from __future__ import annotations

import json

ATTRS = ("options", "dest", "action", "nargs", "type", "choices", "default")
# Probes that are not one option alone: prefixes argparse resolves or refuses as ambiguous,
# and the pool flags together.
EXTRA_PROBES = [
    ["--mm-feature-trans", "cpu"],
    ["--keep-mm-feature"],
    ["--attn-dp", "2"],
    ["--enable-m"],
    ["--tp", "2"],
    ["--tokenizer-worker", "2"],
    ["--no-such-flag"],
    ["--dp-size", "2", "--enable-dp-attention", "--tp-size", "4"],
    ["--mm-feature-transport", "cuda_vmm", "--pp-size", "2"],
    ["--mm-feature-transport", "cuda_ipc", "--keep-mm-feature-on-device"],
]
BASE_ARGV = ["--model-path", "m"]


def _rows(dumps: dict[str, dict]) -> list[list[tuple[str, dict]]]:
    """Group every release's options into rows: (version, option dump) pairs linked by option strings."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for dump in dumps.values():
        for opt in dump["options"]:
            first = opt["options"][0]
            for other in opt["options"][1:]:
                parent[find(other)] = find(first)
            find(first)
    groups: dict[str, list[tuple[str, dict]]] = {}
    for version, dump in dumps.items():
        for opt in dump["options"]:
            groups.setdefault(find(opt["options"][0]), []).append((version, opt))
    for members in groups.values():
        seen = [v for v, _ in members]
        if len(seen) != len(set(seen)):
            raise SystemExit(f"two options of one release share an option string: {members[0][1]['options']}")
    return list(groups.values())


def _spans(present: list[str], versions: list[str]) -> list[list[str]]:
    spans: list[list[str]] = []
    for i, v in enumerate(versions):
        if v not in present:
            continue
        if spans and versions[i - 1] == spans[-1][1]:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return spans


def _changes(members: list[tuple[str, dict]], attr: str) -> list[list]:
    out: list[list] = []
    for version, opt in members:
        if not out or out[-1][1] != opt[attr]:
            out.append([version, opt[attr]])
    return out


def flag_rows(dumps: dict[str, dict]) -> list[dict]:
    """One row per flag, sorted by its newest first option string."""
    versions = list(dumps)
    rows = []
    for members in _rows(dumps):
        members.sort(key=lambda m: versions.index(m[0]))
        row = {"flag": members[-1][1]["options"][0], "spans": _spans([v for v, _ in members], versions)}
        row |= {attr: _changes(members, attr) for attr in ATTRS}
        rows.append(row)
    rows.sort(key=lambda r: r["flag"])
    return rows


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


def _document(header: dict, key: str, items: list) -> str:
    """JSON with the header first and one item per line, so a regeneration diffs line by line."""
    lines = ["{", *(f"{_dumps(k)}:{_dumps(v)}," for k, v in header.items()), f"{_dumps(key)}:["]
    lines += [_dumps(item) + ("," if i < len(items) - 1 else "") for i, item in enumerate(items)]
    lines += ["]}", ""]
    return "\n".join(lines)


def flags_json(header: dict, dumps: dict[str, dict]) -> str:
    """The text of flags.json: every server flag of every release, one row per line."""
    return _document(header, "flags", flag_rows(dumps))


def _value_for(opt: dict) -> list[str]:
    if opt["nargs"] == 0:
        return []
    if opt["choices"]:
        return [str(opt["choices"][0])]
    typ = opt["type"] or ""
    if typ.endswith("int"):
        return ["1"]
    if typ.endswith("float"):
        return ["0.5"]
    return ["x"]


def probe_argvs(dumps: dict[str, dict]) -> list[list[str]]:
    """Argvs to run through every release's real parser: each option string once, then the extras."""
    seen: dict[str, list[str]] = {}
    for dump in dumps.values():
        for opt in dump["options"]:
            for string in opt["options"]:
                seen.setdefault(string, [string, *_value_for(opt)])
    probes = [BASE_ARGV + seen[s] for s in sorted(seen) if s not in BASE_ARGV]
    return probes + [BASE_ARGV + extra for extra in EXTRA_PROBES]


def probes_json(header: dict, probes: list[list[str]], dumps: dict[str, dict]) -> str:
    """The text of the recorded fixture: each argv and what each release's parser said about it."""
    items = [
        {"argv": argv, "refused": {v: d["outcomes"][i][:300] for v, d in dumps.items() if d["outcomes"][i] is not None}}
        for i, argv in enumerate(probes)
    ]
    return _document(header, "probes", items)


def releases_json(header: dict, rules: dict[str, dict], dumps: dict[str, dict]) -> str:
    """The text of releases.json: each release's pool facts, the flag count and the stand-ins used."""
    items = []
    for version, facts in rules.items():
        dump = dumps[version]
        items.append({"version": version, "flags": len(dump["options"]), "stand_ins": dump["stand_ins"], **facts})
    return _document(header, "releases", items)
