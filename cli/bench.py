"""`robust-tune bench steps|study|search|prefixes|parallel|workers|runs|startup|verdict`: the tool measured here and
now, one benchmark per subcommand, each with only the options it uses. `robust-tune bench` alone runs `steps`."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from cli.app import app
from cli.options import BenchFormat, Db, Device, Initial, PlotForce, Processes, Rounds, chosen_format
from cli.render import print_tables, stderr, stdout
from pipeline.errors import UserError
from pipeline.report.tables import Table as ReportTable

bench_app = typer.Typer(
    help="Measure the tool on this machine, one benchmark per subcommand.\n\n`robust-tune bench` alone runs "
         "`bench steps`. Each subcommand's --help says what it measures and what its options mean.")
app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
def bench_alone(ctx: typer.Context) -> None:
    """`robust-tune bench` with no subcommand: the step-time benchmark at its defaults."""
    if ctx.invoked_subcommand is None:
        bench_steps()


def _markdown(format_: str) -> bool:
    return chosen_format(format_, ("table", "markdown")) == "markdown"


@bench_app.command("steps")
def bench_steps(
    setting: Annotated[Optional[list[str]], typer.Option(
        metavar="SETTING",
        help="Which set-up: digits (the small CNN on the 8x8 digits), resnet18 (ResNet18 on random 3x64x64 "
             "images) or paper (ResNet18/34/50, ERM and GI-LS input at T = 1, 5, 15, on MT-Defect-sized data "
             "at --image-size) (repeat; default digits and resnet18).")] = None,
    device: Device = "auto",
    method: Annotated[Optional[list[str]], typer.Option(
        metavar="METHOD", help="Only the cases of this method, for example l2rw (repeat; default all); ERM is "
                               "always measured.")] = None,
    precision: Annotated[Optional[list[str]], typer.Option(
        metavar="PRECISION",
        help="auto, fp32 or bf16; repeat to measure side by side (default auto).")] = None,
    rounds: Rounds = 5,
    steps: Annotated[int, typer.Option(min=1, help="Training steps per round and method.")] = 10,
    batch_size: Annotated[int, typer.Option(min=2, help="Images per training step.")] = 32,
    backbone: Annotated[Optional[list[str]], typer.Option(
        metavar="BACKBONE",
        help="The paper setting's ResNets (repeat; default resnet18, resnet34 and resnet50).")] = None,
    image_size: Annotated[int, typer.Option(min=8, max=4096, help="Pixels a side in the paper setting.")] = 224,
    format_: BenchFormat = "table",
) -> None:
    """Time a training step of every method against ERM.

    Each method's step time is measured as a ratio to ERM's at the same precision, side by side in one
    process: the median of --rounds rounds of --steps steps each. `robust-tune bench` alone runs this."""
    markdown = _markdown(format_)
    from pipeline.config import check_precision

    precisions = tuple(precision or ["auto"])
    for name in precisions:
        check_precision(name)
    from pipeline.bench.steps import CASES, PAPER_BACKBONES, SETTINGS, Row, benchmark, machine

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

    if markdown:  # one table for the README, each set-up named on its first row only
        named = [[row.setting if i == 0 or row.setting != rows[i - 1].setting else "", *cells(row)]
                 for i, row in enumerate(rows)]
        _print_results([ReportTable("Step time as a ratio to ERM at the same precision", ["set-up", *columns],
                                    named, [f"Measured on {machine()}."])], markdown)
        return
    tables = [ReportTable(setting, columns, [cells(row) for row in rows if row.setting == setting])
              for setting in dict.fromkeys(row.setting for row in rows)]
    if tables:
        tables[-1].notes.append(f"Step time as a ratio to ERM at the same precision, measured on {machine()}.")
    _print_results(tables, markdown)


@bench_app.command("study")
def bench_study(
    device: Device = "auto",
    workers: Annotated[Optional[list[int]], typer.Option(
        metavar="N", help="Trials at once on the device, 2 or more (repeat; default 2, 4 and 8).")] = None,
    trials: Annotated[int, typer.Option(min=1, max=200, help="The study's trials.")] = 20,
    image_size: Annotated[int, typer.Option(min=8, max=4096, help="Pixels a side of the images trained on.")]
    = 224,
    epochs: Annotated[Optional[int], typer.Option(
        min=1, help="Fix each trial's epochs (default: searched in [21, 60], as the study file says).")] = None,
    format_: BenchFormat = "table",
) -> None:
    """Time a whole GI-LS study, alone and with trials at once.

    The wall time of the GI-LS paper's MT-Defect ResNet18 study (studies/paper/gils-mt-defect-resnet18.toml)
    on generated images of MT-Defect's size, one trial at a time and with --workers trials at once."""
    _print_study(device, tuple(workers or (2, 4, 8)), trials, image_size, epochs, _markdown(format_))


# Search seeds per strategy and problem by default: every default strategy on the first five problems in under 30
# minutes on 2 cores (the outside-range and cliff problems came later); docs/design/search.md's measurement gives
# --seeds 20.
SEARCH_SEEDS = 10


