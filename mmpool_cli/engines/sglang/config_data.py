"""An mmpool config's data before its model reads it: paths into it, and sizes read as written.

A size written as a YAML or JSON number with a point (``size: 1073741824.0``) is a float once
loaded, which can no longer say what was written (``1073741824.0000000001`` loads as the same
float). Such a size is read from its text instead, by the rule ``--size`` follows, so the file and
the flag agree, and JSON Schema (to which ``1073741824.0`` is an integer) agrees with both. Pure core.
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.inputs.yamlsrc import Source

# The keys whose values are sizes (a test keeps them equal to the model's size fields).
SIZE_KEYS = (
    ("pool", "size"),
    ("pool", "vmm_granularity"),
    ("gpu", "total_hbm"),
    ("gpu", "free_hbm"),
    ("gpu", "context_size"),
    ("workload", "feature_sizes"),  # a list of sizes
)


def at(data: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in nested mappings, or None."""
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def replaced(data: dict[Any, Any], path: tuple[Any, ...], value: Any) -> dict[Any, Any]:
    """``data`` with the value at ``path`` replaced, copying only the mappings on the way."""
    out = dict(data)
    out[path[0]] = value if len(path) == 1 else replaced(out[path[0]], path[1:], value)
    return out


def sizes_as_written(src: Source) -> Any:
    """``src.data`` with every size that loaded as a float replaced by its text as written."""
    data = src.data
    if not isinstance(data, dict):
        return data
    for path in SIZE_KEYS:
        value = at(data, path)
        if isinstance(value, float):
            text = src.text(path)
            data = data if text is None else replaced(data, path, text)
        elif isinstance(value, list) and any(isinstance(v, float) for v in value):
            texts = [src.text((*path, i)) if isinstance(v, float) else None for i, v in enumerate(value)]
            data = replaced(data, path, [v if t is None else t for v, t in zip(value, texts, strict=True)])
    return data
