"""Train the tables of real trials that `robust-tune bench search` replays (pipeline/bench/replay/).

The problems are the tool's own, from studies/digits-campaign.toml (digits with digit 3 rare in training,
the small CNN, plain SGD, 20 epochs):

- `hws` (digits-hws.csv): the hws study, whose search space is beta (log, [0.1, 1000]), importance sampling
  (on/off) and the two learning rates (log, [0.01, 0.2]);
- `erm` (digits-erm.csv): the ERM study with its two learning rates over a wider box (log, [0.003, 1]);
  the benchmark replays it over that box and over the campaign's range [0.01, 0.2], which cuts the best off.

Configurations are a scrambled Sobol sequence over the box (importance sampling on where the fourth
coordinate is at least 0.5), each trained on several training seeds through the same code path as a
study's trial (pipeline.search.trial.run_trial, one torch thread). A run that fails (diverged or collapsed) is
kept with its error and no metrics.

    python tools/replay_trials.py --problem hws --configs 256 --seeds 3 --processes 2
    python tools/replay_trials.py --problem erm --configs 64 --seeds 2 --processes 2

With `--splits N` (digits-hws-splits.csv) the script trains instead the `--configs` best configurations of the hws
table (by their mean objective over its seeds) on split seeds 0 .. N-1 (each split seed also draws which rare-digit
examples stay in training, as a campaign's resplit pairs do) x `--seeds` training seeds: how much a configuration's
value moves with the split beyond the seeds, among the configurations a search ends near (the search benchmark's
split term, pipeline/bench/problems.py).

    python tools/replay_trials.py --splits 4 --configs 24 --seeds 2 --processes 2

Rows are appended to a partial file as runs end, so a stopped run of the script goes on where it stopped;
the table is written, with a header saying what produced it and how long it took, when every run is done.
"""
from __future__ import annotations

import argparse
import csv
import multiprocessing
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAMPAIGN = ROOT / "studies" / "digits-campaign.toml"
# Per problem: the campaign's study, its box (all log-scaled; hws adds importance sampling), the table.
PROBLEMS = {
    "hws": ("hws", {"beta": (0.1, 1000.0), "lr_head": (0.01, 0.2), "lr_backbone": (0.01, 0.2)}, "digits-hws.csv"),
    "erm": ("erm", {"lr_head": (0.003, 1.0), "lr_backbone": (0.003, 1.0)}, "digits-erm.csv"),
}
METRICS = tuple(f"{split}_{metric}" for split in ("val", "test")
                for metric in ("accuracy", "balanced_accuracy", "worst_class_accuracy"))


def columns(problem: str, splits: bool = False) -> tuple[str, ...]:
    """The table's columns: the configuration's parameters, the split seed (with --splits), the seed, and what the
    run gave."""
    parameters = ("beta", "importance_sampling", "lr_head", "lr_backbone") if problem == "hws" else tuple(
        PROBLEMS[problem][1])
    return ("config", *parameters, *(("split",) if splits else ()), "seed", "status", *METRICS, "train_seconds",
            "error")


def configurations(problem: str, count: int) -> list[dict]:
    """`count` points of a scrambled Sobol sequence (seed 0) over the problem's box."""
    from scipy.stats import qmc

    space = PROBLEMS[problem][1]
    points = qmc.Sobol(d=len(space) + (problem == "hws"), scramble=True, seed=0).random(count)
    configs = []
    for point in points:
        config = {name: float(low * (high / low) ** u) for (name, (low, high)), u in zip(space.items(), point)}
        if problem == "hws":
            config["importance_sampling"] = bool(point[3] >= 0.5)
        configs.append(config)
    return configs


def best_configurations(count: int) -> list[tuple[int, dict]]:
    """The `count` configurations of the committed hws table with the best mean objective over its seeds (a failed
    run counted at chance, as the benchmark counts it), with their index in the table."""
    import numpy as np

    from pipeline.bench.problems import CHANCE, REPLAY_TABLE

    with REPLAY_TABLE.open() as file:
        rows = list(csv.DictReader(line for line in file if not line.startswith("#")))
    values: dict[int, list[float]] = {}
    configs: dict[int, dict] = {}
    for row in rows:
        index = int(row["config"])
        configs[index] = {"beta": float(row["beta"]), "importance_sampling": row["importance_sampling"] == "True",
                          "lr_head": float(row["lr_head"]), "lr_backbone": float(row["lr_backbone"])}
        values.setdefault(index, []).append(float(row["val_balanced_accuracy"]) if row["status"] == "completed"
                                            else CHANCE)
    best = sorted(values, key=lambda index: -float(np.mean(values[index])))[:count]
    return [(index, configs[index]) for index in sorted(best)]


