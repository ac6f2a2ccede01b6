"""What sizes a multimodal model's cached embeddings, from its ``config.json``: the text model's hidden
size (the width the vision encoder's merger gives it) and, for Qwen3-VL, the deepstack layers whose
features ride along with each token (``models/qwen3_vl.py``: ``out_hidden_size × (1 + len(deepstack_visual_indexes))``).

Pure core: standard library only.
"""

from __future__ import annotations

import json
from typing import Any

MAX_CONFIG_BYTES = 1 << 20


def embedding_shape(config_path: str) -> tuple[int | None, int | None]:
    """``(hidden_size, deepstack layers)`` from ``config_path``; None where the config does not say."""
    try:
        with open(config_path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        config: Any = json.loads(raw) if len(raw) <= MAX_CONFIG_BYTES else {}
    except (OSError, ValueError):
        return None, None
    if not isinstance(config, dict):
        return None, None
    text_config, vision_config = config.get("text_config"), config.get("vision_config")
    text: dict[str, Any] = text_config if isinstance(text_config, dict) else config
    vision: dict[str, Any] = vision_config if isinstance(vision_config, dict) else {}
    hidden = vision.get("out_hidden_size") or text.get("hidden_size")
    deep = vision.get("deepstack_visual_indexes")
    return (
        hidden if isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0 else None,
        len(deep) if isinstance(deep, list) else None,
    )
