"""`robust-tune bench`: each method's step time as a ratio to ERM, measured here and now."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from cli.app import app
from cli.render import stderr, stdout
from pipeline.errors import UserError



@app.command()
def bench(
    setting: Annotated[Optional[list[str]], typer.Option(
        help="Which set-up: digits, resnet18 or paper (ResNet18/34/50, ERM and GI-LS input at T = 1, 5, 15, "
             "on MT-Defect-sized data at --image-size) (repeat; default digits and resnet18).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    method: Annotated[Optional[list[str]], typer.Option(help="Only the cases of this method, for example l2rw "
                                                              "(repeat; default all); ERM is always measured.")] = None,
    precision: Annotated[Optional[list[str]], typer.Option(
        help="auto, fp32 or bf16; repeat to measure side by side (default auto).")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Timed rounds; the median is reported.")] = 5,
    steps: Annotated[int, typer.Option(min=1, help="Training steps per round and method.")] = 10,
    batch_size: Annotated[int, typer.Option(min=2)] = 32,
    backbone: Annotated[Optional[list[str]], typer.Option(
        help="Paper setting: which ResNets (repeat; default resnet18, resnet34 and resnet50).")] = None,
    image_size: Annotated[int, typer.Option(min=8, max=4096, help="Pixels a side in the paper setting and "
                                                                  "in --study.")] = 224,
    study: Annotated[bool, typer.Option("--study", help="Instead: wall time of the 20-trial GI-LS MT-Defect "
                                                        "ResNet18 study, one trial at a time and with "
                                                        "--workers trials sharing the device.")] = False,
    workers: Annotated[Optional[list[int]], typer.Option(help="With --study: trials at once (repeat; "
                                                              "default 2, 4 and 8).")] = None,
    trials: Annotated[int, typer.Option(min=1, help="With --study: the study's trials.")] = 20,
    epochs: Annotated[Optional[int], typer.Option(min=1, help="With --study: fix the epochs (default: "
                                                              "searched in [21, 60]).")] = None,
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
    from pipeline.config import check_precision

    precisions = tuple(precision or ["auto"])
    for name in precisions:
        check_precision(name)
    if study:
        _print_study(device, tuple(workers or (2, 4, 8)), trials, image_size, epochs)
        return
    from pipeline.benchmark import CASES, PAPER_BACKBONES, SETTINGS, Row, benchmark, machine

    backbones = tuple(backbone or PAPER_BACKBONES)
    for name in backbones:
        if name not in PAPER_BACKBONES:
            raise UserError(f"unknown backbone {name!r} for the paper setting; known: {', '.join(PAPER_BACKBONES)}")
    chosen = setting or ["digits", "resnet18"]
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
                              precisions, image_size, backbones, tuple(method or ()))
    columns = ["method", "precision", "step ms", "images/s", "ratio", "target"]
    if len(precisions) > 1:
        columns.insert(-1, f"vs {rows[0].precision}")
    if any(row.memory_mib is not None for row in rows):
        columns.insert(-1, "MiB")

    def cells(row: Row) -> list[str]:
        values = [row.case, row.precision, f"{row.step_ms:.1f}", f"{row.images_per_second:.1f}",
                  f"{row.ratio:.2f}x", row.expected]
        if len(precisions) > 1:
            values.insert(-1, "" if row.vs_first_precision is None else f"{row.vs_first_precision:.2f}x")
        if "MiB" in columns:
            values.insert(-1, "" if row.memory_mib is None else f"{row.memory_mib:.0f}")
        return values

    if markdown:
        print(f"Measured on {machine()}.\n")
        print("| set-up | " + " | ".join(columns) + " |")
        print("|---|---|---|" + "---:|" * (len(columns) - 3) + "---|")
        for i, row in enumerate(rows):  # each set-up named on its first row only
            setting = row.setting if i == 0 or row.setting != rows[i - 1].setting else ""
            print(f"| {setting} | " + " | ".join(cells(row)) + " |")
        return
    stdout.print(f"Step time as a ratio to ERM at the same precision ({machine()})")
    for setting in dict.fromkeys(row.setting for row in rows):
        table = Table(title=setting, title_justify="left")
        for i, column in enumerate(columns):
            table.add_column(column, justify="left" if i < 2 or i == len(columns) - 1 else "right", no_wrap=i == 0)
        for row in rows:
            if row.setting == setting:
                table.add_row(*cells(row))
        stdout.print(table)


def _print_study(device: str, workers: tuple[int, ...], trials: int, image_size: int, epochs: int | None) -> None:
    """The study benchmark's wall times, always as a Markdown table."""
    from pipeline.benchmark import machine
    from pipeline.study_bench import study_benchmark

    with stderr.status("measuring") as status:
        timings = study_benchmark(device, workers, trials, image_size, epochs,
                                  report=lambda message: status.update(message))
    alone = timings[0].seconds
    lines = [f"{'one at a time' if t.workers == 0 else f'{t.workers} at once'} | {t.seconds:.0f} | "
             f"{alone / t.seconds:.2f}x | {t.completed} | {t.failed}" for t in timings]
    print(f"{trials}-trial GI-LS study, MT-Defect-sized ({image_size} px), ResNet18; {machine()}.\n")
    print("| trials | wall (s) | speed-up | completed | failed |\n|---|---:|---:|---:|---:|")
    for line in lines:
        print(f"| {line} |")


def _print_startup(db: str, rounds: int) -> None:
    from pipeline.startup import BASELINE, measure_startup

    with stderr.status("measuring start-up"):
        seconds = measure_startup(db, rounds)
    print("| command | start-up (s) | ratio to `import typer, rich` |\n|---|---:|---:|")
    for name, value in seconds.items():
        print(f"| `{name}` | {value:.2f} | {value / seconds[BASELINE]:.1f}x |")
