"""Several confirmation runs of one configuration at once (`robust-tune bench runs`), against one at a time.

Arm (a) trains seeds 0..N-1 one after another through the trainer (`train`, today's path without workers). Arm (b)
trains the same N runs as one batched model: the N networks' parameters stacked (`torch.func.stack_module_state`),
one `functional_call` under `torch.vmap` for all of them, each seed with the trainer's own initialisation, batch
order and optimizer (the runs are built by the trainer's `prepare`, so the seed reaches everything as it does there;
the stacked parameters then step under the same SGD, which is elementwise, so one optimizer over the stacks is N
optimizers side by side). Rounds interleave the arms in one process; each arm's runs per hour is the median over
the rounds. Both arms' results are compared seed by seed: the batched path's numbers must be one-at-a-time's within
float tolerance, which the largest differences in the table show.

ERM (and any method whose step is one descent on the sampled batch with uniform weights: erm, ls) is what the
batched path covers. It cannot cover, without per-run state it does not keep: samplers whose draws depend on each
run's losses (hws), weights parts with per-run state (groupdro's q, l2rw's look-ahead on a clean batch), mixers and
augmentation drawn from each run's generator, generators and attacks (GI-LS's inner ascent, PGD and the others run
per-run loops on the model), and early stopping, which ends runs at different epochs.
"""
from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, cast

import torch

from pipeline.config import DataConfig, RunSettings, TrainConfig, resolve_device
from pipeline.data import Dataset, load_dataset
from pipeline.methods import parse_method
from pipeline.training.metrics import EVAL_BATCH_SIZE, split_metrics
from pipeline.training.result import EpochMetrics, RunResult
from pipeline.training.trainer import check_collapsed, check_diverged, library_versions, prepare, torch_threads, train

BATCHED_METHODS = ("erm", "ls")  # one descent on the sampled batch, uniform sampler, no weights, mixer or generator


def check_batchable(config: TrainConfig) -> None:
    """Refuse a configuration the batched path cannot train as the trainer would (see the module's docstring)."""
    method = parse_method(config.method)
    if method.name not in BATCHED_METHODS or config.data.augment_flip or config.data.augment_crop_padding:
        raise ValueError(f"the batched path trains {', '.join(BATCHED_METHODS)} without augmentation, "
                         f"not {config.method}")


def train_batched(config: TrainConfig, seeds: list[int], dataset: Dataset) -> list[RunResult]:
    """Train `config` once per seed as one batched model; each result is what `train` gives that seed, within
    float tolerance (fp32 only)."""
    check_batchable(config)
    config = replace(config, precision="fp32")
    with torch_threads(config.threads):
        start = time.perf_counter()
        runs = [prepare(replace(config, seed=seed), dataset) for seed in seeds]  # init, batch order, lr as `train`
        params, buffers = torch.func.stack_module_state([run.model for run in runs])
        base = copy.deepcopy(runs[0].model).to("meta")
        model = torch.vmap(lambda p, b, x: torch.func.functional_call(base, (p, b), (x,)), in_dims=(0, 0, 0))
        shared = torch.vmap(lambda p, b, x: torch.func.functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))
        groups = [[p for name, p in params.items() if name.startswith(prefix)] for prefix in ("head.", "features.")]
        first = runs[0].optimizer.param_groups  # the trainer's SGD: head, then backbone (unless frozen)
        optimizer = torch.optim.SGD([{**{key: value for key, value in g.items() if key not in ("params", "initial_lr")},
                                      "params": ps} for g, ps in zip(first, groups)])
        schedule = cast(torch.optim.lr_scheduler.StepLR, runs[0].scheduler)  # the trainer's (make_optimizer)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, schedule.step_size, schedule.gamma)
        for ps in groups[len(first):]:  # a frozen backbone
            for p in ps:
                p.requires_grad_(False)
        loss, train_split = runs[0].update.loss, runs[0].train  # type: ignore[attr-defined]  # a OneDescentUpdate
        history: list[list[EpochMetrics]] = [[] for _ in seeds]
        losses_so_far: list[list[float]] = [[] for _ in seeds]
        epochs = runs[0].params["epochs"]
        for epoch in range(1, epochs + 1):
            base.train()
            loss_sum, seen = torch.zeros(len(seeds), device=runs[0].device), 0
            for indices in zip(*(run.sampler.epoch() for run in runs)):  # each seed's own order, same batch sizes
                batch = torch.stack(indices)
                logits = model(params, buffers, train_split.inputs(batch))
                per_example = loss(logits.flatten(0, 1), train_split.labels[batch].flatten()).view(len(seeds), -1)
                optimizer.zero_grad(set_to_none=True)
                per_example.mean(dim=1).sum().backward()  # each run's gradient is its own mean loss's
                optimizer.step()
                loss_sum += per_example.detach().sum(dim=1)
                seen += batch.shape[1]
            scheduler.step()
            base.eval()
            with torch.no_grad():
                val, test = ([torch.cat([shared(params, buffers, chunk).argmax(dim=2)
                                         for chunk in split.chunks(EVAL_BATCH_SIZE)], dim=1)
                              for split in (dataset.val, dataset.test)])
            for i, mean_loss in enumerate(total / seen for total in loss_sum.tolist()):  # as `run_epoch` divides
                losses_so_far[i].append(mean_loss)
                check_diverged(losses_so_far[i], epochs, dataset.num_classes)
                history[i].append(EpochMetrics(epoch, mean_loss,
                                               split_metrics(val[i], dataset.val.labels, dataset.class_names),
                                               split_metrics(test[i], dataset.test.labels, dataset.class_names)))
        if runs[0].device.type == "cuda":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / len(seeds)  # the runs' shared time, split evenly
    results = []
    for i, (seed, run) in enumerate(zip(seeds, runs)):
        run.model.load_state_dict({name: value[i] for name, value in {**params, **buffers}.items()})
        check_collapsed(val[i], dataset.val.labels, losses_so_far[i][-1], dataset.class_names)
        settings = RunSettings(config.data, config.backbone, config.weights, parse_method(config.method).name,
                               run.params, seed, str(run.device), "fp32", config.threads, dict(library_versions()))
        results.append(RunResult(history[i][-1].val, history[i][-1].test, tuple(history[i]), seconds, seed, settings,
                                 run.sampler.mean_distinct_per_batch(), model=run.model))
    return results


