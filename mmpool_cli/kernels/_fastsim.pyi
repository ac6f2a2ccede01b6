from typing import Any

REFUSALS: dict[str, int]

def replay(
    t: Any,
    op: Any,
    key: Any,
    nbytes: Any,
    worker: Any,
    workers: int,
    memory_size: int,
    data_start: int,
    recycle_ns: int,
    alignment: int,
    max_leases: int,
    record: bool,
    stop_items: int,
    stop_bytes_hi: int,
    stop_bytes_lo: int,
    unbounded: bool,
) -> tuple[int, int, int, int, int, list[tuple[int, ...]], list[int | None] | None, list[int] | None]: ...

class TraceReader:
    events: int
    workers: int
    max_events: int
    requests: int
    def __init__(
        self,
        workers: int,
        max_events: int,
        requests: bool,
        keep_ids: bool,
        columns: tuple[Any, ...],
        layout: tuple[int, int, int, int, int] | None = None,
    ) -> None: ...
    def feed(self, data: Any, pos: int, lineno: int, max_line: int, end: int = -1) -> tuple[int, int, bool]: ...
    def push(self, t: int, is_free: bool, id: str, nbytes: int, worker: int) -> tuple[int, int]: ...
    def feed_columns(
        self, t: Any, is_free: Any, id_offsets: Any, id_data: Any, nbytes: Any, worker: Any
    ) -> tuple[int, int, int]: ...
    def feed_arrow(self, n: int, *columns: Any) -> tuple[int, int, int]: ...
    def ids(self) -> list[str] | None: ...
    def answer(
        self,
    ) -> tuple[int, int, int, int, int, list[tuple[int, ...]], list[int | None] | None, list[int] | None]: ...
