"""``mmpool trace``: users' traffic (SGLang logs, OpenAI bodies, bench_serving) -> mmpool's trace."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import TYPE_CHECKING, Annotated

import typer

from mmpool_cli.cli.app import app, epilog, reported
from mmpool_cli.cli.options import FormatOpt, OutputFormat, bounded_int
from mmpool_cli.cli.traffic_options import (
    DEFAULT_RECV_DELAY,
    AssumeImageOpt,
    DpEncoderOpt,
    RequestTimeOpt,
    SourceChoice,
    convert,
    seconds,
)
from mmpool_cli.core.bounds import MAX_PARALLEL, MAX_WORKERS
from mmpool_cli.errors import EXIT_OK, MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.inputs.traffic.model import Conversion


@app.command(
    short_help="Turn server logs, OpenAI bodies or bench_serving into a trace for 'simulate'.",
    epilog=epilog(
        [
            "mmpool trace --model qwen2.5-vl server.log -o prod.jsonl",
            "mmpool trace --model qwen3-vl --from openai gateway.jsonl --assume-image 1280x720",
            "mmpool trace --model qwen2.5-vl --from bench-serving -- --image-count 4 --request-rate 8",
        ],
        "0 the trace was written; 2 usage error, or traffic that cannot be sized (one located line per "
        "problem on stderr, nothing written); 70 internal error.",
    ),
)
def trace(
    inputs: Annotated[
        list[str] | None,
        typer.Argument(metavar="FILE...", help="Logs to read; with --from bench-serving, its arguments after --."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME|PATH", help="A model family or a model directory.")
    ] = None,
    source: Annotated[SourceChoice, typer.Option("--from", help="The input's format (auto: sniffed).")] = (
        SourceChoice.auto
    ),
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", metavar="OUT", help="Write the trace here (default stdout); FILE.parquet writes Parquet."
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "--tokenizer-worker-num",
            parser=bounded_int(MAX_WORKERS, "tokenizer workers"),
            metavar="N",
            help="Tokenizer workers: requests go round-robin.",
        ),
    ] = 1,
    tp: Annotated[
        int,
        typer.Option("--tp", "--tp-size", parser=bounded_int(MAX_PARALLEL, "ranks"), metavar="N", help="TP size."),
    ] = 1,
    dp_encoder: DpEncoderOpt = False,
    recv_delay: Annotated[
        str | None,
        typer.Option(
            "--recv-delay",
            metavar="SECONDS",
            help=f"Tokenizer's copy to the scheduler's receipt (default {DEFAULT_RECV_DELAY}: one scheduler step).",
        ),
    ] = None,
    hold: Annotated[
        str | None,
        typer.Option("--hold", metavar="SECONDS", help="Deferred leases without ReqTimeStats or Finish: their hold."),
    ] = None,
    assume_image: AssumeImageOpt = None,
    request_time: RequestTimeOpt = "1",
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Write mmpool's JSON-lines trace (the 'simulate --trace' format) from the traffic a server saw.

    One alloc per pooled tensor of each image of each request, timed as SGLang 0.5.23 holds its
    leases for the model's family; a summary of what was read goes to stderr.
    """
    with reported():
        if workers < 1:
            raise MmpoolError(f"--workers {workers}: SGLang needs at least 1 tokenizer worker")
        if output is not None and os.path.exists(output):
            raise MmpoolError(f"-o {output}: exists; mmpool never overwrites a file: remove it or choose another")
        if output is not None and output in (inputs or []):
            raise MmpoolError(f"-o {output}: is one of the inputs")
        conversion = convert(
            model=model,
            source=source,
            inputs=inputs or [],
            workers=workers,
            tp=tp,
            dp_encoder=dp_encoder,
            recv_delay_ns=None if recv_delay is None else seconds("--recv-delay", recv_delay),
            hold_ns=None if hold is None else seconds("--hold", hold),
            assume_image=assume_image,
            request_time=request_time,
        )
        _write(conversion, output)
    summary = conversion.summary
    if fmt is OutputFormat.json:
        typer.echo(json.dumps(summary.to_data(), indent=2, ensure_ascii=False), err=True)
    else:
        typer.echo(summary.text(), err=True)
    raise typer.Exit(EXIT_OK)


def _write(conversion: Conversion, output: str | None) -> None:
    from mmpool_cli.inputs.traffic import writer

    timeline = writer.events(conversion.leases)
    if output is None:
        writer.write(sys.stdout, timeline, conversion.items)
        sys.stdout.flush()
        return
    from mmpool_cli.simulate.trace_parquet import is_parquet, write_parquet

    columnar = is_parquet(output)
    if columnar:
        write_parquet(None, [], {})  # pyarrow is there (or a one-line error) before anything is written
    folder = os.path.dirname(os.path.abspath(output))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mmpool-trace-", dir=folder)
    except OSError as e:
        raise MmpoolError(f"-o {output}: cannot write there ({e.strerror})") from None
    try:
        if columnar:
            with os.fdopen(fd, "wb") as out:
                write_parquet(out, timeline, conversion.items)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                writer.write(f, timeline, conversion.items)
        os.link(tmp, output)  # fails rather than replace a file that appeared meanwhile
    except FileExistsError:
        raise MmpoolError(f"-o {output}: exists; mmpool never overwrites a file") from None
    except OSError as e:
        raise MmpoolError(f"-o {output}: cannot write the trace ({e.strerror})") from None
    finally:
        os.unlink(tmp)