@bench_app.command("search")
def bench_search(
    problem: Annotated[Optional[list[str]], typer.Option(
        metavar="PROBLEM", help="Only this problem (repeat; default all).")] = None,
    strategy: Annotated[Optional[list[str]], typer.Option(
        metavar="STRATEGY", help="Only this strategy (repeat; default all but gp-warp, gp-centre, gp-winsorized, "
                                 "gp-2seeds, gp-trust, gp-margin, gp-fast, gp-fast2 and gp-lowfi); with the suffix "
                                 "+widen (gp+widen), the search widens a range whose soft end the best trial sits "
                                 "on, as a study does; +widen-model, -x2, -safe change how.")] = None,
    pick: Annotated[Optional[list[str]], typer.Option(
        metavar="PICK", help="Only this pick rule (repeat; default all): observed, model, lower, race or "
                             "race-observed.")] = None,
    seeds: Annotated[int, typer.Option(min=1, max=1000, help="Search seeds per strategy and problem.")]
    = SEARCH_SEEDS,
    trials: Annotated[int, typer.Option(min=1, max=200, help="The trainings each search gets.")] = 20,
    initial: Initial = 5,
    splits: Annotated[bool, typer.Option(
        "--splits", help="Give each search a base split of its own: a split term, measured on real runs, in "
                         "every observation.")] = False,
    processes: Processes = 1,
    plot: Annotated[Optional[Path], typer.Option(
        help="Draw the regret curves (points below the best possible, against trainings) into this PNG "
             "file.")] = None,
    force: PlotForce = False,
    format_: Annotated[str, typer.Option("--format", help="table (for people), markdown (for the README) or json "
                                                          "(every search seed's value too).")] = "table",
) -> None:
    """Compare search strategies and pick rules on known problems.

    On problems whose truth is known, the GP and its variants, Sobol, random and Optuna's TPE (if
    installed) side by side: the true value of each strategy's recommendation after k trainings, by each
    pick rule, over --seeds search seeds; its median, and its SD and interquartile range at a campaign's 8
    trainings and at --trials (the search's luck)."""
    _print_search(tuple(problem or ()), tuple(strategy or ()), tuple(pick or ()), seeds, trials, initial, splits,
                  processes, plot, force, chosen_format(format_, ("table", "markdown", "json")))


@bench_app.command("prefixes")
def bench_prefixes(
    variant: Annotated[Optional[list[str]], typer.Option(
        metavar="VARIANT", help="Only this variant: plain, prefix, stop or both (repeat; default all "
                                "four).")] = None,
    seeds: Annotated[int, typer.Option(min=1, max=1000, help="Search seeds per variant.")] = 20,
    budget: Annotated[int, typer.Option(min=10, max=100_000, help="The epochs each search trains in all.")] = 240,
    initial: Initial = 5,
    min_epochs: Annotated[int, typer.Option(min=1, help="The first epoch at which a trial may be stopped.")] = 3,
    processes: Processes = 1,
    plot: Annotated[Optional[Path], typer.Option(
        help="Draw each variant's true value against the epochs trained into this PNG file.")] = None,
    force: PlotForce = False,
    format_: BenchFormat = "table",
) -> None:
    """Measure what epoch prefixes and early stopping save.

    In a search that tunes epochs, replayed from real per-epoch digits curves: plain search against telling
    Ax every epoch prefix, stopping trials early, and both."""
    _print_prefixes(tuple(variant or ()), seeds, budget, initial, min_epochs, processes, plot, force,
                    _markdown(format_))


@bench_app.command("parallel")
def bench_parallel(
    workers: Annotated[Optional[list[int]], typer.Option(
        metavar="N", help="A cluster of N Dask workers to compare (repeat; default 1 and 2).")] = None,
    trials: Annotated[int, typer.Option(min=1, max=200, help="Trials per round and arm.")] = 4,
    epochs: Annotated[int, typer.Option(min=1, help="Each trial's epochs.")] = 10,
    threads: Annotated[int, typer.Option(min=1, max=64, help="torch's CPU threads of each trial.")] = 1,
    rounds: Rounds = 5,
    format_: BenchFormat = "table",
) -> None:
    """Time trials in this process against trials on Dask workers.

    A quickstart trial's seconds in this process and on a Dask worker, then trials per hour one at a time
    and on clusters of --workers workers, on the CPU."""
    _print_parallel(epochs, threads, rounds, trials, tuple(workers or (1, 2)), _markdown(format_))


@bench_app.command("workers")
def bench_workers(
    file: Annotated[Path, typer.Argument(help="A study or campaign file, e.g. studies/digits-campaign.toml.")],
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY=VALUE", help="Override a field of the file, as run and compare do (repeat).")] = None,
    device: Device = "cpu",
    rounds: Annotated[int, typer.Option(min=1, help="Runs of each arm, the order alternating.")] = 1,
    format_: BenchFormat = "table",
) -> None:
    """Time the default workers against --workers 1.

    Runs the file as `run` or `compare` would, into a fresh database each time (removed afterwards): on the
    default workers (one per core) and one trial at a time in this process, side by side; prints each wall time,
    their ratio, and whether the default's trials trained at once, kept each budget exactly and never trained a
    configuration twice."""

    _print_workers(file, tuple(set_ or ()), device, rounds, _markdown(format_))
