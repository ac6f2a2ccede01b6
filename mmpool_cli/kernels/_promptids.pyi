from array import array
from collections.abc import Callable, Sequence
from typing import Any

def assemble(
    segments: list[list[array[int] | str] | None],
    groups: list[list[tuple[int, Any]]],
    tokens: Sequence[int],
    padded: dict[tuple[object, int], array[int]],
    make: Callable[[Any, int], array[int]],
    wrap: int,
    /,
) -> tuple[list[tuple[array[int], list[tuple[int, list[tuple[int, int]]]]] | None], list[int]]: ...
