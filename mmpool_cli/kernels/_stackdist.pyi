def curve(
    keys: bytes,
    sizes: bytes,
    weights: bytes,
    work: bytes,
    groups: bytes,
    max_entries: int,
    in_order: bool = ...,
    again: bool = ...,
    /,
) -> tuple[tuple[int, int, int], ...]: ...
def replay(
    keys: bytes,
    sizes: bytes,
    weights: bytes,
    work: bytes,
    groups: bytes,
    shared: bytes,
    max_entries: int,
    again: bool,
    points: bytes,
    /,
) -> tuple[tuple[int, int, int], ...]: ...
