"""``mmpool schema``: the JSON Schema of mmpool's config file."""

from __future__ import annotations

import typer

from mmpool_cli.cli.app import app, epilog


@app.command(epilog=epilog(["mmpool schema > mmpool.schema.json"], "0 printed; 70 internal error."))
def schema() -> None:
    """Print the JSON Schema of mmpool's config file."""
    from mmpool_cli.engines.sglang.mmpool_config import json_schema
    from mmpool_cli.render.text import to_json

    typer.echo(to_json(json_schema()))
