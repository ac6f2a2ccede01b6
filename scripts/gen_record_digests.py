"""Write ``mmpool_cli/_record/mmpool_record/digests.json`` from SGLang's and vLLM's wheels (or unpacked trees).

    python scripts/gen_record_digests.py sglang-0.5.1*.whl sglang-0.5.2*.whl vllm-0.3*.whl
    python scripts/gen_record_digests.py --merge sglang-0.5.23-*.whl   # add to the file as it is

Every release the hook knows is given at once (the file is written whole); ``--merge`` adds the given
wheels' digests to the file instead (a module newly among the targets, from the wheels at hand: the
scheduler's ``mm_schedule.py`` was added so, from 0.5.23's wheel). Each wheel's release is
read from its file name (a directory: from its ``*.dist-info``). Only the methods' digests are
written, never the engines' code.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mmpool_cli", "_record"))

from mmpool_record.digest import DIGESTS_FILE, TARGETS, module_digests  # noqa: E402

VMM = "sglang.srt.utils.cuda_vmm_transport_utils"
# (module, release) whose code the hook's wrappers do not fit, though each method may match another
# release's: left out, so the hook leaves that pool alone (docs/record.md says why)
NOT_RECORDED = {
    (VMM, release): "its _recycle_chunks frees without _merge_chunks (the loop merges after it): "
    "the tick's frees would be lost"
    for release in ("0.5.18", "0.5.19", "0.5.20", "0.5.21")
}


def _sources(path: str) -> tuple[str, dict[str, str]]:
    """The release and ``module -> source`` of a wheel or an unpacked tree."""
    files = {module: module.replace(".", "/") + ".py" for module in TARGETS}
    if os.path.isdir(path):
        info = glob.glob(os.path.join(path, "sglang-*.dist-info")) + glob.glob(os.path.join(path, "vllm-*.dist-info"))
        release = re.sub(r"^(sglang|vllm)-|\.dist-info$", "", os.path.basename(info[0])) if info else "unknown"
        found = {}
        for module, rel in files.items():
            full = os.path.join(path, rel)
            if os.path.exists(full):
                with open(full, encoding="utf-8") as f:
                    found[module] = f.read()
        return release, found
    release = os.path.basename(path).split("-")[1]
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        return release, {m: z.read(rel).decode("utf-8") for m, rel in files.items() if rel in names}


def main(paths: list[str]) -> None:
    """Digest every target method of every wheel and write digests.json (``--merge``: add to it)."""
    modules: dict[str, dict[str, dict[str, list[str]]]] = {}
    if paths[:1] == ["--merge"]:
        paths = paths[1:]
        with open(DIGESTS_FILE, encoding="utf-8") as f:
            modules = json.load(f)["modules"]
    for path in paths:
        release, found = _sources(path)
        sources = {}
        for module, source in found.items():
            if (module, release) in NOT_RECORDED:
                print(f"{release}: {module} left out: {NOT_RECORDED[module, release]}")
            else:
                sources[module] = source
        for module, source in sources.items():
            for name, digest in module_digests(source, module).items():
                releases = modules.setdefault(module, {}).setdefault(name, {}).setdefault(digest, [])
                if release not in releases:
                    releases.append(release)
        print(f"{release}: {', '.join(sorted(sources)) or 'no pool module'}")
    data = {
        "format": 1,
        "how": "sha256 of each method's source text, dedented (mmpool_record/digest.py); "
        "written by scripts/gen_record_digests.py",
        "modules": modules,
    }
    with open(DIGESTS_FILE, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
