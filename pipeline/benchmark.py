"""Step-time benchmarks measured side by side in one process, reported as ratios.

Every method runs through the trainer's own hot path (`prepare` + `run_epoch`) on the same model
and data as ERM; rounds interleave the methods so that drift in the machine hits all of them.
A second comparison runs the same ERM epoch through a plain DataLoader loop.
"""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from pipeline.config import DataConfig, TrainConfig, resolve_device
from pipeline.data import Dataset, Split, load_dataset
from pipeline.methods import parse_method
from pipeline.methods.generators import GilsAscent, features_and_logits
from pipeline.trainer import Run, prepare, run_epoch

# (label, method, parameters, what to compare the ratio with: a text, or the number of input-gradient
# passes of the method's generator, whose ideal ratio is 2 descents + passes x one measured pass; an
# attack adds a third of a pass, the no-grad forward that gives the sampler the original batch's losses)
CASES = (
    ("ls", "ls", {"alpha": 0.1}, "~1"),
    ("hws (beta 10)", "hws", {"beta": 10.0}, "<= 1.03"),
    ("hws + importance sampling", "hws", {"beta": 10.0, "importance_sampling": True}, "<= 1.03"),
    ("gils feature T=5", "gils", {"T": 5, "perturb": "feature"}, "<= 1.15"),
    ("gils input T=1", "gils", {"T": 1}, 1),
    ("gils input T=5", "gils", {"T": 5}, 5),
    ("gils input T=15", "gils", {"T": 15}, 15),
    ("mixup", "mixup", {}, "~1"),
    ("cutmix", "cutmix", {}, "~1"),
    ("cutout", "cutout", {}, "~1"),
    ("fgsm", "fgsm", {}, 1 + 1 / 3),
    ("pgd (10 steps)", "pgd", {}, 10 + 1 / 3),
    ("pgdl2 (10 steps)", "pgdl2", {}, 10 + 1 / 3),
    ("cw (50 steps)", "cw", {}, 50 + 1 / 3),
    ("gils+pgd (T=5, 10 steps)", "gils+pgd", {"T": 5}, 15),
)
SETTINGS = ("digits", "resnet18")


@dataclass(frozen=True)
class Row:
    setting: str
    case: str
    step_ms: float
    ratio: float
    expected: str


def make_setting(setting: str, device: torch.device, steps: int, batch_size: int) -> tuple[str, Dataset]:
    """digits: the real 8x8 digits and the small CNN; resnet18: random 3x64x64 tensors, 10 classes.
    The training split is cut to `steps` whole batches so every sampler runs the same examples."""
    if setting == "digits":
        data = load_dataset(DataConfig(), device)
        backbone = "small_cnn"
    else:
        generator = torch.Generator().manual_seed(0)
        n = steps * batch_size
        images = torch.randn(n, 3, 64, 64, generator=generator)
        labels = torch.randint(0, 10, (n,), generator=generator)
        split = Split(images, labels)
        data = Dataset("random 64x64", [str(i) for i in range(10)], split, split, split).to(device)
        backbone = "resnet18"
    whole = min(len(data.train) // batch_size, steps) * batch_size
    data.train = Split(data.train.images[:whole], data.train.labels[:whole])
    return backbone, data


def _epoch_seconds(run: Run, split: Split) -> float:
    start = time.perf_counter()
    run_epoch(run, split)  # ends by reading the loss back, so the device has finished
    return time.perf_counter() - start


def ascent_step_seconds(run: Run, split: Split, repeats: int) -> float:
    """Time of one GI-LS input-ascent iteration (forward + input-backward, BatchNorm in eval mode)."""
    update = GilsAscent(parse_method("gils").resolve({"T": 1}))
    first = torch.arange(run.params["batch_size"], device=split.labels.device)
    images, labels = split.inputs(first), split.labels[first]
    run.model.eval()
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        generated, _ = update.ascend(features_and_logits(run.model), images, labels)
        generated.sum().item()
        times.append(time.perf_counter() - start)
    run.model.train()
    return statistics.median(times[1:])


def dataloader_epoch_seconds(run: Run, split: Split) -> float:
    """The same ERM epoch written the usual way: a DataLoader over CPU tensors, copied per batch."""
    loader = DataLoader(TensorDataset(split.inputs().cpu(), split.labels.cpu()),
                        batch_size=run.params["batch_size"], shuffle=True)
    start = time.perf_counter()
    run.model.train()
    total = torch.zeros((), device=run.device)
    for images, labels in loader:
        images, labels = images.to(run.device), labels.to(run.device)
        run.optimizer.zero_grad()
        loss = F.cross_entropy(run.model(images), labels)
        loss.backward()
        run.optimizer.step()
        total += loss.detach()
    total.item()
    return time.perf_counter() - start


def benchmark(setting: str, device_name: str = "auto", rounds: int = 5, steps: int = 10, batch_size: int = 32,
              report: Callable[[str], None] = lambda message: None) -> list[Row]:
    """Step time of every case and of a DataLoader loop, as ratios to ERM on the same model and data."""
    device = resolve_device(device_name)
    backbone, data = make_setting(setting, device, steps, batch_size)
    label = f"{backbone}, {data.name} {tuple(data.train.images.shape[1:])}, batch {batch_size}"
    cases = (("erm", "erm", {}, "1"),) + CASES
    runs = {name: prepare(TrainConfig(backbone=backbone, method=method, device=device_name,
                                      params={"batch_size": batch_size, **params}), data)
            for name, method, params, _ in cases}
    timings: dict[str, list[float]] = {name: [] for name in runs}
    timings["plain DataLoader loop (ERM)"] = []
    steps_per_epoch = len(data.train) // batch_size
    for round_ in range(rounds + 1):  # round 0 warms up and is not counted
        for name, run in runs.items():
            report(f"{setting}: round {round_}/{rounds}, {name}")
            seconds = _epoch_seconds(run, data.train)
            if round_:
                timings[name].append(seconds)
        seconds = dataloader_epoch_seconds(runs["erm"], data.train)
        if round_:
            timings["plain DataLoader loop (ERM)"].append(seconds)
    step = {name: statistics.median(times) / steps_per_epoch for name, times in timings.items()}
    erm_step = step["erm"]
    ascent_ratio = ascent_step_seconds(runs["erm"], data.train, rounds * 3) / erm_step
    rows = []
    for name, _, _, expected in cases:
        if not isinstance(expected, str):
            expected = f"ideal {2 + expected * ascent_ratio:.2f}"
        rows.append(Row(label, name, 1000 * step[name], step[name] / erm_step, expected))
    rows.append(Row(label, "plain DataLoader loop (ERM)", 1000 * step["plain DataLoader loop (ERM)"],
                    step["plain DataLoader loop (ERM)"] / erm_step, "> 1: resident tensors win"))
    return rows


def machine() -> str:
    """One line naming where the figures were measured."""
    if torch.cuda.is_available():
        where = torch.cuda.get_device_name()
    else:
        where = f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    return f"{where}; torch {torch.__version__}"
