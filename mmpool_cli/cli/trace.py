"""``mmpool trace``: users' traffic (SGLang logs, OpenAI bodies, bench_serving) -> mmpool's trace."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, BinaryIO, TextIO

import typer

from mmpool_cli.cli.app import app, epilog, reported
from mmpool_cli.cli.fleet import file_reader
from mmpool_cli.cli.options import FormatOpt, OutputFormat, bounded_int, told
from mmpool_cli.cli.simulate_options import ExecutorChoice, RayAddressOpt
from mmpool_cli.cli.traffic_options import (
    DEFAULT_RECV_DELAY,
    AssumeImageOpt,
    AssumeVideoOpt,
    DpEncoderOpt,
    RequestTimeOpt,
    SourceChoice,
    convert,
    seconds,
)
from mmpool_cli.core.bounds import MAX_PARALLEL, MAX_WORKERS
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK, MmpoolError
from mmpool_cli.render import escape_undecodable

if TYPE_CHECKING:
    from mmpool_cli.inputs.traffic.model import Conversion


class TraceSource(StrEnum):
    """``--from-format``: the traffic formats (``SourceChoice``), and a recording of ``mmpool record``."""

    auto = SourceChoice.auto.value
    sglang_log = SourceChoice.sglang_log.value
    openai = SourceChoice.openai.value
    bench_serving = SourceChoice.bench_serving.value
    record = "record"


@app.command(
    short_help="Turn server logs, OpenAI bodies or bench_serving into a trace for 'simulate'.",
    epilog=epilog(
        [
            "mmpool trace --model qwen2.5-vl server.log -o prod.jsonl",
            "mmpool trace --model qwen3-vl --from gateway.jsonl --from-format openai --assume-image 1280x720",
            "mmpool trace --model qwen2.5-vl --from-format bench-serving -- --image-count 4 --request-rate 8",
            "mmpool trace --from rec1 -o merged.jsonl",
            "mmpool trace --model qwen2.5-vl fleet/*.log --executor ray -o fleet.jsonl",
        ],
        "0 the trace was written; 1 --from DIR (a recording): the trace was written from a damaged recording (each "
        "damaged file named on stderr); 2 usage error, or traffic that cannot be sized (one located line per "
        "problem on stderr, nothing written); 3 --executor ray: the cluster cannot be reached or went "
        "away (nothing written); 70 internal error.",
    ),
)
def trace(
    ctx: typer.Context,
    inputs: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[FILE...]",
            help="Files to read, as --from; with --from-format bench-serving, its arguments after --.",
        ),
    ] = None,
    files: Annotated[
        list[str] | None,
        typer.Option(
            "--from",
            metavar="FILE",
            help="A server log or OpenAI body log, as 'simulate --from' and 'cache --from' read them, or a "
            "recording's directory (mmpool record); repeat.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME|PATH", help="A model family or a model directory.")
    ] = None,
    source: Annotated[
        TraceSource,
        typer.Option("--from-format", help="The files' format (auto: sniffed, a directory is a recording)."),
    ] = TraceSource.auto,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="OUT",
            help="Write the trace here (default or '-': stdout); FILE.parquet writes Parquet.",
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
    assume_video: AssumeVideoOpt = None,
    request_time: RequestTimeOpt = "1",
    executor: Annotated[
        ExecutorChoice,
        typer.Option(help="Where the files are read: here, one after another, or in parallel on Ray (mmpool[ray])."),
    ] = ExecutorChoice.local,
    ray_address: RayAddressOpt = None,
    fmt: FormatOpt = OutputFormat.human,
) -> None:
    """Write mmpool's JSON-lines trace (the 'simulate --trace' format) from the traffic a server saw.

    One alloc per pooled tensor of each image and video of each request, timed as SGLang 0.5.23
    holds its leases for the model's family; a summary of what was read goes to stderr. Many files
    (a fleet's logs) make one trace, ordered by time; --executor ray reads them in parallel, the
    same trace byte for byte.
    """
    if output == "-":  # stdout, as '-' is stdin for --trace
        output = None
    with _reported(fmt):
        given = told(ctx)
        inputs, source = _formats_given_as_from(files or [], inputs or [], source, "source" in given)
        if source is TraceSource.auto and len(inputs) == 1 and os.path.isdir(inputs[0]):
            source = TraceSource.record  # a directory is no log: a recording, as simulate --trace DIR reads it
        if workers < 1:
            raise MmpoolError(f"--workers {workers}: SGLang needs at least 1 tokenizer worker")
        if output is not None and os.path.isdir(output):
            example = os.path.join(output, "trace.jsonl")
            raise MmpoolError(f"-o {output}: is a directory; give the trace a file name, e.g. -o {example}")
        if output is not None and os.path.exists(output) and not _is_device(output):
            raise MmpoolError(f"-o {output}: exists; mmpool never overwrites a file: remove it or choose another")
        if output is not None and output in (inputs or []):
            raise MmpoolError(f"-o {output}: is one of the inputs")
        if ray_address is not None and executor is not ExecutorChoice.ray:
            raise MmpoolError("--ray-address names the cluster of --executor ray; add --executor ray")
        if source is TraceSource.record:
            _recording(inputs, output, given)
        shown = fmt is OutputFormat.human and source is not TraceSource.bench_serving and len(inputs or []) > 1
        count = len(inputs or []) if shown else 0
        with file_reader(
            executor, ray_address, count, command="trace", job="the trace", unfinished="nothing was written"
        ) as map_files:
            conversion = convert(
                model=model,
                source=SourceChoice(source.value),
                inputs=inputs or [],
                workers=workers,
                tp=tp,
                dp_encoder=dp_encoder,
                recv_delay_ns=None if recv_delay is None else seconds("--recv-delay", recv_delay),
                hold_ns=None if hold is None else seconds("--hold", hold),
                assume_image=assume_image,
                assume_video=assume_video,
                request_time=request_time,
                map_files=map_files,
            )
        _write(conversion, output)
    summary = conversion.summary
    if fmt is OutputFormat.json:
        typer.echo(json.dumps(summary.to_data(), indent=2, ensure_ascii=False), err=True)
    else:
        typer.echo(summary.text(), err=True)
    raise typer.Exit(EXIT_OK)


def _umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _is_device(path: str) -> bool:
    """Whether ``path`` is a device or a FIFO (followed through links): a stream, not a user's file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextmanager
def _reported(fmt: OutputFormat) -> Iterator[None]:
    """Errors as ``reported`` prints them; with --format json, one JSON object with the findings' codes."""
    if fmt is not OutputFormat.json:
        with reported():
            yield
        return
    try:
        yield
    except MmpoolError as e:
        findings = getattr(e, "findings", [])
        data = {
            "status": "error",
            "error": str(e),
            "exit_code": e.exit_code,
            "findings": [
                {"where": f.where, "severity": f.severity, "code": f.code, "message": f.message} for f in findings
            ],
        }
        typer.echo(escape_undecodable(json.dumps(data, indent=2, ensure_ascii=False), json=True), err=True)
        raise typer.Exit(e.exit_code) from None


def _formats_given_as_from(
    files: list[str], inputs: list[str], source: TraceSource, format_given: bool
) -> tuple[list[str], TraceSource]:
    """The files to read and their format, from ``--from FILE`` and the arguments.

    ``--from`` once named the format (``--from openai FILE``): a value that is a format's name is still
    read so, with a line on stderr saying how to write it now (``--from ./openai`` names a file so called).
    """
    formats = [f for f in files if f in {s.value for s in TraceSource}]
    if not formats:
        return files + inputs, source
    if format_given or len(formats) > 1:
        raise MmpoolError(
            f"--from {formats[0]}: --from names the files to read; give their format once, with --from-format "
            f"(--from ./{formats[0]} reads a file of that name)"
        )
    typer.echo(
        f"mmpool: warning: --from {formats[0]} is the old spelling of --from-format {formats[0]} (--from names "
        f"the files to read, as in simulate and cache; --from ./{formats[0]} reads a file of that name)",
        err=True,
    )
    return [f for f in files if f != formats[0]] + inputs, TraceSource(formats[0])


def _recording(inputs: list[str], output: str | None, given: dict[str, str]) -> None:
    """``--from-format record DIR``: the recording's pools merged into one trace, the real offsets kept."""
    from mmpool_cli.core.words import count
    from mmpool_cli.traces.recording import header_line, merged_lines

    # a recording holds what its pools leased, worker by worker: nothing is converted, so no flag of
    # the conversion applies (simulate --trace DIR replays it at other --workers or --tp)
    converting = [flag for name, flag in given.items() if name not in ("inputs", "files", "source", "output", "fmt")]
    if converting:
        raise MmpoolError(
            f"{converting[0]} describes traffic to convert; a recording is written as its pools "
            "leased it (worker i the i-th pool, the bytes they leased): drop it (mmpool simulate --trace DIR "
            "--workers N replays it at another layout)"
        )
    if len(inputs) != 1:
        raise MmpoolError("--from-format record reads one recording: give its directory (mmpool record --out DIR)")
    lines, rec = merged_lines(inputs[0])
    _emit(output, lambda f: f.writelines([header_line(rec), *lines]))  # the layout first: it replays as written
    said = f"mmpool trace: {count(len(lines), 'event')} of {count(len(rec.pools), 'pool')} from {inputs[0]}"
    if not rec.damage:
        typer.echo(said, err=True)
        raise typer.Exit(EXIT_OK)
    # what a crashed server left is still worth replaying: written, each damaged file named, and exit 1 so
    # that a script cannot take it for a whole recording
    for damage in rec.damage:
        typer.echo(escape_undecodable(f"mmpool trace: warning: {damage}"), err=True)
    files = f"{len(rec.damage):,} of its files (above) {'is' if len(rec.damage) == 1 else 'are'} not whole"
    typer.echo(escape_undecodable(f"{said}, written from a damaged recording: {files}"), err=True)
    raise typer.Exit(EXIT_FINDINGS)


def _write(conversion: Conversion, output: str | None) -> None:
    from mmpool_cli.inputs.traffic import writer

    timeline = writer.events(conversion.leases)
    from mmpool_cli.traces.parquet_writer import write_parquet

    _emit(
        output,
        lambda f: writer.write(f, timeline, conversion.items, conversion.keys),
        lambda out: write_parquet(out, timeline, conversion.items, conversion.keys),
    )


def _emit(
    output: str | None, write: Callable[[TextIO], object], parquet: Callable[[BinaryIO], object] | None = None
) -> None:
    """Write the trace to stdout or to a new file ``output`` (never one that exists); ``FILE.parquet`` as Parquet."""
    if output is None:
        write(sys.stdout)
        sys.stdout.flush()
        return
    if _is_device(output):  # /dev/null, a FIFO: nothing of the user's to keep, written as stdout is
        try:
            with open(output, "w", encoding="utf-8") as f:
                write(f)
        except OSError as e:
            raise MmpoolError(f"-o {output}: cannot write the trace ({e.strerror})") from None
        return
    from mmpool_cli.traces.parquet import is_parquet
    from mmpool_cli.traces.parquet_writer import write_parquet

    columnar = is_parquet(output)
    if columnar:
        if parquet is None:
            raise MmpoolError(f"-o {output}: this trace is written as JSON lines only: choose a name without .parquet")
        write_parquet(None, [], {})  # pyarrow is there (or a one-line error) before anything is written
    folder = os.path.dirname(os.path.abspath(output))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mmpool-trace-", dir=folder)
    except OSError as e:
        raise MmpoolError(f"-o {output}: cannot write there ({e.strerror})") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600, made what open() gives every other output
        if columnar:
            assert parquet is not None
            with os.fdopen(fd, "wb") as out:
                parquet(out)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                write(f)
        os.link(tmp, output)  # fails rather than replace a file that appeared meanwhile
    except FileExistsError:
        raise MmpoolError(f"-o {output}: exists; mmpool never overwrites a file") from None
    except OSError as e:
        raise MmpoolError(f"-o {output}: cannot write the trace ({e.strerror})") from None
    finally:
        os.unlink(tmp)
