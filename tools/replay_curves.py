"""Train the table of real per-epoch curves that `robust-tune bench prefixes` replays (pipeline/bench/replay/).

The problem is the hws study of studies/digits-campaign.toml (digits with digit 3 rare in training, the
small CNN, plain SGD, importance sampling off) with `epochs` searched as well: the space is beta (log,
[0.1, 1000]), the two learning rates (log, [0.01, 0.2]) and epochs (int, [2, 20]). Configurations are a
scrambled Sobol sequence over the first three, each trained once to the top epoch count on several
training seeds through the same code path as a study's trial (pipeline.search.trial.run_trial, one torch thread);
every epoch's validation and test metrics are kept, so a run holds the result of every shorter run too
(pipeline/spec/epochs.py). A run that fails (diverged or collapsed) is kept with its error and no metrics.

    python tools/replay_curves.py --configs 128 --seeds 2 --processes 2

Rows are appended to a partial file as runs end, so a stopped run of the script goes on where it stopped;
the table is written, with a header saying what produced it and how long it took, when every run is done.
"""
from __future__ import annotations

import argparse
import csv
import multiprocessing
import platform
import time
from pathlib import Path

# The same study, box and metrics as the search benchmark's table of final results (tools/replay_trials.py).
from replay_trials import METRICS, ROOT, SPACE, _study

TABLE = ROOT / "pipeline" / "replay" / "digits-hws-curves.csv"
TOP_EPOCHS = 20
COLUMNS = ("config", "beta", "lr_head", "lr_backbone", "seed", "epoch", "status", *METRICS, "train_seconds", "error")


def configurations(count: int) -> list[dict]:
    """`count` points of a scrambled Sobol sequence (seed 0) over the box, importance sampling off."""
    from scipy.stats import qmc

    points = qmc.Sobol(d=len(SPACE), scramble=True, seed=0).random(count)
    return [{**{name: float(low * (high / low) ** u) for (name, (low, high)), u in zip(SPACE.items(), point)},
             "importance_sampling": False} for point in points]


def _run(job: tuple[int, dict, int, int]) -> list[dict]:
    """One run to `epochs` epochs: a row per epoch (a failed run: one row with its error)."""
    from pipeline.search.trial import run_trial

    index, config, seed, epochs = job
    base = {"config": index, **{k: config[k] for k in SPACE}, "seed": seed}
    start = time.perf_counter()
    try:
        result = run_trial(_study(), {**config, "epochs": epochs}, seed, device="cpu")
    except Exception as error:  # noqa: BLE001  (a diverged run is part of the problem, kept as such)
        return [{**base, "epoch": "", "status": "failed", "train_seconds": round(time.perf_counter() - start, 3),
                 "error": f"{type(error).__name__}: {error}".splitlines()[0]}]
    seconds = round(time.perf_counter() - start, 3)
    rows = []
    for record in result.epochs:
        flat = record.metrics
        rows.append({**base, "epoch": record.epoch, "status": "completed", **{m: flat.get(m) for m in METRICS},
                     "train_seconds": seconds, "error": ""})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=TOP_EPOCHS)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=TABLE)
    args = parser.parse_args()
    partial = args.out.with_suffix(".partial.csv")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = []
    if partial.exists():
        with partial.open() as file:
            done = list(csv.DictReader(file))
    have = {(int(r["config"]), int(r["seed"])) for r in done}
    clock = args.out.with_suffix(".partial.minutes")  # wall minutes of earlier, stopped invocations
    previous = float(clock.read_text()) if done and clock.exists() else 0.0
    configs = configurations(args.configs)
    jobs = [(i, c, s, args.epochs) for s in range(args.seeds) for i, c in enumerate(configs) if (i, s) not in have]
    start = time.perf_counter()
    print(f"{len(have)} runs already done, {len(jobs)} to train on {args.processes} processes", flush=True)
    with partial.open("a", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        if not done:
            writer.writeheader()
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            for k, rows in enumerate(pool.imap_unordered(_run, jobs), 1):
                writer.writerows(rows)
                file.flush()
                clock.write_text(f"{previous + (time.perf_counter() - start) / 60:.2f}")
                if k % 10 == 0 or k == len(jobs):
                    print(f"{k}/{len(jobs)} runs, {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    with partial.open() as file:  # a run of the script with fewer configurations leaves out the rest
        rows = sorted((r for r in csv.DictReader(file) if int(r["config"]) < args.configs),
                      key=lambda r: (int(r["config"]), int(r["seed"]), int(r["epoch"] or 0)))
    wall = previous + (time.perf_counter() - start) / 60
    runs = {(r["config"], r["seed"]): float(r["train_seconds"]) for r in rows}
    import torch

    with args.out.open("w", newline="") as file:
        file.write(f"# Real per-epoch curves of the hws study of studies/digits-campaign.toml with epochs searched "
                   f"(importance sampling off): {args.configs} Sobol configurations x {args.seeds} training seeds, "
                   f"each trained to {args.epochs} epochs, produced by tools/replay_curves.py\n")
        file.write(f"# wall time {wall:.1f} min on {args.processes} processes "
                   f"({platform.processor() or platform.machine()}, torch {torch.__version__}, one thread "
                   f"each); training time of all runs {sum(runs.values()) / 60:.1f} min\n")
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    partial.unlink()
    clock.unlink(missing_ok=True)
    print(f"wrote {args.out}: {len(runs)} runs, {len(rows)} rows", flush=True)


if __name__ == "__main__":
    main()