@dataclass(frozen=True)
class RunsRow:
    """One (runs, threads) case: both arms' runs per hour and how far the batched runs' numbers are from one at a
    time's, the largest difference over the seeds."""

    runs: int
    threads: int
    one_at_a_time_per_hour: float  # median over the rounds
    batched_per_hour: float
    ratio: float  # batched over one at a time
    weights: float  # largest absolute difference of a final weight or BatchNorm statistic
    train_loss: float  # largest absolute difference of an epoch's mean training loss
    accuracy_points: float  # largest difference of a validation or test metric (accuracy, balanced, worst class)


def differences(one: RunResult, batched: RunResult) -> tuple[float, float, float]:
    """The largest differences of weights, epoch losses and metrics (in points) between two runs of one seed."""
    assert one.model is not None and batched.model is not None
    left, right = one.model.state_dict(), batched.model.state_dict()
    weights = max((left[name].double() - right[name].double()).abs().max().item() for name in left)
    losses = max(abs(a.train_loss - b.train_loss) for a, b in zip(one.epochs, batched.epochs))
    metrics = [(a.val.scalars(), b.val.scalars()) for a, b in zip(one.epochs, batched.epochs)]
    metrics += [(a.test.scalars(), b.test.scalars()) for a, b in zip(one.epochs, batched.epochs)]
    points = max(100 * abs(a[key] - b[key]) for a, b in metrics for key in a)
    return weights, losses, points


def machine(device_name: str) -> str:
    """Where the figures were measured: the GPU's name, or the CPU and its cores (the thread counts are the rows')."""
    import os
    import platform

    if resolve_device(device_name).type == "cuda":
        where = torch.cuda.get_device_name()
    else:
        where = f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores"
    return f"{where}; torch {torch.__version__}"


def benchmark(runs: tuple[int, ...] = (4, 8), threads: tuple[int, ...] = (1, 2), epochs: int = 3, rounds: int = 3,
              device_name: str = "auto", report: Callable[[str], None] = lambda message: None) -> list[RunsRow]:
    """Runs per hour of N ERM runs (seeds 0..N-1, the small CNN on the digits) one at a time and batched, for each
    N of `runs` and each thread count, the two arms interleaved round by round (round 0 warms up, uncounted)."""
    device = resolve_device(device_name)
    data = load_dataset(DataConfig(), device)
    rows = []
    for thread_count in threads:
        config = TrainConfig(device=device_name, precision="fp32", threads=thread_count, params={"epochs": epochs})
        for n in runs:
            seeds = list(range(n))
            seconds: dict[str, list[float]] = {"one": [], "batched": []}
            for round_ in range(rounds + 1):
                report(f"{n} runs, {thread_count} thread(s): round {round_}/{rounds}, one at a time")
                start = time.perf_counter()
                one = [train(replace(config, seed=seed), data) for seed in seeds]
                middle = time.perf_counter()
                report(f"{n} runs, {thread_count} thread(s): round {round_}/{rounds}, batched")
                batched = train_batched(config, seeds, data)
                end = time.perf_counter()
                if round_:
                    seconds["one"].append(middle - start)
                    seconds["batched"].append(end - middle)
                else:
                    diffs = [differences(a, b) for a, b in zip(one, batched)]
            per_hour = {arm: 3600 * n / statistics.median(times) for arm, times in seconds.items()}
            rows.append(RunsRow(n, thread_count, per_hour["one"], per_hour["batched"],
                                per_hour["batched"] / per_hour["one"], *(max(d[i] for d in diffs) for i in range(3))))
    return rows