def _study(problem: str, split: int | None = None):
    import dataclasses

    from pipeline.spec.campaign_config import load_campaign

    study = load_campaign(CAMPAIGN).study(PROBLEMS[problem][0])
    if split is None:
        return study
    return dataclasses.replace(study, data=dataclasses.replace(study.data, split_seed=split))


def _run(job: tuple[str, int, dict, int, int | None]) -> dict:
    from pipeline.search.trial import run_trial

    problem, index, config, seed, split = job
    row = {"config": index, **config, **({} if split is None else {"split": split}), "seed": seed}
    start = time.perf_counter()
    try:
        result = run_trial(_study(problem, split), config, seed, device="cpu")
        row.update({"status": "completed", **{m: result.metrics[m] for m in METRICS}, "error": ""})
    except Exception as error:  # noqa: BLE001  (a diverged run is part of the problem, kept as such)
        row.update({"status": "failed", "error": f"{type(error).__name__}: {error}".splitlines()[0]})
    row["train_seconds"] = round(time.perf_counter() - start, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", choices=tuple(PROBLEMS), default="hws")
    parser.add_argument("--configs", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--splits", type=int, default=0,
                        help="train the --configs best configurations of the hws table on this many split seeds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.splits:
        args.problem = "hws"
    table = "digits-hws-splits.csv" if args.splits else PROBLEMS[args.problem][2]
    args.out = args.out or ROOT / "pipeline" / "bench" / "replay" / table
    study, space, _ = PROBLEMS[args.problem]
    box = ", ".join(f"{name} [{low:g}, {high:g}]" for name, (low, high) in space.items())
    partial = args.out.with_suffix(".partial.csv")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = []
    if partial.exists():
        with partial.open() as file:
            done = list(csv.DictReader(file))
    have = {(int(r["config"]), int(r.get("split") or 0), int(r["seed"])) for r in done}
    if args.splits:
        configs = best_configurations(args.configs)
        jobs = [(args.problem, i, c, s, split) for split in range(args.splits) for s in range(args.seeds)
                for i, c in configs if (i, split, s) not in have]
    else:
        configs = list(enumerate(configurations(args.problem, args.configs)))
        jobs = [(args.problem, i, c, s, None) for s in range(args.seeds) for i, c in configs if (i, 0, s) not in have]
    start = time.perf_counter()
    print(f"{len(have)} runs already done, {len(jobs)} to train on {args.processes} processes", flush=True)
    with partial.open("a", newline="") as file:
        writer = csv.DictWriter(file, columns(args.problem, bool(args.splits)))
        if not done:
            writer.writeheader()
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            for k, row in enumerate(pool.imap_unordered(_run, jobs), 1):
                writer.writerow(row)
                file.flush()
                if k % 10 == 0 or k == len(jobs):
                    elapsed = time.perf_counter() - start
                    print(f"{k}/{len(jobs)} runs, {elapsed / 60:.1f} min", flush=True)
    wanted = {i for i, _ in configs}
    with partial.open() as file:  # the runs asked for: a run stopped and started with fewer keeps a whole table
        rows = sorted((r for r in csv.DictReader(file) if int(r["config"]) in wanted and int(r["seed"]) < args.seeds
                       and int(r.get("split") or 0) < max(args.splits, 1)),
                      key=lambda r: (int(r["config"]), int(r.get("split") or 0), int(r["seed"])))
    wall = time.perf_counter() - start
    import torch

    with args.out.open("w", newline="") as file:
        if args.splits:
            file.write(f"# Real trials of the {study} study of studies/digits-campaign.toml: the {args.configs} best "
                       f"configurations of digits-hws.csv x {args.splits} split seeds x {args.seeds} training seeds, "
                       f"produced by tools/replay_trials.py --splits {args.splits} --configs {args.configs} "
                       f"--seeds {args.seeds}\n")
        else:
            file.write(f"# Real trials of the {study} study of studies/digits-campaign.toml ({box}, log-scaled): "
                       f"{args.configs} Sobol configurations x {args.seeds} training seeds, produced by "
                       f"tools/replay_trials.py --problem {args.problem}\n")
        file.write(f"# wall time of the last invocation {wall / 60:.1f} min on {args.processes} processes "
                   f"({platform.processor() or platform.machine()}, torch {torch.__version__}, one thread "
                   f"each); training time of all runs {sum(float(r['train_seconds']) for r in rows) / 60:.1f} min\n")
        writer = csv.DictWriter(file, columns(args.problem, bool(args.splits)))
        writer.writeheader()
        writer.writerows(rows)
    partial.unlink()
    print(f"wrote {args.out}: {len(rows)} runs", flush=True)


if __name__ == "__main__":
    main()
