"""JSON output shared by every command; kept apart from the rich renderers so that
``--format json`` never loads rich."""

from __future__ import annotations

import json
from typing import Any


def to_json(data: Any) -> str:
    """JSON text for a payload (a result's ``to_data()`` or plain data), integers kept exact."""
    if hasattr(data, "to_data"):
        data = data.to_data()
    return json.dumps(data, indent=2, ensure_ascii=False)