@bench_app.command("runs")
def bench_runs(
    runs: Annotated[Optional[list[int]], typer.Option(
        metavar="N", min=1, max=256, help="Runs of one configuration, seeds 0..N-1 (repeat; default 4 and 8).")]
    = None,
    threads: Annotated[Optional[list[int]], typer.Option(
        metavar="T", min=1, max=64, help="torch's CPU threads (repeat; default 1 and 2).")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Each run's epochs.")] = 3,
    device: Device = "auto",
    rounds: Rounds = 3,
    format_: BenchFormat = "table",
) -> None:
    """Time runs of one configuration batched against one at a time.

    Runs per hour of N ERM runs (the small CNN on the digits) through the trainer one after another and as one
    batched model over the seeds, side by side in one process, and the largest difference between the two arms'
    numbers."""
    _print_runs(tuple(runs or (4, 8)), tuple(threads or (1, 2)), epochs, device, rounds, _markdown(format_))


@bench_app.command("startup")
def bench_startup(
    rounds: Rounds = 5,
    db: Annotated[Optional[str], typer.Option(
        envvar="ROBUST_TUNE_DB", help="The database report and studies read (default "
                                      "runs/robust-tune.db).")] = None,
    format_: BenchFormat = "table",
) -> None:
    """Time how fast --help, methods, report and studies answer.

    Each in a fresh process, as a ratio to a bare `import typer, rich`."""
    _print_startup(db or "runs/robust-tune.db", rounds, _markdown(format_))


def _print_results(tables: list[ReportTable], markdown: bool) -> None:
    """A benchmark's tables on the terminal, or as Markdown for the README (`--format markdown`)."""
    print_tables(tables, "markdown" if markdown else "table", None, wide=True)


def _print_study(device: str, workers: tuple[int, ...], trials: int, image_size: int, epochs: int | None,
                 markdown: bool) -> None:
    """The study benchmark's wall times."""
    from pipeline.bench.steps import machine
    from pipeline.bench.study import study_benchmark

    with stderr.status("measuring") as status:
        timings = study_benchmark(device, workers, trials, image_size, epochs,
                                  report=lambda message: status.update(message))
    alone = timings[0].seconds
    rows = [["one at a time" if t.workers == 0 else f"{t.workers} at once", f"{t.seconds:.0f}",
             f"{alone / t.seconds:.2f}x", str(t.completed), str(t.failed)] for t in timings]
    _print_results([ReportTable(f"{trials}-trial GI-LS study, MT-Defect-sized ({image_size} px), ResNet18",
                                ["trials", "wall (s)", "speed-up", "completed", "failed"], rows,
                                [f"Measured on {machine()}."])], markdown)


def _print_workers(file: Path, overrides: tuple[str, ...], device: str, rounds: int, markdown: bool) -> None:
    """The workers benchmark's table: a row per round and arm, the ratio on the default's rows."""
    import os

    from pipeline.bench.steps import machine
    from pipeline.bench.workers import workers_benchmark

    with stderr.status("measuring") as status:
        results = workers_benchmark(file, overrides, device, rounds, report=lambda message: status.update(message))
    rows = []
    for number, (default, one) in enumerate(results, start=1):
        for arm in (default, one):
            rows.append([str(number), f"default, {arm.workers}" if arm is default else "--workers 1",
                         f"{arm.seconds:.0f}", f"{one.seconds / arm.seconds:.2f}x", f"{arm.search_seconds:.0f}",
                         f"{arm.trials}/{arm.runs}", f"{100 * arm.idle:.0f}%",
                         "yes" if arm.overlapped else "no", "yes" if arm.exact and arm.distinct else "NO"])
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    _print_results([ReportTable(
        f"{file.name}: the default workers against one at a time",
        ["round", "arm", "wall s", "ratio", "search s", "trials/runs", "idle", "overlap", "exact"], rows,
        [f"Measured on {machine()}, load average {load} at the end. default, N: N trials at once; ratio: "
         "--workers 1's wall time over the arm's; search: the searches' part; runs: a campaign's re-training runs; "
         "idle: of the searches' wall time (start-up included), the share in which no trial trained; "
         "exact: every study ran exactly its budget and no configuration twice."])], markdown)


def _print_parallel(epochs: int, threads: int, rounds: int, trials: int, workers: tuple[int, ...],
                    markdown: bool) -> None:
    """The parallel benchmark's two tables, with the load the machine was under."""
    import os

    from pipeline.library_logs import quiet_libraries
    from pipeline.search.parallel import check_options
    from pipeline.bench.parallel import parallel_benchmark

    for n in workers:
        check_options(n, None, 1, "cpu", oversubscribe=True)
    log_file = quiet_libraries("runs/robust-tune.log")
    with stderr.status("measuring") as status:
        bench = parallel_benchmark(epochs, threads, rounds, trials, workers, str(log_file),
                                   report=lambda message: status.update(message))
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    setting = (f"Quickstart trials (small CNN, {bench.epochs} epochs, {bench.threads} torch thread(s)) on "
               f"{bench.cores} cores, load average {load}; medians of {rounds} rounds; the same metrics in every arm: "
               f"{'yes' if bench.same_numbers else 'NO'}.")
    one = ReportTable("One trial", ["one trial", "train (s)", "wall (s)", "ratio to this process"],
                      [[row.arm, f"{row.train_seconds:.2f}", f"{row.wall_seconds:.2f}", f"{row.ratio:.2f}x"]
                       for row in bench.trial], [setting])
    many = ReportTable("Trials per hour", [f"{trials} trials per round", "start-up (s)", "trials per hour",
                                           "ratio to one at a time", "a trial's train (s)"],
                       [[line.arm, f"{line.start_seconds:.1f}", f"{line.trials_per_hour:.0f}", f"{line.ratio:.2f}x",
                         f"{line.trial_seconds:.2f}"] for line in bench.throughput])
    _print_results([one, many], markdown)


def _print_runs(runs: tuple[int, ...], threads: tuple[int, ...], epochs: int, device: str, rounds: int,
                markdown: bool) -> None:
    """The several-runs benchmark's table: runs per hour of each arm, their ratio and the largest differences."""
    from pipeline.bench.runs import benchmark, machine

    with stderr.status("measuring") as status:
        rows = benchmark(runs, threads, epochs, rounds, device, report=lambda message: status.update(message))
    _print_results([ReportTable(
        f"Runs per hour, ERM, small CNN on the digits, {epochs} epoch(s)",
        ["runs", "threads", "one at a time", "batched", "batched / one", "weights diff", "loss diff",
         "metrics diff (points)"],
        [[str(row.runs), str(row.threads), f"{row.one_at_a_time_per_hour:.0f}", f"{row.batched_per_hour:.0f}",
          f"{row.ratio:.2f}x", f"{row.weights:.1e}", f"{row.train_loss:.1e}", f"{row.accuracy_points:.2f}"]
         for row in rows],
        [f"Measured on {machine(device)}; medians of {rounds} rounds, the arms interleaved; each diff is the largest "
         "over the seeds between the batched run and the same seed's run one at a time."])], markdown)


def _print_startup(db: str, rounds: int, markdown: bool) -> None:
    """How fast the reading commands answer, each as a ratio to a bare `import typer, rich`."""
    from pipeline.bench.startup import BASELINE, measure_startup

    with stderr.status("measuring start-up"):
        seconds = measure_startup(db, rounds)
    name = (lambda command: f"`{command}`") if markdown else str
    _print_results([ReportTable(f"Start-up, the median of {rounds} rounds",
                                ["command", "start-up (s)", "ratio to `import typer, rich`"],
                                [[name(command), f"{value:.2f}", f"{value / seconds[BASELINE]:.1f}x"]
                                 for command, value in seconds.items()])], markdown)


def _print_search(problems: tuple[str, ...], strategies: tuple[str, ...], picks: tuple[str, ...], seeds: int,
                  trainings: int, initial: int, splits: bool, processes: int, plot: Path | None, force: bool,
                  fmt: str) -> None:
    """The search benchmark: per problem, the true value of each strategy's recommendation and its spread."""
    from pipeline.bench.problems import SPLITS_TABLE, available_problems

    known_problems = available_problems()
    for name in problems:
        if name not in known_problems:
            raise UserError(f"unknown search problem {name!r}; known: {', '.join(known_problems)}")
    if initial >= trainings:
        raise UserError(f"--initial {initial} leaves the GP no trial of --trials {trainings}: give fewer")
    if splits and not SPLITS_TABLE.is_file():
        raise UserError(f"--splits: no table of runs on several splits at {SPLITS_TABLE}: make it with "
                        "tools/replay_trials.py --splits")
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise UserError(f"--plot {plot}: name a .png file")
        from pipeline.output_file import check_output

        check_output(plot, force, option="--plot")  # before the work, not after it
    from rich.markup import escape

    from pipeline.library_logs import quiet_libraries

    log_file = quiet_libraries("runs/robust-tune.log")
    from pipeline.bench.search import (PICKS, STRATEGY_NOTES, WIDEN, WIDEN_OPTIONS, known_strategy, optuna_available,
                                       search_benchmark, strategies as available)

    names = available()
    for name in strategies:
        if not known_strategy(name):
            raise UserError(f"unknown search strategy {name!r}; known: {', '.join(STRATEGY_NOTES)}, and each but "
                            f"tpe and gp-2seeds with {WIDEN} (widening its ranges as a study does), optionally "
                            f"with {', '.join('-' + o for o in WIDEN_OPTIONS)} (e.g. gp{WIDEN}-model-x2)")
        if name == "tpe" and not optuna_available():
            raise UserError("strategy tpe needs Optuna: pip install 'robust-tune[compare]'")
    for name in picks:
        if name not in PICKS:
            raise UserError(f"unknown pick rule {name!r}; known: {', '.join(PICKS)}")
    if not optuna_available() and not strategies:
        stderr.print(escape("Optuna is not installed, so TPE is left out (pip install 'robust-tune[compare]' "
                            "adds it)"))
    split = None
    if splits:
        from pipeline.bench.problems import SplitTerm, split_sd

        split = SplitTerm(split_sd()["interaction"])
    with stderr.status("searching") as status:
        runs, summaries, checkpoints = search_benchmark(problems or known_problems, strategies or names, seeds,
                                                        trainings, initial, processes, str(log_file),
                                                        report=lambda message: status.update(message), split=split)
    summaries = [s for s in summaries if not picks or s.pick in picks]
    if plot is not None:
        from pipeline.output_file import write_output
        from pipeline.report.plots import search_picture

        write_output(plot, search_picture(summaries, checkpoints).png, force, option="--plot")
    checks = _surrogate_checks(problems or known_problems)
    tables = _search_tables(summaries, checkpoints, seeds, initial, split)
    if fmt == "json" and checks:
        tables.append(ReportTable("The replays' surrogates on configurations they were not fitted on", [], [], [],
                                  [{"problems": replays, **check} for replays, check in checks]))
    print_tables(tables, fmt, None, wide=True)
    if fmt != "json":
        for replays, check in checks:
            stdout.print(escape(
                f"The surrogate of {' and '.join(replays)} on configurations it was not fitted on (5-fold, "
                f"{check['configurations']} configurations x {check['seeds']} seeds): root-mean-square error "
                f"{100 * check['surrogate_rmse']:.1f} points, against {100 * check['constant_rmse']:.1f} for the mean "
                f"of the rest; the seed-to-seed noise alone leaves {100 * check['noise_floor']:.1f} in a "
                "configuration's mean."))
    if plot is not None:
        stderr.print(f"picture: {plot}")


def _surrogate_checks(problems: tuple[str, ...]) -> list[tuple[list[str], dict[str, float]]]:
    """How well each replay's surrogate predicts configurations it was not fitted on (problems.surrogate_check),
    for the replays among `problems`."""
    from pipeline.bench.problems import (CURVE_KINDS, CURVE_SPACE, CURVES_TABLE, ERM_REPLAY_TABLE, REPLAY_TABLE,
                                         ReplayTable, read_curves, read_replay, surrogate_check)

    def curves() -> ReplayTable:
        table = read_curves(CURVES_TABLE)
        return ReplayTable(CURVE_SPACE, CURVE_KINDS, table.points, table.values[:, :, -1], table.header)

    checks = []
    for read, replays in ((lambda: read_replay(REPLAY_TABLE), ["digits-hws-replay"]),
                          (lambda: read_replay(ERM_REPLAY_TABLE), ["digits-erm-replay", "digits-erm-cut-replay"]),
                          (curves, ["digits-hws-curves-replay"])):
        if any(name in problems for name in replays):
            checks.append((replays, surrogate_check(read())))
    return checks


def _search_tables(summaries: list, checkpoints: tuple[int, ...], seeds: int, initial: int,
                   split: Any = None) -> list[ReportTable]:
    """Per problem, the true value of each strategy's recommendation after k trainings by each pick rule, and its
    spread over search seeds at a campaign's 8 trainings and at the last; then, per strategy, how its proposals
    after the initial ones sit in the box (random search's give the base rate) and how long one takes."""
    from pipeline.bench.search import CAMPAIGN_TRAININGS, PICKS, STRATEGY_NOTES, WIDEN, WIDEN_OPTIONS, base_strategy

    def percent(value: float) -> str:
        return "–" if value != value else f"{100 * value:.1f}"

    def label(s: Any) -> str:
        return s.strategy + ("" if s.pick == "observed" else f" ({s.pick})")

    last = checkpoints[-1]
    luck = [k for k in checkpoints if k == CAMPAIGN_TRAININGS] + [last]
    columns = ["strategy", *[f"k={k}" for k in checkpoints], "beats random"]
    tables = []
    for problem in dict.fromkeys(s.problem for s in summaries):
        mine = [s for s in summaries if s.problem == problem]
        rows = [[label(s), *[percent(s.quartiles[k][1]) for k in checkpoints],
                 "" if s.beats_random is None else f"{100 * s.beats_random:.0f}%"] for s in mine]
        tables.append(ReportTable(f"{problem}: best possible {100 * mine[0].best:.1f}%", columns, rows,
                                  records=[s.record() for s in mine]))
        spreads = [[label(s), *[cell for k in luck for cell in (percent(s.quartiles[k][1]), percent(s.sds[k]),
                                                                   percent(s.iqr(k)))]] for s in mine]
        tables.append(ReportTable(
            f"{problem}: the search's luck, the spread of the true value over {seeds} search seeds",
            ["strategy", *[f"{name} at {k}" for k in luck for name in ("median", "SD", "IQR")]], spreads,
            records=[{"strategy": s.strategy, "pick": s.pick,
                      **{str(k): {"median": s.quartiles[k][1], "sd": s.sds[k], "iqr": s.iqr(k)} for k in luck}}
                     for s in mine]))
    proposals: dict[str, list] = {}
    for s in summaries:
        if s.pick == "observed":
            proposals.setdefault(s.strategy, []).append(s)
    widens = any(s.widened is not None for s in summaries)
    problems = list(dict.fromkeys(s.problem for s in summaries))
    tables.append(ReportTable(
        f"Proposals after the first {initial} trainings near a bound (within 1% of a range), and ms per proposal"
        + (f"; {WIDEN}: the share of seeds whose search widened a range" if widens else ""),
        ["strategy", *problems, "ms"],
        [[name, *["" if s.edge_share is None else f"{100 * s.edge_share:.0f}%" + (
            "" if s.widened is None else f" (widened {100 * s.widened:.0f}%)") for s in rows],
          f"{sum(s.proposal_ms for s in rows) / len(rows):.0f}"] for name, rows in proposals.items()],
        records=[{"strategy": name, "problem": s.problem, "on_bound": s.edge_share, "widened": s.widened,
                  "proposal_ms": s.proposal_ms} for name, rows in proposals.items() for s in rows]))
    title, header, rows = _proposal_cost_table(proposals, initial)
    tables.append(ReportTable(title, header, rows, records=[dict(zip(header, row)) for row in rows]))
    bases = {base_strategy(name) for name in proposals}
    shown = dict.fromkeys(s.pick for s in summaries)
    note = (f"True value (%) of the configuration each strategy recommends after k trainings, median over {seeds} "
            f"search seeds; the search's luck: its SD and interquartile range (IQR, points) at a campaign's "
            f"{CAMPAIGN_TRAININGS} trainings and at {last}. Picks: "
            + "; ".join(f"{k}{' (unnamed)' if k == 'observed' else ''}: {v}" for k, v in PICKS.items() if k in shown)
            + f". Beats random: share of search seeds on which the recommendation at k={last} is truly better than "
            "random search's from the same seed. "
            + "; ".join(f"{k}: {v}" for k, v in STRATEGY_NOTES.items() if k in bases)
            + (f"; {WIDEN}: after every trial, each soft end of a range the best observed trial sits on widened, as a "
               "study widens it (a bound then counts in the box searched at the time); options: "
               + "; ".join(f"-{k}: {v}" for k, v in WIDEN_OPTIONS.items()) if widens else "")
            + ("." if split is None else f". Each search ran on a base split of its own: a smooth random function of "
               f"the configuration (SD {100 * split.sd:.2f} points, lengthscale {split.lengthscale:g} of the box), "
               "the configuration-by-split term measured on real runs (digits-hws-splits.csv), in every "
               "observation; a race's extra trainings run on other splits."))
    tables[-1].notes.append(note)
    return tables


def _proposal_cost_table(proposals: dict[str, list], initial: int) -> tuple[str, list[str], list[list[str]]]:
    """Seconds per proposal after the initial ones (a GP's fit and acquisition), median per strategy and problem,
    and each strategy's time as a multiple of gp's (geometric mean over the problems both ran): the ratio is what
    compares on a machine shared with other work."""
    problems = list(dict.fromkeys(s.problem for rows in proposals.values() for s in rows))
    gp = {s.problem: s.model_seconds for s in proposals.get("gp", [])}

    def ratio(rows: list) -> str:
        logs = [math.log(s.model_seconds / gp[s.problem]) for s in rows
                if gp.get(s.problem, 0) > 0 and s.model_seconds > 0]
        return f"{math.exp(sum(logs) / len(logs)):.2f}" if logs else ""

    rows = [[name, *[next((f"{s.model_seconds:.2f}" for s in mine if s.problem == p), "") for p in problems],
             ratio(mine)] for name, mine in proposals.items()]
    return (f"Seconds per proposal after the first {initial} trainings (median; side by side, so compare within a run)",
            ["strategy", *problems, "ratio to gp"], rows)


CAPTIONS = ("The best observed (what the best table shows):", "The GP's pick (what --pick model re-trains):",
            "What it cost:")


def _print_prefixes(variants: tuple[str, ...], seeds: int, budget: int, initial: int, min_epochs: int,
                    processes: int, plot: Path | None, force: bool, markdown: bool) -> None:
    """The epochs benchmark: per variant, the true value of the recommendation at quarters of the budget, and
    the epochs each needs to reach plain search's final median."""
    from pipeline.bench.prefixes import LOW_EPOCHS, PROBLEM, VARIANTS
    from pipeline.bench.problems import CURVES_TABLE

    for name in variants:
        if name not in VARIANTS:
            raise UserError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
    if not CURVES_TABLE.is_file():
        raise UserError(f"no curves to replay at {CURVES_TABLE}: make them with tools/replay_curves.py")
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise UserError(f"--plot {plot}: name a .png file")
        from pipeline.output_file import check_output

        check_output(plot, force, option="--plot")  # before the work, not after it
    from rich.markup import escape

    from pipeline.library_logs import quiet_libraries

    log_file = quiet_libraries("runs/robust-tune.log")
    from pipeline.bench.prefixes import epochs_benchmark

    chosen = tuple(name for name in VARIANTS if not variants or name in variants)
    with stderr.status("searching") as status:
        runs, summaries, checkpoints = epochs_benchmark(chosen, seeds, budget, initial, min_epochs, processes,
                                                        str(log_file), report=lambda message: status.update(message))
    if plot is not None:
        from pipeline.output_file import write_output
        from pipeline.report.plots import epochs_picture

        write_output(plot, epochs_picture(runs, budget, PROBLEM).png, force, option="--plot")

    def percent(value: float) -> str:
        return "–" if value != value else f"{100 * value:.1f}"

    values = (["variant", *[f"{k} epochs" for k in checkpoints]],
              [[s.variant, *[f"{percent(s.quartiles[k][1])} ({percent(s.quartiles[k][0])}–"
                             f"{percent(s.quartiles[k][2])})" for k in checkpoints]] for s in summaries])
    plain = next((s for s in summaries if s.variant == "plain"), None)
    target = "" if plain is None else f" ({percent(plain.quartiles[checkpoints[-1]][1])})"
    savings = (["variant", f"epochs to plain's final{target}", "trials", "told to Ax"],
               [[s.variant, "not reached" if s.epochs_to_plain == float("inf") else f"{s.epochs_to_plain:.0f}",
                 f"{s.trials:.0f}", f"{s.observations:.0f}"] for s in summaries])
    def quartiles(q: tuple[float, float, float] | None) -> str:
        return "–" if q is None or q[1] != q[1] else f"{percent(q[1])} ({percent(q[0])}–{percent(q[2])})"

    picks = (["variant", *[f"{k} epochs" for k in checkpoints]],
             [[s.variant, *[quartiles(s.model_quartiles.get(k)) for k in checkpoints]] for s in summaries])
    title = (f"{PROBLEM}: true value (%) of the recommendation after k epochs trained in all, median "
             f"(interquartile range) over {seeds} search seeds")
    note = ("GP's pick: the tried configuration the GP fitted on every observation predicts best (what "
            "`--pick model` re-trains), measured after the trial that brings the epochs trained to k or past it. "
            "Epochs to plain's final: the epochs trained in all at which the median over search seeds of the "
            "recommendation's true value first reaches plain search's median at the full budget; trials and "
            "observations told to Ax: medians over search seeds. "
            + "; ".join(f"{k}: {v}" for k, v in VARIANTS.items() if k in chosen) + f" (from epoch {min_epochs}).")
    captioned = [ReportTable(caption, header, rows)
                 for caption, (header, rows) in zip(CAPTIONS, (values, picks, savings))]
    captioned[0].title = f"{title}. {captioned[0].title}"
    captioned[-1].notes.append(note)
    _print_results(captioned, markdown)
    from pipeline.bench.prefixes import surrogate_checks
    from pipeline.bench.problems import read_curves

    table = read_curves()
    checks = surrogate_checks(table, (LOW_EPOCHS, table.top_epochs // 2, table.top_epochs))
    stdout.print(escape(
        f"The replay's surrogates on configurations they were not fitted on (5-fold, {len(table.points)} "
        f"configurations x {table.values.shape[1]} seeds), root-mean-square error in points at "
        + ", ".join(f"{e} epochs {100 * c['surrogate_rmse']:.1f} (mean of the rest {100 * c['constant_rmse']:.1f}, "
                    f"seed noise {100 * c['noise_floor']:.1f})" for e, c in checks.items()) + "."))
    if plot is not None:
        stderr.print(f"picture: {plot}")


FIGURE_HELP = "POINTS for every metric, or METRIC=POINTS for one (accuracy, balanced or rare; repeat)"


@bench_app.command("verdict")
def bench_verdict(
    from_: Annotated[Optional[str], typer.Option(
        "--from", metavar="CAMPAIGN",
        help="Estimate the figures from this stored campaign's re-trained runs (CAMPAIGN.TASK: one task of a "
             "campaign of several), its methods, searches and rounds with them; options given replace "
             "them.")] = None,
    db: Db = None,
    campaigns: Annotated[int, typer.Option(min=10, max=1_000_000, help="Campaigns simulated per true "
                                                                       "difference.")] = 500,
    seed: Annotated[int, typer.Option(min=0, help="The simulation's seed: the same seed gives the same "
                                                   "figures.")] = 0,
    truth: Annotated[Optional[list[float]], typer.Option(
        metavar="MULTIPLE", min=0, max=100,
        help="A true difference to simulate, in smallest effects (repeat; default 0, 0.5, 1 and 2).")] = None,
    methods: Annotated[Optional[int], typer.Option(min=1, max=20, help="Methods compared with ERM (default "
                                                                       "4).")] = None,
    replicates: Annotated[Optional[int], typer.Option(min=1, max=50, help="Searches per method at the first look "
                                                                          "(default: a new campaign's, 3); alone, "
                                                                          "the searches are fixed at that many and "
                                                                          "rounds add pairs, as in a campaign "
                                                                          "file.")] = None,
    max_replicates: Annotated[Optional[int], typer.Option(min=1, max=50, help="The most searches per method: "
                                                                              "rounds of searches up to it "
                                                                              "(default 10).")] = None,
    replicates_per_round: Annotated[Optional[int], typer.Option(min=1, max=50, help="Searches a later round adds "
                                                                                    "(default 2).")] = None,
    seeds: Annotated[Optional[int], typer.Option(min=1, max=1000, help="The first round's pairs (per search; "
                                                                       "default 5).")] = None,
    seeds_per_round: Annotated[Optional[int], typer.Option(min=1, max=1000, help="Pairs per later round "
                                                                                  "(default 5).")] = None,
    max_seeds: Annotated[Optional[int], typer.Option(min=1, max=1000, help="The most pairs (per search; default "
                                                                           "10 with rounds of searches, 30 "
                                                                           "with fixed ones).")] = None,
    trim: Annotated[Optional[float], typer.Option(min=0.0, max=0.4, help="The share cut from each end for the "
                                                                         "verdict's unit (default 0.2; 0: plain "
                                                                         "means).")] = None,
    image_correlation: Annotated[Optional[float], typer.Option(
        min=0.0, max=0.99, help="How much a pair's runs share their test images: the copula correlation of two runs "
                                "being right on one image (default: measured on the digits).")] = None,
    collapse: Annotated[Optional[float], typer.Option(
        min=0.0, max=0.5, help="The share of every method's runs that collapse (default 1 in 30; 0: none).")] = None,
    primary: Annotated[Optional[str], typer.Option(
        metavar="METRICS", help="The metrics decided on, comma-separated: accuracy, balanced, rare (default "
                                "balanced,rare); the others are secondary.")] = None,
    smallest_effect: Annotated[Optional[list[str]], typer.Option(
        metavar="EFFECT", help=f"The smallest effect that matters: {FIGURE_HELP} (default balanced=1, rare=5, "
                               "accuracy=1).")] = None,
    level: Annotated[Optional[list[str]], typer.Option(
        metavar="LEVEL", help=f"ERM's expected accuracy: {FIGURE_HELP}.")] = None,
    test_images: Annotated[Optional[list[str]], typer.Option(
        metavar="N", help="The test images a metric's binomial noise rests on: N for every metric, or METRIC=N "
                          "(repeat; 0: none).")] = None,
    split_sd: Annotated[Optional[list[str]], typer.Option(
        metavar="SD", help=f"The split's standard deviation: {FIGURE_HELP}.")] = None,
    seed_sd: Annotated[Optional[list[str]], typer.Option(
        metavar="SD", help=f"The training seed's: {FIGURE_HELP}.")] = None,
    interaction_sd: Annotated[Optional[list[str]], typer.Option(
        metavar="SD", help=f"Method by split, each method's: {FIGURE_HELP}.")] = None,
    search_sd: Annotated[Optional[list[str]], typer.Option(
        metavar="SD", help=f"A search's luck: {FIGURE_HELP}.")] = None,
    correlation: Annotated[Optional[float], typer.Option(
        min=0.0, max=1.0, help="The correlation of a run's normal terms across its metrics (default 0.5).")] = None,
    processes: Annotated[int, typer.Option(min=1, max=256, help="Processes simulating at once.")] = 1,
    format_: Annotated[str, typer.Option("--format", help="table (for people), markdown or json.")] = "table",
) -> None:
    """Simulate whole campaigns to check the verdict is calibrated.

    Each simulated campaign draws every method's confirmation runs from a model whose truth is known (per metric:
    ERM's level, the pair's split, the training seed, the method-by-split interaction, each method's search luck,
    runs that collapse, and the test images a pair's runs share), and takes the verdict exactly as `compare` does:
    the pilot, the rounds of searches (or pairs) planned for power and stopping, the simultaneous intervals over
    the family, equivalence, the trimmed units. Every method differs from ERM by the same true difference, 0, 0.5,
    1 or 2 times each metric's smallest effect. The design is a new campaign's unless given.

    How to read it, each figure with its Monte Carlo standard error: Wrong words at 0 is the family-wise
    false-positive rate and at 1x the false equivalent (the design holds both to 5%); Power, the cells decided
    rightly (and decided at all); Coverage, the share of each kind of printed interval that held the truth (the
    nominal level beside it); Runs used, the searches and pairs the campaigns spent. The figures come from --from
    CAMPAIGN's runs (what its runs cannot tell apart is said under them), or are the digits campaigns'; an option
    replaces one."""
    fmt = chosen_format(format_, ("table", "markdown", "json"))
    from pipeline.bench.verdict import simulate, verdict_bench_tables
    from pipeline.bench.verdict_model import SHORT_NAMES, default_model, model_from_campaign

    names = _primary(primary)
    effects = _per_metric("--smallest-effect", smallest_effect, SHORT_NAMES)
    notes: list[str] = []
    if from_ is None:
        model = default_model(methods or 4)
        source = "given"
    else:
        if methods is not None:
            raise UserError("--methods: with --from the campaign's own methods are simulated")
        model, estimate = model_from_campaign(*_stored_campaign(from_, db), names)
        source = f"from campaign {from_}, {estimate.pairs} pairs"
        notes += list(estimate.notes)
    model = _given(model, names, effects, level, test_images, split_sd, seed_sd, interaction_sd, search_sd,
                   correlation)
    model = _design(model, replicates, max_replicates, replicates_per_round, seeds, seeds_per_round, max_seeds, trim,
                    image_correlation, collapse)
    with stderr.status("simulating") as status:
        simulation = simulate(model, campaigns, seed, tuple(truth or (0.0, 0.5, 1.0, 2.0)), processes,
                              report=lambda message: status.update(message))
    tables = verdict_bench_tables(simulation, source, notes)
    print_tables(tables, fmt, None, wide=True)


def _primary(primary: str | None) -> tuple[str, ...]:
    """--primary's metrics as the store names them."""
    from pipeline.bench.verdict_model import SHORT_NAMES

    if primary is None:
        return (SHORT_NAMES["balanced"], SHORT_NAMES["rare"])
    names = [name.strip() for name in primary.split(",") if name.strip()]
    known = {**SHORT_NAMES, **{key: key for key in SHORT_NAMES.values()}}
    for name in names:
        if name not in known:
            raise UserError(f"--primary: unknown metric {name!r}; known: {', '.join(SHORT_NAMES)}")
    if not names or len(set(names)) != len(names):
        raise UserError("--primary: name one or more metrics, each once")
    return tuple(known[name] for name in names)


def _per_metric(option: str, given: list[str] | None, metrics: dict[str, str]) -> dict[str, float]:
    """A per-metric option's values (NUMBER for every metric, METRIC=NUMBER for one) by the store's metric name."""
    known = {**metrics, **{key: key for key in metrics.values()}}
    values: dict[str, float] = {}
    for item in given or []:
        name, _, number = item.rpartition("=")
        try:
            value = float(number)
        except ValueError:
            raise UserError(f"{option} {item}: give a number, or METRIC=NUMBER") from None
        if not math.isfinite(value) or value < 0:
            raise UserError(f"{option} {item}: give a number of 0 or more")
        if name and name not in known:
            raise UserError(f"{option} {item}: unknown metric {name!r}; known: {', '.join(metrics)}")
        for key in ([known[name]] if name else metrics.values()):
            values[key] = value
    return values


def _given(model: Any, primary: tuple[str, ...], effects: dict[str, float], level: list[str] | None,
           test_images: list[str] | None, split_sd: list[str] | None, seed_sd: list[str] | None,
           interaction_sd: list[str] | None, search_sd: list[str] | None, correlation: float | None) -> Any:
    """The model with every figure given on the command line replacing its own."""
    from dataclasses import replace

    from pipeline.bench.verdict_model import POINT, SHORT_NAMES, with_figures

    points = {"level": level, "split_sd": split_sd, "seed_sd": seed_sd, "interaction_sd": interaction_sd,
              "search_sd": search_sd}
    figures = {name: {k: v * POINT for k, v in _per_metric(f"--{name.replace('_', '-')}", values,
                                                             SHORT_NAMES).items()}
               for name, values in points.items()}
    figures["smallest"] = {k: v * POINT for k, v in effects.items()}
    figures["test_images"] = _per_metric("--test-images", test_images, SHORT_NAMES)
    for key, value in figures["level"].items():
        if value > 1:
            raise UserError(f"--level: {100 * value:g} points for {key} is over 100")
    for key, value in figures["test_images"].items():
        if value != int(value):
            raise UserError(f"--test-images: {value:g} for {key} is not a whole number")
    for key, value in figures["smallest"].items():
        if value == 0 and key in primary:
            raise UserError(f"--smallest-effect: the smallest effect on {key} must be above 0")
    model = replace(with_figures(model, figures), primary=primary)
    return model if correlation is None else replace(model, correlation=correlation)


def _design(model: Any, replicates: int | None, max_replicates: int | None, per_round: int | None, seeds: int | None,
            seeds_per_round: int | None, max_seeds: int | None, trim: float | None, image_correlation: float | None,
            collapse: float | None) -> Any:
    """The model with the design given on the command line: as a campaign file's, `--replicates` alone fixes the
    searches (rounds then add pairs, up to 30 unless --max-seeds says)."""
    from dataclasses import replace

    from pipeline.spec.campaign_config import MAX_SEEDS

    if replicates is not None and max_replicates is None:
        model = replace(model, searches=replicates, max_searches=replicates,
                        max_seeds=max_seeds or max(MAX_SEEDS, seeds or model.seeds))
    elif replicates is not None or max_replicates is not None:
        first = replicates or min(model.searches, max_replicates or model.max_searches)
        model = replace(model, searches=first, max_searches=max(first, max_replicates or model.max_searches))
    given = {name: value for name, value in (("searches_per_round", per_round), ("seeds", seeds),
                                             ("seeds_per_round", seeds_per_round), ("max_seeds", max_seeds),
                                             ("trim", trim), ("image_correlation", image_correlation))
             if value is not None}
    model = replace(model, **given)
    if collapse is not None:
        model = replace(model, collapse=(collapse,) * len(model.methods))
    if model.seeds > model.max_seeds:
        raise UserError(f"--seeds {model.seeds} is more than --max-seeds {model.max_seeds}")
    if model.max_searches == 1 and model.seeds < 2:
        raise UserError("--seeds: with one search the first round needs 2 pairs or more")
    return model


def _stored_campaign(name: str, db: str | None) -> tuple[Any, Any]:
    """The store (read only) and the campaign `name` (CAMPAIGN.TASK: one task of a campaign of several)."""
    from pipeline.store import Store

    store = Store(db, create=False)
    parent, _, task = name.partition(".")
    found = store.campaign(parent) if task else None
    campaign = found.task(task) if found is not None and task in found.tasks else store.require_campaign(name)
    if campaign.tasks:
        raise UserError(f"campaign {name} has {len(campaign.tasks)} tasks: name one, "
                        + ", ".join(f"--from {name}.{t}" for t in campaign.tasks))
    return store, campaign
