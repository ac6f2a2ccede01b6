"""Each request's prompt ids as SGLang pads them: its prompt's text runs, each item's wrapped pad run in
its place. Compiled where ``kernels/_promptids.c`` was built; ``place`` is the reference it is held equal to
(``tests/kernels/test_promptids.py``).

Pure core: standard library only.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import TypeVar

from mmpool_cli.caches.report import CacheItem
from mmpool_cli.inputs.traffic.tokens import Segment
from mmpool_cli.kernels.native import compiled

FAST = compiled("_promptids")
Offsets = list[tuple[int, list[tuple[int, int]]]]  # (item index, its pad runs: (start, end), end inclusive)
P = TypeVar("P")
Make = Callable[[CacheItem, int], "array[int]"]  # an item's wrapped run, from the item and its index


def place(
    segments: Sequence[Segment] | None,
    group: list[tuple[int, CacheItem]],
    item_tokens: Sequence[int],
    padded: dict[tuple[object, int], array[int]],
    make: Make,
    wrap: int,
) -> tuple[array[int], Offsets] | None:
    """The prompt's ids and its items' offsets, its items placed in turn where the prompt names their kind;
    None where there are no segments or their items are not the request's (a kind differs, or the counts do).
    An item's run is looked up in ``padded`` by (its key, or index where it has none; its tokens), else made
    and kept: it repeats turn after turn. ``wrap``: the ids before the pad run in a run."""
    if segments is None:
        return None
    ids: array[int] = array("q")
    offs: Offsets = []
    placed = 0
    for seg in segments:
        if isinstance(seg, str):  # an item: its wrapped pad run
            if placed == len(group) or group[placed][1].kind != seg:
                return None  # its items are not the prompt's
            index, item = group[placed]
            placed += 1
            key = (item.key if item.key is not None else index, item_tokens[index])
            run = padded.get(key)
            if run is None:
                run = padded[key] = make(item, index)
            start = len(ids) + wrap
            ids.extend(run)
            offs.append((index, [(start, start + item_tokens[index] - 1)]))
        else:
            ids.extend(seg)  # a text run
    return (ids, offs) if placed == len(group) else None


def place_all(
    prompts: list[P | None],
    segments_of: Callable[[P], list[Segment] | None],
    groups: Sequence[list[tuple[int, CacheItem]]],
    item_tokens: Sequence[int],
    make: Make,
    wrap: int,
) -> list[tuple[array[int], Offsets] | None]:
    """``place`` for each request's prompt, its segments made by ``segments_of`` (None where it has no prompt,
    or no segments), its runs made once for them all."""
    padded: dict[tuple[object, int], array[int]] = {}
    # every prompt's segments first, then every placing: each loop keeps its own data in the caches
    segments = [None if p is None else segments_of(p) for p in prompts]
    if FAST is None:
        return [place(s, g, item_tokens, padded, make, wrap) for s, g in zip(segments, groups, strict=True)]
    got: list[tuple[array[int], Offsets] | None]
    got, redo = FAST.assemble(segments, list(groups), item_tokens, padded, make, wrap)
    for n in redo:  # what only the reference handles alike
        got[n] = place(segments[n], groups[n], item_tokens, padded, make, wrap)
    return got
