"""``mmpool plan``: what SGLang will do with a pool budget."""

from __future__ import annotations

import os

import typer

from mmpool_cli.cli.app import app, emit, reported
from mmpool_cli.cli.options import FormatOpt, OutputFormat, PoolOptions, with_pool_options
from mmpool_cli.core.plan import make_plan
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK
from mmpool_cli.render import render


@app.command()
@with_pool_options
def plan(pool: PoolOptions, output: FormatOpt = OutputFormat.human) -> None:
    """Show exactly what SGLang will do with a pool budget: split, header, capacity, HBM."""
    with reported():
        request = pool.request(os.environ)
    result = make_plan(request)
    emit(render("plan", output.value, result))
    raise typer.Exit(EXIT_FINDINGS if result.status == "fail" else EXIT_OK)
