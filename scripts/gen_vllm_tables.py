"""Regenerate mmpool's tables of vLLM releases: every ``vllm serve`` flag and the multimodal memory rules.

Maintainer-run only (never at install or test time). For every vLLM release on PyPI from
MIN_VERSION to MAX_VERSION it downloads the wheel (``pip download --no-deps``), unpacks its Python
files, and then:

- builds the release's own ``vllm serve`` parser in a subprocess (``make_arg_parser`` on a
  ``FlexibleArgumentParser``: the frontend arguments plus ``AsyncEngineArgs.add_cli_args``), with
  ``PYTHONPATH`` on the unpacked wheel, ``VLLM_TARGET_DEVICE=cpu`` (no GPU is needed to build it)
  and the ``VLLM_*`` environment otherwise stripped, and dumps every option;
- parses a list of argvs with that real parser and records what it accepted (and the values it
  read for the flags mmpool models) or refused (``tests/data/vllm_parser_probes.json``, which the
  tests replay without network);
- reads the multimodal memory rules from the source without importing it (``vllm_rules.py``),
  failing loudly on a shape it does not know.

Writes ``mmpool_cli/engines/vllm/data/flags.json`` (one row per flag with the releases that have it
and where its attributes changed, the same shape as SGLang's) and
``mmpool_cli/engines/vllm/data/releases.json`` (the rules per release, small).

The interpreter (``--python``) needs torch and transformers (the shared venv has both); the rest of
vLLM's import-time dependencies are pure-Python packages installed once into ``--deps``::

    pip install --target /tmp/vllm-deps openai cachetools msgspec fastapi pybase64 blake3 cbor2 \\
        prometheus_client prometheus-fastapi-instrumentator partial-json-parser cloudpickle \\
        openai-harmony mistral_common tiktoken lark gguf einops diskcache pyzmq uvloop \\
        setproctitle watchfiles lm-format-enforcer anthropic ijson py-cpuinfo psutil
    python scripts/gen_vllm_tables.py --deps /tmp/vllm-deps
    python scripts/gen_vllm_tables.py --deps /tmp/vllm-deps --check   # diff only, exit 1 on a change

Modules still missing (``vllm_dump.STAND_INS``) are replaced by empty stand-ins, recorded per release.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_tables  # noqa: E402  (the release-merging logic is engine-neutral)
import vllm_rules  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "mmpool_cli" / "engines" / "vllm" / "data"
FLAGS_JSON = DATA / "flags.json"
RELEASES_JSON = DATA / "releases.json"
PROBES_JSON = ROOT / "tests" / "data" / "vllm_parser_probes.json"
DUMP = Path(__file__).resolve().parent / "vllm_dump.py"
GENERATOR = "scripts/gen_vllm_tables.py"

MIN_VERSION = "0.30.0"
MAX_VERSION = "0.34.0"

BASE_ARGV = ["Qwen/Qwen2.5-VL-7B-Instruct"]
# Argvs beyond one option each: how the parser reads the values mmpool models, prefixes, spellings.
EXTRA_PROBES = (
    [
        ["--mm-processor-cache-gb", v]
        for v in (
            "4",
            "0",
            "1e-7",
            "-1",
            "inf",
            "nan",
            "4_0",
            " 4 ",
            "0x10",
            "1GB",
            "1,5",
            "",
            "\u0661",
            "0.1",
            "0.99999999999999999999",
            "1e309",
            "123456789012345678901234567890",
        )
    ]
    + [["--mm-ipc-gpu-memory-gb", v] for v in ("1e-7", "0.5", "-0.5", "x", "1e-9")]
    + [
        ["--mm_processor_cache_gb", "2"],
        ["--mm-processor-cache-gb=2"],
        ["--mm-processor-cache", "2"],
        ["--mm-processor-cache-t", "shm"],
        ["--mm-processor-cache-type", "none"],
        ["--max-num-batched-tokens", "16k"],
        ["--max-num-batched-tokens", "16K"],
        ["--max-num-batched-tokens", "1.5k"],
        ["--max-num-batched-tokens", "16384"],
        ["--max-num-batched-tokens", "-5"],
        ["--max-model-len", "128k"],
        ["--max-model-len", "auto"],
        ["--max-model-len", "-1"],
        ["--limit-mm-per-prompt", '{"video": 0}'],
        ["--limit-mm-per-prompt", '{"image": 4, "video": 0}'],
        ["--limit-mm-per-prompt.video", "0"],
        ["--limit-mm-per-prompt", "video=0"],
        ["-dp", "4"],
        ["--data-parallel-size", "4", "--data-parallel-rank", "1"],
        ["--data-parallel-size", "4", "--data-parallel-external-lb"],
        ["--data-parallel-size", "4", "--data-parallel-hybrid-lb", "--data-parallel-size-local", "1"],
        ["--data-parallel-size", "4", "--api-server-count", "2"],
        ["-asc", "0"],
        ["--performance-mode", "throughput"],
        ["--no-such-flag"],
        ["--model", "other/model"],
    ]
)


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a final release string like ``0.34.0`` (or ``0.10.1.1``)."""
    if re.fullmatch(r"\d+(?:\.\d+){2,3}", version) is None:
        raise SystemExit(f"unexpected vLLM version string {version!r}: teach version_key about it")
    return tuple(int(p) for p in version.split("."))


