"""Options several commands share, declared once: the database, the device, the precision, the threads, the
terminal tables' width and MLflow."""
from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from pipeline.config import DEFAULT_DB, MAX_THREADS, WORKER_MEMORY_GIB, sqlite_path
from pipeline.errors import DatabaseFault, UserError, did_you_mean

Db = Annotated[Optional[str], typer.Option(
    envvar="ROBUST_TUNE_DB",
    help=f"Database: a SQLite file path, postgresql://USER@HOST/DB (pip install 'robust-tune[postgres]') "
         f"or another SQLAlchemy URL (default {DEFAULT_DB}).")]
Device = Annotated[str, typer.Option(help="auto (cuda if available), cpu or cuda.")]
Precision = Annotated[str, typer.Option(help="auto (bf16 on a GPU that has it, else fp32), fp32 or bf16: "
                                             "the backbone's arithmetic.")]
Threads = Annotated[Optional[int], typer.Option(
    min=1, max=MAX_THREADS,
    help="torch's CPU threads of every run (default: the stored study's or trial's count, else 1); on a CPU the "
         "same count gives the same numbers in this process and on Dask workers.")]
Wide = Annotated[bool, typer.Option(
    "--wide", help="Terminal tables with every column, long cells wrapped (default: the columns that fit one line "
                   "per row; --format markdown or json prints every column).")]
Mlflow = Annotated[Optional[str], typer.Option(
    "--mlflow", metavar="URI",
    help="Also log each trial to MLflow as it ends (and a campaign's verdict), at this tracking URI, e.g. "
         "sqlite:///mlflow.db or http://HOST:5000 (default: the file's [tracking] mlflow). Needs pip install "
         "'robust-tune[mlflow]'.")]
ResultFormat = Annotated[str, typer.Option("--format", help="table (for people) or json (for scripts).")]
TABLE_FORMATS = ("table", "markdown", "json")  # what --format takes where a command prints result tables
TablesFormat = Annotated[str, typer.Option("--format", help="table (for people), markdown (for documents) or "
                                                            "json (for scripts).")]


def chosen_format(format_: str, known: tuple[str, ...]) -> str:
    """--format, which must be one of `known` (a one-line UserError otherwise)."""
    if format_ not in known:
        raise UserError(f"unknown format {format_!r}{did_you_mean(format_, known)}; known: {', '.join(known)}")
    return format_
Workers = Annotated[Optional[int], typer.Option(
    envvar="ROBUST_TUNE_WORKERS",
    help="Trials (or re-training runs) that train at once, each in a worker process of a Dask cluster on this "
         "machine with the study's torch threads (1), so the numbers do not depend on the count. Default: one "
         f"per CPU core (at most one per {WORKER_MEMORY_GIB} GiB of free memory), or --trials-per-gpu on each "
         "GPU; 1 trains in this process, one at a time.")]
Scheduler = Annotated[Optional[str], typer.Option(
    envvar="ROBUST_TUNE_SCHEDULER",
    help="Train on an existing Dask cluster: its scheduler's address, e.g. tcp://10.0.0.5:8786.")]
TrialsPerGpu = Annotated[int, typer.Option(
    help="On a machine with GPUs: how many trials (or runs) share one GPU, each in its own worker.")]
LogFile = Annotated[Optional[Path], typer.Option(
    help="Where Ax's, Dask's and other libraries' messages go (default: beside a SQLite database, named after it: "
         "runs/robust-tune.db logs to runs/robust-tune.log; for a database on a server, runs/robust-tune.log).")]
DEFAULT_LOG_FILE = None  # log_file_for: beside the database

# The options of `bench`'s subcommands that more than one of them takes, with the same meaning in each.
BenchFormat = Annotated[str, typer.Option("--format", help="table (for people) or markdown (for the README).")]
Rounds = Annotated[int, typer.Option(min=1, help="Timed rounds; the median is reported.")]
Initial = Annotated[int, typer.Option(min=1, help="Sobol trials before the GP in each search.")]
Processes = Annotated[int, typer.Option(min=1, max=256, help="Searches at once, each in its own process.")]
PlotForce = Annotated[bool, typer.Option("--force", help="Replace an existing --plot file.")]


@contextmanager
def new_database(db: str | None) -> Iterator[None]:
    """Inside the block, a fault of a SQLite database that did not exist when it began and holds nothing now (a new
    one that could not be made) is said as that: nothing was stored, and why its folder takes no file; not "what was
    stored is kept; run the same command again to resume", which a database that exists is told."""
    file = sqlite_path(db)
    new = file is not None and not file.exists()
    try:
        yield
    except DatabaseFault:
        if not new or file is None or (file.exists() and file.stat().st_size > 0):
            raise
        folder = file.parent
        try:
            with tempfile.TemporaryFile(dir=folder):
                why = "it could not be made"
        except OSError as error:
            why = f"its folder {folder} takes no new file ({error.strerror or error})"
        raise DatabaseFault(f"cannot create the new database {file}: {why}; nothing was stored; make the folder "
                            "writable, or give --db a file in a folder that is") from None


def plan_workers(workers: int | None, scheduler: str | None, device: str, trials_per_gpu: int) -> tuple[int, str]:
    """How many trials would train at once, and in words where that comes from."""
    from pipeline.search.parallel import default_workers

    if scheduler:
        return 1, f"the times are one worker's; the cluster at {scheduler} divides them by its workers"
    if workers is not None:
        return workers, f"{workers} (--workers)"
    count, why = default_workers(device, trials_per_gpu)
    return count, f"{count}, {why} (--workers N to choose)"


def typed(ctx: typer.Context, option: str) -> bool:
    """Whether `option` was given on the command line (not its environment variable, not its default)."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(option) == ParameterSource.COMMANDLINE


def chosen_workers(ctx: typer.Context, workers: int | None, scheduler: str | None) -> int | None:
    """--workers, unless it comes from ROBUST_TUNE_WORKERS while --scheduler names a cluster: the command line's
    choice wins over the environment's."""
    return None if scheduler and not typed(ctx, "workers") else workers
