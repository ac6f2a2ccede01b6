"""The compiled simulator where things go wrong: memory that runs out at any allocation, Ctrl-C in a
long replay, a read of memory never written; and its refusal codes, the same as the Python reader's.

Memory that runs out is made with a build of ``_fastsim.c`` for tests (``-DMMPOOL_FAILPOINTS``): the
sanitizer step of ``.ci/run`` builds the extension so; elsewhere the test compiles that build itself.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from array import array
from pathlib import Path
from types import ModuleType

import pytest

from mmpool_cli.kernels import native
from mmpool_cli.traces.order import REFUSALS

FAST = native.FAST
built = pytest.mark.skipif(FAST is None, reason="the compiled simulator was not built (no C compiler)")
SOURCE = Path(native.__file__).with_name("_fastsim.c")
ROOT = SOURCE.parents[2]


def _columns(events: list[tuple[int, int, int, int, int]]) -> tuple[array, ...]:
    t, op, key, nbytes, worker = zip(*events, strict=True)
    return array("q", t), array("b", op), array("q", key), array("q", nbytes), array("l", worker)


def _replay(module: ModuleType, events: list[tuple[int, int, int, int, int]], workers: int = 2) -> tuple:
    # 1 GiB pools, recycled every 10 ms, 4 KiB alignment, 10,000 leases, offsets recorded, no stop
    return module.replay(
        *_columns(events), workers, 1 << 30, 0, 10**7, 4096, 10_000, True, -1, 2**64 - 1, 2**64 - 1, False
    )


def _scattered(n: int) -> list[tuple[int, int, int, int, int]]:
    """n leases of varied sizes on each of two workers, every other one given back: n free ranges a
    pool that are never joined, so its list of ranges splits blocks and its maps grow."""
    events = [(0, 0, k, 4096 * (1 + k % 7), k % 2) for k in range(2 * n)]
    events += [(1, 1, k, 0, 0) for k in range(0, 2 * n, 4)] + [(1, 1, k, 0, 0) for k in range(1, 2 * n, 4)]
    events.append((10**8, 0, 2 * n, 4096, 0))  # after the tick: it gives the ranges back, then this alloc
    return events


@built
def test_the_refusal_codes_are_the_compiled_readers() -> None:
    assert FAST is not None
    assert FAST.REFUSALS == REFUSALS


def _build(where: Path, *flags: str) -> Path:
    """_fastsim.c built here with flags (its allocation hook, say): for the tests that need a build other
    than the one in place, or one whatever the build in place was made with (the sanitizers' own)."""
    cc = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the extension with")
    out = where / ("_fastsim" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("Python's headers are not installed (python3-dev): the extension cannot be built")
    includes = [f"-I{sysconfig.get_paths()[k]}" for k in ("include", "platinclude")]
    command = [cc, "-shared", "-fPIC", "-O2", "-g", "-std=c11", *flags, *includes, str(SOURCE), "-o", str(out)]
    subprocess.run(command, check=True, capture_output=True)
    return out


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_fastsim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The extension with its allocation hook: the one built in place if so built, else one built here."""
    if FAST is not None and hasattr(FAST, "_failpoint"):
        return FAST
    return _load(_build(tmp_path_factory.mktemp("failpoints"), "-DMMPOOL_FAILPOINTS"))


def _every_failure(failing: ModuleType, run) -> list[str]:  # type: ignore[no-untyped-def]
    """Run once per allocation with that allocation failing: each gives MemoryError, and leaves no block
    held and no block of a list full (a list's next insert into it would write past its end)."""
    held = failing._failpoint_state()[0]
    whole = run()
    where = []
    for n in range(100_000):
        failing._failpoint(n)
        try:
            with pytest.raises(MemoryError):
                run()
        except pytest.fail.Exception:
            break  # no n-th allocation: the run was whole
        finally:
            failing._failpoint(-1)
        live, site, full = failing._failpoint_state()
        where.append(site)
        assert (live, full) == (held, 0), (n, site)
    assert run() == whole
    return where


def test_a_replay_out_of_memory_at_any_allocation_keeps_nothing_and_breaks_nothing(failing: ModuleType) -> None:
    events = _scattered(150)
    where = _every_failure(failing, lambda: _replay(failing, events))
    # among them the places of the defects: a map's growth (map_init), a block's split (list_insert)
    assert {"map_init", "list_insert", "grow_to"} <= set(where), sorted(set(where))


def test_a_replaying_reader_out_of_memory_at_any_allocation_keeps_nothing(failing: ModuleType) -> None:
    lines = [
        f'{{"t": {t}, "op": "free", "id": "r{k}"}}'
        if op
        else f'{{"t": {t}, "op": "alloc", "id": "r{k}", "bytes": {b}, "worker": {w}}}'
        for t, op, k, b, w in _scattered(120)
    ]
    data = ("\n".join(lines) + "\n").encode()

    def run() -> tuple:
        reader = failing.TraceReader(2, 10**6, False, False, (), (1 << 30, 0, 10**7, 4096, 10_000))
        assert reader.feed(data, 0, 1, 4096) == (len(data), len(lines) + 1, False)
        return reader.answer()

    assert "list_insert" in _every_failure(failing, run)


@built
def test_ctrl_c_stops_a_long_replay() -> None:
    """SIGALRM's handler, raising as Ctrl-C's does, runs within the replay (whose columns it holds, so
    the op column cannot be resized) and stops it there, rather than once its millions of events end."""
    assert FAST is not None
    n = 1 << 23
    ops = bytearray(n)  # allocs of 1 byte, every one of key 0, at t=0: 8.4 M events, a second or so
    seen: list[bool] = []

    def stop(signum: int, frame: object) -> None:
        try:
            ops.extend(b"\0")
        except BufferError:  # held by the replay: the handler runs inside it
            seen.append(True)
        else:
            del ops[-1]
            seen.append(False)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        zeros = memoryview(bytes(8 * n))  # calloc's pages: read, never written, they take no memory
        columns = (zeros.cast("q"), ops, zeros.cast("q"), array("q", [1]) * n, zeros.cast("l"))
        signal.setitimer(signal.ITIMER_REAL, 0.01)  # the replay takes 0.1 s or more
        with pytest.raises(KeyboardInterrupt):
            FAST.replay(*columns, 1, 1 << 30, 0, 10**7, 4096, 10_000, False, -1, 2**64 - 1, 2**64 - 1, False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert seen == [True]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (.ci/run installs it)")
def test_no_memory_is_read_before_it_is_written(tmp_path: Path) -> None:
    """A pool's first free range goes into an empty list: valgrind sees every value the replay's
    branches read, and none is one never written (the list's last items, before it had any)."""
    plain = _build(tmp_path)  # not the build in place, which may be the sanitizers' (valgrind runs neither)
    script = (
        "import sys\n"
        "from tests.pools.test_native_failures import _load, _replay, _scattered\n"
        "_replay(_load(__import__('pathlib').Path(sys.argv[1])), _scattered(80))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "ASAN_", "UBSAN_"))}
    env.update(PYTHONMALLOC="malloc", PYTHONPATH=str(ROOT), MMPOOL_PURE_PYTHON="1")  # the in-place build unread
    done = subprocess.run(
        [
            "valgrind",
            "--error-exitcode=99",
            "--errors-for-leak-kinds=none",
            "--num-callers=30",
            sys.executable,
            "-c",
            script,
            str(plain),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    blocks = re.split(r"^==\d+== ?$", done.stderr, flags=re.M)  # one error a block
    errors = [block for block in blocks if "_fastsim.c" in block and "uninitialised" in block]
    assert not errors, "\n".join(errors[:3])
