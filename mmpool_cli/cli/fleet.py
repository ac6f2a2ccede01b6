"""How a fleet's traffic files are read, for ``trace`` and ``simulate --from`` alike: here, one after
another, or in parallel as Ray tasks (``--executor ray``), with a progress line on a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from mmpool_cli.cli.simulate_options import ExecutorChoice

if TYPE_CHECKING:
    from mmpool_cli.inputs.traffic.model import FileMap


@contextmanager
def file_reader(
    executor: ExecutorChoice, address: str | None, shown: int, *, command: str, job: str, unfinished: str
) -> Iterator[FileMap]:
    """How the files are read, and a progress line (files read / ``shown``) on a terminal when ``shown``;
    ``job`` and ``unfinished`` say in a lost cluster's error what failed and what it left.

    Ray is imported only for ``--executor ray``, and shut down when the files are read (stdout is
    Ray's to borrow while it runs).
    """
    from mmpool_cli.cli.progress import counting
    from mmpool_cli.pools.executors import Executor, LocalExecutor, RayExecutor

    run_on: Executor
    if executor is ExecutorChoice.ray:
        run_on = RayExecutor(address, job=job, unfinished=unfinished)
    else:
        run_on = LocalExecutor(1)
    try:
        with counting(command, f"reading {shown} files") if shown else nullcontext(_no_tick) as tick:

            def read(fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
                for done, result in enumerate(run_on.map(fn, items), 1):
                    tick(done)
                    yield result

            yield read
    finally:
        run_on.close()


def _no_tick(_done: int) -> None:
    return None
