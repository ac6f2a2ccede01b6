from collections.abc import Sequence

def lookups(
    bgroup: bytes,
    bcombined: bytes,
    bstart: bytes,
    iplace: bytes,
    ikey: bytes,
    ikeyed: bytes,
    itokens: bytes,
    rgroup: bytes,
    rstart: bytes,
    rends: bytes,
    gstart: bytes,
    distinct: bytes,
    served: Sequence[int] | bytes,
    row: int,
    /,
) -> tuple[bytes, bytes, bytes, bytes, bytes, int, int, int, bool]: ...
