"""Regenerate mmpool's tables of SGLang releases: every server flag and the pool rules of each wheel.

Maintainer-run only (never at install or test time). For every SGLang release on PyPI from
MIN_VERSION to MAX_VERSION it downloads the wheel (``pip download --no-deps``), unpacks it,
and then:

- builds SGLang's own parser in a subprocess (``ServerArgs.add_cli_args(ArgumentParser())``,
  with ``PYTHONPATH`` on the unpacked wheel and the ``SGLANG_*``/``SGL_*`` environment stripped)
  and dumps every option: strings, dest, action, nargs, type, choices, default;
- parses a list of argvs with that real parser and records what it accepted or refused
  (``tests/data/sglang_parser_probes.json``, which the tests replay without network);
- reads the pool rules from the source without importing it (``sglang_rules.py``), failing
  loudly on a shape it does not know.

Writes ``mmpool_cli/engines/sglang/data/releases.json`` (the pool rules per release, small, loaded by
``mmpool plan``) and ``mmpool_cli/engines/sglang/data/flags.json`` (one row per flag, loaded only when
argv or a config file is checked).

The interpreter that builds the parsers (``--python``) needs SGLang's import-time dependencies:
torch, numpy, transformers, openai and their kind (see docs/releases.md). The few
modules named in ``sglang_dump.STAND_INS`` are replaced by empty stand-ins when it lacks them.

Usage::

    python scripts/gen_sglang_tables.py --python /path/to/sglang-deps/bin/python [--cache DIR]
    python scripts/gen_sglang_tables.py --python ... --check    # regenerate in memory and diff
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_rules  # noqa: E402
import sglang_tables  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "mmpool_cli" / "engines" / "sglang" / "data"
RELEASES_JSON = DATA / "releases.json"
FLAGS_JSON = DATA / "flags.json"
PROBES_JSON = ROOT / "tests" / "data" / "sglang_parser_probes.json"
DUMP = Path(__file__).resolve().parent / "sglang_dump.py"
GENERATOR = "scripts/gen_sglang_tables.py"

MIN_VERSION = "0.5.10"
MAX_VERSION = "0.5.23"


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a release string like ``0.5.13.post1`` (final releases only)."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    if m is None:
        raise SystemExit(f"unexpected SGLang version string {version!r}: teach version_key about it")
    major, minor, patch, post = m.groups()
    return int(major), int(minor), int(patch), int(post or 0)


def pypi_versions(python: str) -> list[str]:
    """The SGLang releases on PyPI from MIN_VERSION to MAX_VERSION, oldest first."""
    out = subprocess.run(
        [python, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True, check=True
    ).stdout
    m = re.search(r"Available versions: (.+)", out)
    if m is None:
        raise SystemExit(f"could not read the SGLang versions from `pip index versions sglang`:\n{out}")
    lo, hi = version_key(MIN_VERSION), version_key(MAX_VERSION)
    found = [v.strip() for v in m.group(1).split(",")]
    found = [v for v in found if re.fullmatch(r"[\d.]+(?:\.post\d+)?", v) and lo <= version_key(v) <= hi]
    return sorted(found, key=version_key)


def unpacked(version: str, cache: Path) -> Path:
    """The unpacked wheel of ``version`` under ``cache`` (downloaded and unpacked once)."""
    src = cache / version / "src"
    if (src / "sglang").is_dir():
        return src
    wheel_dir = cache / version
    wheels = sorted(wheel_dir.glob("sglang-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(wheel_dir)],
            check=True,
        )
        wheels = sorted(wheel_dir.glob("sglang-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one sglang wheel in {wheel_dir}, found {[w.name for w in wheels]}")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith("sglang/")])
    return src


def dump_parser(python: str, src: Path, probes: list[list[str]], fresh: bool) -> dict:
    """Run ``sglang_dump.py`` on one unpacked wheel: its options and the probes' outcomes.

    A dump takes about 15 s (SGLang imports torch and transformers), so it is kept next to the
    wheel, keyed by the dump script and the probes; ``fresh`` rebuilds it.
    """
    key = hashlib.sha256(DUMP.read_bytes() + json.dumps(probes).encode() + python.encode()).hexdigest()[:16]
    cached = src.parent / f"dump-{key}.json"
    if cached.exists() and not fresh:
        return json.loads(cached.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    env["PYTHONPATH"] = str(src)
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(
        [python, str(DUMP)],
        input=json.dumps(probes),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(src),
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"building the parser of {src} failed:\n{proc.stderr[-4000:]}")
    cached.write_text(proc.stdout)
    return json.loads(proc.stdout)


def generate(python: str, cache: Path, versions: list[str], fresh: bool, jobs: int) -> dict[Path, str]:
    """Every generated file's path and text."""
    sources = {v: unpacked(v, cache) for v in versions}
    # First pass: every option of every release, to know which probes to run.
    with ThreadPoolExecutor(jobs) as pool:
        first = pool.map(lambda v: dump_parser(python, sources[v], [], fresh), versions)
        dumps = dict(zip(versions, first, strict=True))
        probes = sglang_tables.probe_argvs(dumps)
        second = pool.map(lambda v: dump_parser(python, sources[v], probes, fresh), versions)
        dumps = dict(zip(versions, second, strict=True))
    rules = {}
    for v in versions:
        transport = [o for o in dumps[v]["options"] if "--mm-feature-transport" in o["options"]]
        choices = transport[0]["choices"] if transport else None
        rules[v] = sglang_rules.extract(v, sources[v], bool(transport), choices)
    header = {
        "generator": GENERATOR,
        "source": "SGLang wheels from PyPI (pip download --no-deps)",
        "versions": versions,
    }
    return {
        RELEASES_JSON: sglang_tables.releases_json(header, rules, dumps),
        FLAGS_JSON: sglang_tables.flags_json(header, dumps, rules),
        PROBES_JSON: sglang_tables.probes_json(header, probes, dumps),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter with SGLang's import-time deps")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mmpool-sglang-wheels"), help="wheel cache")
    parser.add_argument("--versions", nargs="*", help="only these versions (default: every one on PyPI)")
    parser.add_argument("--check", action="store_true", help="regenerate in memory, diff, exit 1 on any change")
    parser.add_argument("--jobs", type=int, default=2, help="parsers built at once (each imports torch)")
    parser.add_argument("--fresh", action="store_true", help="rebuild every parser dump, ignoring the cache")
    args = parser.parse_args()

    versions = args.versions or pypi_versions(args.python)
    print(f"SGLang releases {MIN_VERSION}..{MAX_VERSION} on PyPI: {', '.join(versions)}", file=sys.stderr)
    out = generate(args.python, args.cache, versions, args.fresh, args.jobs)
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
        verdict = f"{changed} generated file(s) differ" if changed else "generated tables are up to date"
        print(verdict, file=sys.stderr)
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