def pypi_versions(python: str) -> list[str]:
    """The vLLM releases on PyPI from MIN_VERSION to MAX_VERSION, oldest first."""
    out = subprocess.run(
        [python, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True, check=True
    ).stdout
    m = re.search(r"Available versions: (.+)", out)
    if m is None:
        raise SystemExit(f"could not read the vLLM versions from `pip index versions vllm`:\n{out}")
    lo, hi = version_key(MIN_VERSION), version_key(MAX_VERSION)
    found = [v.strip() for v in m.group(1).split(",")]
    found = [v for v in found if re.fullmatch(r"\d+(?:\.\d+){2,3}", v) and lo <= version_key(v) <= hi]
    return sorted(found, key=version_key)


def unpacked(version: str, cache: Path) -> Path:
    """The unpacked wheel (its Python files) of ``version`` under ``cache``, downloaded once."""
    src = cache / version / "src"
    if (src / "vllm" / "entrypoints").is_dir():
        return src
    wheel_dir = cache / version
    wheels = sorted(wheel_dir.glob("vllm-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"vllm=={version}", "-d", str(wheel_dir)],
            check=True,
        )
        wheels = sorted(wheel_dir.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one vllm wheel in {wheel_dir}, found {[w.name for w in wheels]}")
    keep = (".py", ".json", ".jinja", ".typed")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(keep)])
    return src


def run_on_vllm(
    python: str, deps: Path, cache: Path, version: str, constants: dict[str, object], child: str, timeout: int
) -> dict:
    """Run ``child`` (the text of a program) on vLLM ``version``'s unpacked wheel, on the CPU, with ``deps``
    and the interpreter's transformers: ``SCRIPTS``, ``VLLM`` and ``TRANSFORMERS`` (their folders) and
    ``constants`` are set before it; it prints one JSON object, returned."""
    src = unpacked(version, cache)
    transformers_dir = subprocess.run(
        [python, "-c", "import transformers, os; print(os.path.dirname(transformers.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    head = {"SCRIPTS": str(Path(__file__).resolve().parent), "VLLM": str(src), "TRANSFORMERS": transformers_dir}
    code = "\n".join([*(f"{name} = {value!r}" for name, value in {**head, **constants}.items()), child])
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env |= {"PYTHONPATH": f"{src}{os.pathsep}{deps}", "CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=str(src), timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"running vLLM {version}'s code failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def dump_parser(python: str, deps: Path | None, src: Path, probes: list[list[str]], fresh: bool) -> dict:
    """Run ``vllm_dump.py`` on one unpacked wheel: its options and the probes' outcomes (cached)."""
    key = hashlib.sha256(DUMP.read_bytes() + json.dumps(probes).encode() + python.encode()).hexdigest()[:16]
    cached = src.parent / f"dump-{key}.json"
    if cached.exists() and not fresh:
        return json.loads(cached.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(src)] + ([str(deps)] if deps else []))
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["VLLM_TARGET_DEVICE"] = "cpu"
    proc = subprocess.run(
        [python, str(DUMP)],
        input=json.dumps(probes),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(src),
        timeout=900,
    )
    if proc.returncode != 0:
        raise SystemExit(f"building the parser of {src} failed:\n{proc.stderr[-4000:]}")
    cached.write_text(proc.stdout)
    return json.loads(proc.stdout)


def probe_argvs(dumps: dict[str, dict]) -> list[list[str]]:
    """Each option string once with a value of its type, then the extras; all after the model."""
    seen: dict[str, list[str]] = {}
    for dump in dumps.values():
        for opt in dump["options"]:
            for string in opt["options"]:
                if string not in ("--help", "-h", "--config", "--version"):
                    seen.setdefault(string, [string, *sglang_tables._value_for(opt)])
    return [BASE_ARGV] + [BASE_ARGV + seen[s] for s in sorted(seen)] + [BASE_ARGV + a for a in EXTRA_PROBES]


def probes_json(header: dict, probes: list[list[str]], dumps: dict[str, dict]) -> str:
    """Each argv and what each release's parser made of it: the error, or the values it read that
    differ from the model-only argv (the first probe), grouped by the releases that agree."""
    bases = {v: d["outcomes"][0]["namespace"] for v, d in dumps.items()}
    items = [{"argv": probes[0], "namespace": bases}]
    for i, argv in enumerate(probes[1:], start=1):
        groups: dict[str, list[str]] = {}
        for v, d in dumps.items():
            got = d["outcomes"][i]
            if "error" in got:
                # a converter's repr carries its address, which differs between runs
                shown = {"error": re.sub(r" at 0x[0-9a-f]+>", ">", got["error"])[:300]}
            else:
                shown = {"read": {k: x for k, x in got["namespace"].items() if bases[v].get(k) != x}}
            groups.setdefault(json.dumps(shown, sort_keys=True), []).append(v)
        items.append({"argv": argv, "outcomes": [json.loads(k) | {"releases": vs} for k, vs in groups.items()]})
    return sglang_tables._document(header, "probes", items)


def releases_json(header: dict, rules: dict[str, dict], dumps: dict[str, dict]) -> str:
    items = []
    for version, facts in rules.items():
        dump = dumps[version]
        items.append(
            {
                "version": version,
                "flags": len(dump["options"]),
                "parser_module": dump["module"],
                "stand_ins": dump["stand_ins"],
                "model_default": next(o["default"] for o in dump["options"] if o["dest"] == "model"),
                **facts,
            }
        )
    return sglang_tables._document(header, "releases", items)


def flags_json(header: dict, dumps: dict[str, dict]) -> str:
    for dump in dumps.values():  # the SGLang merger's attributes
        for o in dump["options"]:
            o.setdefault("is_store", o["action"] == "_StoreAction")
    return sglang_tables._document(header, "flags", sglang_tables.flag_rows(dumps))


def generate(python: str, deps: Path | None, cache: Path, versions: list[str], fresh: bool) -> dict[Path, str]:
    sources = {v: unpacked(v, cache) for v in versions}
    first = {v: dump_parser(python, deps, sources[v], [], fresh) for v in versions}
    probes = probe_argvs(first)
    dumps = {v: dump_parser(python, deps, sources[v], probes, fresh) for v in versions}
    rules = {v: vllm_rules.extract(v, sources[v]) for v in versions}
    header = {
        "generator": GENERATOR,
        "source": "vLLM wheels from PyPI (pip download --no-deps); parsers built with VLLM_TARGET_DEVICE=cpu",
        "versions": versions,
    }
    return {
        FLAGS_JSON: flags_json(header, dumps),
        RELEASES_JSON: releases_json(header, rules, dumps),
        PROBES_JSON: probes_json(header, probes, dumps),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch and transformers")
    parser.add_argument("--deps", type=Path, help="a pip --target folder with vLLM's other import-time deps")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mmpool-vllm-wheels"), help="wheel cache")
    parser.add_argument("--versions", nargs="*", help="only these versions (default: every one on PyPI)")
    parser.add_argument("--check", action="store_true", help="regenerate in memory, diff, exit 1 on any change")
    parser.add_argument("--fresh", action="store_true", help="rebuild every parser dump, ignoring the cache")
    args = parser.parse_args()

    versions = args.versions or pypi_versions(args.python)
    print(f"vLLM releases {MIN_VERSION}..{MAX_VERSION} on PyPI: {', '.join(versions)}", file=sys.stderr)
    out = generate(args.python, args.deps, args.cache, versions, args.fresh)
    changed = 0
    for path, text in out.items():
        old = path.read_text() if path.exists() else ""
        if old == text:
            continue
        changed += 1
        if args.check:
            rel = path.relative_to(ROOT)
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), f"a/{rel}", f"b/{rel}", lineterm="")
            print("\n".join(list(diff)[:200]))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    if args.check:
        print(f"{changed} generated file(s) differ" if changed else "generated tables are up to date", file=sys.stderr)
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
