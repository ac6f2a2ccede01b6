def lru(
    keys: bytes,
    starts: bytes,
    sizes: bytes,
    work: bytes,
    capacity: int,
    first: int,
    step: int,
    payloads: bool,
    mirror: bool,
    /,
) -> tuple[int, int, int, list[tuple[int, int, tuple[int, ...]]]]: ...
def ring(
    keys: bytes, starts: bytes, sizes: bytes, work: bytes, capacity: int, max_object: int, /
) -> tuple[int, int, int]: ...
def refcounted(
    keys: bytes, starts: bytes, tokens: bytes, size: int, window: int, /
) -> tuple[int, int, int, list[int], list[int], list[int]]: ...
def batches(
    keys: bytes, starts: bytes, sizes: bytes, work: bytes, caches: int, /
) -> tuple[list[tuple[bytes, bytes, bytes, bytes]], bytes, bytes, bytes]: ...
def window_peak(keys: bytes, starts: bytes, tokens: bytes, window: int, /) -> int: ...
