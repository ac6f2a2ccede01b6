from collections.abc import Sequence
from typing import Any

def radix(
    requests: Sequence[Any], order: list[tuple[int, int, int, int]], capacity: int, page: int, /
) -> tuple[list[int], bool, int, int]: ...
def estimate(text: str, ids: dict[str, int], /) -> bytes | None: ...
