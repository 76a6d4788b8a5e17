"""What one epoch of the hardness paper's MNIST experiment costs: ERM and hws side by side, in one process.

Writes random IDX files of MNIST's real size (60,000 + 10,000 images of 28x28) to a temporary folder, loads
them through studies/paper/hws-mnist-wrn16-1.toml's data settings (1% of digit 3 kept in training, 10% carved
for validation) and times, interleaved round by round so that the machine's load hits both alike, the training
steps of ERM and hws (beta 10) on WRN-16-1 with the study's fixed settings, and the evaluation of the validation
and test splits an epoch ends with. With --batches N a round trains N batches of each method and the epoch's
training time is the median batch time times the epoch's batches; the hws sampler draws from all 48,654 stale
losses either way, so its per-batch cost is the full epoch's.

    .venv/bin/python tools/mnist_epoch_cost.py --threads 2 --rounds 3 --batches 200
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pipeline.config import TrainConfig
from pipeline.data import load_dataset
from pipeline.methods import parse_method
from pipeline.training.metrics import predict
from pipeline.spec.study_config import load_study
from pipeline.training.trainer import prepare, run_epoch

STUDY = Path(__file__).resolve().parents[1] / "studies" / "paper" / "hws-mnist-wrn16-1.toml"
METHODS = {"erm": {}, "hws": {"beta": 10.0}}


class Enough(Exception):
    """Stops a timed epoch after the batches asked for."""


def write_mnist_sized(root: Path) -> None:
    """train- and t10k- image and label files of MNIST's sizes: random pixels, labels 0-9 in turn."""
    rng = np.random.default_rng(0)
    for part, n in (("train", 60_000), ("t10k", 10_000)):
        for kind, array in (("images-idx3", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)),
                            ("labels-idx1", (np.arange(n) % 10).astype(np.uint8))):
            header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
            (root / f"{part}-{kind}-ubyte").write_bytes(header + array.tobytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up round")
    parser.add_argument("--batches", type=int, default=0, help="training batches per round (0: whole epochs)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores; torch threads {args.threads}")
    with tempfile.TemporaryDirectory() as folder:
        write_mnist_sized(Path(folder))
        study = load_study(STUDY, [f"data.root={folder}"])
        data = load_dataset(study.data, torch.device("cpu"))
    print(f"splits: train {len(data.train)}, val {len(data.val)}, test {len(data.test)}")
    runs = {}
    for name, params in METHODS.items():
        declared = {p.name for p in parse_method(name).params}
        fixed = {key: value for key, value in study.fixed.items() if key in declared}
        runs[name] = prepare(TrainConfig(data=study.data, backbone=study.backbone, method=name, device="cpu",
                                         params={**fixed, "epochs": 1, **params}), data)
    batches_per_epoch = -(-len(data.train) // study.fixed["batch_size"])
    train_seconds: dict[str, list[float]] = {name: [] for name in runs}
    eval_seconds: list[float] = []

    def stop_after(batch: int) -> None:
        if args.batches and batch == args.batches:
            raise Enough

    for round_ in range(args.rounds + 1):  # round 0 warms up
        for name, run in runs.items():
            start = time.perf_counter()
            try:
                run_epoch(run, data.train, stop_after)
            except Enough:
                pass
            seconds = (time.perf_counter() - start) * (batches_per_epoch / args.batches if args.batches else 1)
            if round_:
                train_seconds[name].append(seconds)
        start = time.perf_counter()
        predict(runs["erm"].model, data.val), predict(runs["erm"].model, data.test)
        if round_:
            eval_seconds.append(time.perf_counter() - start)
            print(f"round {round_}: " + ", ".join(f"{n} {s[-1]:.0f} s" for n, s in train_seconds.items())
                  + f", hws/erm {train_seconds['hws'][-1] / train_seconds['erm'][-1]:.3f}, "
                  f"evaluation {eval_seconds[-1]:.1f} s", flush=True)
    evaluation = statistics.median(eval_seconds)
    for name, times in train_seconds.items():
        median = statistics.median(times)
        print(f"{name}: training {median:.0f} s an epoch ({batches_per_epoch} batches of "
              f"{study.fixed['batch_size']}, {1000 * median / batches_per_epoch:.1f} ms a batch) + evaluation "
              f"{evaluation:.1f} s = {median + evaluation:.0f} s an epoch")
    ratios = [h / e for h, e in zip(train_seconds["hws"], train_seconds["erm"])]
    print(f"hws / erm training time, per round: {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f}")
    print(f"load after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
