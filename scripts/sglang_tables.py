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
# The flags mmpool's rules depend on; releases.json says which of them each release has.
POOL_OPTIONS = (
    "--mm-feature-transport",
    "--keep-mm-feature-on-device",
    "--tokenizer-worker-num",
    "--tp-size",
    "--dp-size",
    "--attn-dp-size",
    "--enable-dp-attention",
    "--dwdp-size",
    "--pp-size",
    "--nnodes",
    "--base-gpu-id",
    "--encoder-only",
    "--language-only",
    "--language-model-only",
    "--disaggregation-mode",
    "--mm-preprocess-cache-size-mb",
)


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
    return [_one_per_release(members) for members in groups.values()]


def _one_per_release(members: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """Where one release splits a row into several actions (a deprecated alias that is an option
    string of the same flag elsewhere), its row gets every option string of them and the other
    attributes of the action registered first."""
    merged: dict[str, dict] = {}
    for version, opt in members:
        if version in merged:
            first = merged[version]
            first["options"] = first["options"] + [s for s in opt["options"] if s not in first["options"]]
        else:
            merged[version] = dict(opt)
    return list(merged.items())


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


def _config_keys(opt: dict) -> list[str]:
    return sorted({opt["dest"]} | {s[2:].replace("-", "_") for s in opt["options"] if s.startswith("--")})


def config_unsupported(dump: dict, keys: str) -> dict[str, str]:
    """The ``--config`` keys this release's merger refuses, with the action class it names.

    ``keys="dest"`` (up to 0.5.22): every action neither store nor store_true, by its dest.
    ``keys="spellings"`` (0.5.23): also one-value actions are supported, every long spelling
    is a key, and a key a supported action also reads stays usable.
    """
    options = [o for o in dump["options"] if "--config" not in o["options"] and "--help" not in o["options"]]
    if keys == "dest":
        return {o["dest"]: o["action"] for o in options if not (o["is_store"] or o["is_store_true"])}
    supported = [o for o in options if o["is_store_true"] or o["is_store"] or o["nargs"] is None]
    supported_keys = {k for o in supported for k in _config_keys(o)}
    return {k: o["action"] for o in options if o not in supported for k in _config_keys(o) if k not in supported_keys}


def flags_json(header: dict, dumps: dict[str, dict], rules: dict[str, dict]) -> str:
    """The text of flags.json: the refused ``--config`` keys of each release, then one row per flag."""
    unsupported = {
        v: dict(sorted(config_unsupported(dumps[v], rules[v]["config_merger"]["keys"]).items())) for v in dumps
    }
    return _document(header | {"config_unsupported": unsupported}, "flags", flag_rows(dumps))


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
        strings = {s for o in dump["options"] for s in o["options"]}
        present = sorted(s for s in POOL_OPTIONS if s in strings)
        items.append(
            {"version": version, "flags": len(dump["options"]), "stand_ins": dump["stand_ins"], **facts}
            | {"pool_flags": present}
        )
    return _document(header, "releases", items)
