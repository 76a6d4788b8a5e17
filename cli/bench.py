"""`robust-tune bench`: each method's step time as a ratio to ERM, measured here and now."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from cli.main import app
from cli.render import stderr
from pipeline.errors import UserError

stdout = Console()


@app.command()
def bench(
    setting: Annotated[Optional[list[str]], typer.Option(help="Which set-up: digits or resnet18 (repeat; "
                                                                "default all).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    method: Annotated[Optional[list[str]], typer.Option(help="Only the cases of this method, for example l2rw "
                                                              "(repeat; default all); ERM is always measured.")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Timed rounds; the median is reported.")] = 5,
    steps: Annotated[int, typer.Option(min=1, help="Training steps per round and method.")] = 10,
    batch_size: Annotated[int, typer.Option(min=2)] = 32,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table (for the README).")] = False,
    startup: Annotated[bool, typer.Option("--startup", help="Instead: how fast --help, report and studies answer, "
                                                            "as ratios to a bare `import typer, rich`.")] = False,
    db: Annotated[Optional[str], typer.Option(envvar="ROBUST_TUNE_DB",
                                              help="With --startup: the database report and studies read.")] = None,
) -> None:
    """Measure the step time of every method as a ratio to ERM, side by side in one process."""
    if startup:
        _print_startup(db or "runs/robust-tune.db", rounds)
        return
    from pipeline.benchmark import CASES, SETTINGS, Row, benchmark, machine

    chosen = setting or list(SETTINGS)
    for name in chosen:
        if name not in SETTINGS:
            raise UserError(f"unknown benchmark setting {name!r}; known: {', '.join(SETTINGS)}")
    benched = sorted({case[1] for case in CASES})
    for name in method or []:
        if name not in benched:
            raise UserError(f"no benchmark case for method {name!r}; methods: {', '.join(benched)}")
    rows: list[Row] = []
    with stderr.status("measuring") as status:
        for name in chosen:
            rows += benchmark(name, device, rounds, steps, batch_size, lambda message: status.update(message),
                              tuple(method or ()))
    if markdown:
        print(f"Measured on {machine()}.\n")
        print("| set-up | method | step (ms) | ratio to ERM | target |")
        print("|---|---|---:|---:|---|")
        for row in rows:
            print(f"| {row.setting} | {row.case} | {row.step_ms:.1f} | {row.ratio:.2f}x | {row.expected} |")
        return
    table = Table(title=f"Step time as a ratio to ERM ({machine()})", title_justify="left")
    for column, justify in (("set-up", "left"), ("method", "left"), ("step ms", "right"),
                            ("ratio", "right"), ("target", "left")):
        table.add_column(column, justify=justify)
    for row in rows:
        table.add_row(row.setting, row.case, f"{row.step_ms:.1f}", f"{row.ratio:.2f}x", row.expected)
    stdout.print(table)


def _print_startup(db: str, rounds: int) -> None:
    from pipeline.startup import BASELINE, measure_startup

    with stderr.status("measuring start-up"):
        seconds = measure_startup(db, rounds)
    print(f"| command | start-up (s) | ratio to `import typer, rich` |\n|---|---:|---:|")
    for name, value in seconds.items():
        print(f"| `{name}` | {value:.2f} | {value / seconds[BASELINE]:.1f}x |")
