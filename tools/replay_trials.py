"""Train the table of real trials that `robust-tune bench --search` replays (pipeline/bench/replay/).

The problem is the tool's own: the hws study of studies/digits-campaign.toml (digits with digit 3 rare in
training, the small CNN, plain SGD, 20 epochs), whose search space is beta (log, [0.1, 1000]), importance
sampling (on/off) and the two learning rates (log, [0.01, 0.2]). Configurations are a scrambled Sobol
sequence over that box (importance sampling on where the fourth coordinate is at least 0.5), each trained
on several training seeds through the same code path as a study's trial (pipeline.search.trial.run_trial, one
torch thread). A run that fails (diverged or collapsed) is kept with its error and no metrics.

    python tools/replay_trials.py --configs 256 --seeds 3 --processes 2

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
TABLE = ROOT / "pipeline" / "replay" / "digits-hws.csv"
SPACE = {"beta": (0.1, 1000.0), "lr_head": (0.01, 0.2), "lr_backbone": (0.01, 0.2)}  # all log-scaled
METRICS = tuple(f"{split}_{metric}" for split in ("val", "test")
                for metric in ("accuracy", "balanced_accuracy", "worst_class_accuracy"))
COLUMNS = ("config", "beta", "importance_sampling", "lr_head", "lr_backbone", "seed", "status", *METRICS,
           "train_seconds", "error")


def configurations(count: int) -> list[dict]:
    """`count` points of a scrambled Sobol sequence (seed 0) over the hws study's box."""
    from scipy.stats import qmc

    points = qmc.Sobol(d=4, scramble=True, seed=0).random(count)
    configs = []
    for point in points:
        config = {name: float(low * (high / low) ** u) for (name, (low, high)), u in zip(SPACE.items(), point)}
        config["importance_sampling"] = bool(point[3] >= 0.5)
        configs.append(config)
    return configs


def _study():
    from pipeline.spec.campaign_config import load_campaign

    return load_campaign(CAMPAIGN).study("hws")


def _run(job: tuple[int, dict, int]) -> dict:
    from pipeline.search.trial import run_trial

    index, config, seed = job
    row = {"config": index, **config, "seed": seed}
    start = time.perf_counter()
    try:
        result = run_trial(_study(), config, seed, device="cpu")
        row.update({"status": "completed", **{m: result[m] for m in METRICS}, "error": ""})
    except Exception as error:  # noqa: BLE001  (a diverged run is part of the problem, kept as such)
        row.update({"status": "failed", "error": f"{type(error).__name__}: {error}".splitlines()[0]})
    row["train_seconds"] = round(time.perf_counter() - start, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=3)
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
    configs = configurations(args.configs)
    jobs = [(i, c, s) for s in range(args.seeds) for i, c in enumerate(configs) if (i, s) not in have]
    start = time.perf_counter()
    print(f"{len(have)} runs already done, {len(jobs)} to train on {args.processes} processes", flush=True)
    with partial.open("a", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        if not done:
            writer.writeheader()
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            for k, row in enumerate(pool.imap_unordered(_run, jobs), 1):
                writer.writerow(row)
                file.flush()
                if k % 10 == 0 or k == len(jobs):
                    elapsed = time.perf_counter() - start
                    print(f"{k}/{len(jobs)} runs, {elapsed / 60:.1f} min", flush=True)
    with partial.open() as file:
        rows = sorted(csv.DictReader(file), key=lambda r: (int(r["config"]), int(r["seed"])))
    wall = time.perf_counter() - start
    import torch

    with args.out.open("w", newline="") as file:
        file.write(f"# Real trials of the hws study of studies/digits-campaign.toml: {args.configs} Sobol "
                   f"configurations x {args.seeds} training seeds, produced by tools/replay_trials.py\n")
        file.write(f"# wall time of the last invocation {wall / 60:.1f} min on {args.processes} processes "
                   f"({platform.processor() or platform.machine()}, torch {torch.__version__}, one thread "
                   f"each); training time of all runs {sum(float(r['train_seconds']) for r in rows) / 60:.1f} min\n")
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    partial.unlink()
    print(f"wrote {args.out}: {len(rows)} runs", flush=True)


if __name__ == "__main__":
    main()
