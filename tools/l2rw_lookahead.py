"""Learning to Reweight's look-ahead two ways, side by side in one process: the project's (forward mode: each
example's loss derivative along lr * the clean gradient) and Algorithm 1 differentiated as written (the clean loss
after the look-ahead, back-propagated to epsilon through the look-ahead's backward pass, on a forward of its own:
how the look-ahead was computed before). Prints each step's time as a ratio to ERM's, rounds interleaved, and the
largest difference between the two sets of weights.

    python tools/l2rw_lookahead.py --setting digits --threads 1

Settings as `robust-tune bench steps`: digits (the small CNN on the real 8x8 digits) or resnet18 (random 3x64x64).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from torch.func import functional_call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.bench.steps import make_setting, _epoch_seconds  # noqa: E402
from pipeline.config import TrainConfig  # noqa: E402
from pipeline.data import Split  # noqa: E402
from pipeline.methods.losses import method_loss  # noqa: E402
from pipeline.methods.weights import LearningToReweight, l2rw_weights  # noqa: E402
from pipeline.training.trainer import prepare  # noqa: E402


def through_backward(model: torch.nn.Module, images: torch.Tensor, targets: torch.Tensor, clean: Split,
                     learning_rates: dict[str, float], alpha: float) -> torch.Tensor:
    """Algorithm 1, lines 4-11, as written: a look-ahead step on sum_i eps_i loss_i at eps = 0 (create_graph), the
    clean loss at the looked-ahead parameters, its gradient with respect to eps; clamped and normalised."""
    params = {name: p for name, p in model.named_parameters() if name in learning_rates and p.requires_grad}
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    losses = method_loss(functional_call(model, (params, buffers), (images,)), targets, alpha)
    epsilon = torch.zeros_like(losses, requires_grad=True)
    gradients = torch.autograd.grad((epsilon * losses).sum(), list(params.values()), create_graph=True,
                                    allow_unused=True)
    ahead = {name: p if g is None else p - learning_rates[name] * g for (name, p), g in zip(params.items(), gradients)}
    clean_loss = method_loss(functional_call(model, (ahead, buffers), (clean.inputs(),)), clean.labels, alpha).mean()
    (gradient,) = torch.autograd.grad(clean_loss, epsilon)
    raw = (-gradient).clamp(min=0)
    total = raw.sum()
    return raw / torch.where(total > 0, total, torch.ones_like(total))


class ThroughBackward(LearningToReweight):
    """The weights part with the look-ahead differentiated as written."""

    def weigh(self, images: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor) -> torch.Tensor | None:
        by_parameter = {id(p): group["lr"] for group in self.optimizer.param_groups for p in group["params"]}
        rates = {name: by_parameter[id(p)] for name, p in self.model.named_parameters() if id(p) in by_parameter}
        with torch.enable_grad():
            return len(losses) * through_backward(self.model, images.detach(), targets, self.clean_batch(len(images)),
                                                  rates, self.alpha)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=("digits", "resnet18"), default="digits")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ((backbone, data),) = make_setting(args.setting, torch.device("cpu"), 10, args.batch_size)
    params = {"batch_size": args.batch_size}
    runs = {name: prepare(TrainConfig(backbone=backbone, method=method, device="cpu", params=params), data)
            for name, method in (("erm", "erm"), ("l2rw through the backward pass", "l2rw"),
                                 ("l2rw forward mode", "l2rw"))}
    written = runs["l2rw through the backward pass"]
    written.weights.__class__ = ThroughBackward  # same state (clean set, generator), the other look-ahead
    model, clean = runs["l2rw forward mode"].model, runs["l2rw forward mode"].weights.clean
    first = torch.arange(args.batch_size)
    rates = {name: 0.05 for name, _ in model.named_parameters()}
    images, labels = data.train.inputs(first), data.train.labels[first]
    difference = (l2rw_weights(model, images, labels, clean, rates, 0.0)
                  - through_backward(model, images, labels, clean, rates, 0.0)).abs().max().item()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        for name, run in runs.items():
            seconds = _epoch_seconds(run, run.train) * args.batch_size / len(run.train)  # per step
            if round_:
                times[name].append(seconds)
    erm = statistics.median(times["erm"])
    print(f"{args.setting} ({backbone}), batch {args.batch_size}, {args.threads} thread(s), median of {args.rounds} "
          f"rounds; largest difference between the two look-aheads' weights: {difference:.1e}\n")
    print("| step | ms | ratio to ERM |\n|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {1000 * statistics.median(values):.1f} | {statistics.median(values) / erm:.2f}x |")


if __name__ == "__main__":
    main()
