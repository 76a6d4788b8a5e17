"""Step-time benchmarks measured side by side in one process, reported as ratios.

Every method runs through the trainer's own hot path (`prepare` + `run_epoch`) on the same model
and data as ERM; rounds interleave the methods (and precisions) so that drift in the machine hits all
of them. A second comparison runs the same ERM epoch through a plain DataLoader loop. The paper
setting times ERM and the GI-LS input ascent on ResNet18/34/50 at the papers' image size, over random
uint8 images as many as MT-Defect's training split. `study_benchmark` (study_bench.py) times whole
studies.
"""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from pipeline.config import DataConfig, TrainConfig, resolve_device
from pipeline.data import Dataset, Split, load_dataset
from pipeline.data.images import IMAGENET_MEAN, IMAGENET_STD
from pipeline.data.paper_splits import MT_DEFECT
from pipeline.methods import parse_method
from pipeline.methods.declarations import WEIGHTS
from pipeline.methods.generators import GilsAscent, features_and_logits
from pipeline.training.trainer import Run, prepare, run_epoch

# (label, method, parameters, what to compare the ratio with: a text, or the number of input-gradient
# passes of the method's generator, whose ideal ratio is 2 descents + passes x one measured pass; an
# attack adds a third of a pass, the no-grad forward that gives the sampler the original batch's losses)
Case = tuple[str, str, dict[str, Any], str | float]
CASES: tuple[Case, ...] = (
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
    ("hws (beta 1000, no replacement)", "hws", {"beta": 1000.0, "hws_replacement": False}, "<= 1.03"),
    # every weights part at its defaults; Ren et al. count about 3x for Learning to Reweight's look-ahead
    *((name, name, {}, "~3 (Ren et al.)" if name == "l2rw" else "~1") for name in WEIGHTS),
)
# The paper setting: the GI-LS paper's networks and T range at its image size.
PAPER_CASES = tuple(case for case in CASES if case[0] in ("gils input T=1", "gils input T=5", "gils input T=15"))
PAPER_BACKBONES = ("resnet18", "resnet34", "resnet50")
MT_DEFECT_TRAIN = sum(train for train, _ in MT_DEFECT.values())  # 208 training images (Table 1)
SETTINGS = ("digits", "resnet18", "paper")


@dataclass(frozen=True)
class Row:
    setting: str
    case: str
    step_ms: float
    ratio: float  # step time over ERM's at the same precision
    expected: str
    precision: str = "fp32"
    images_per_second: float = 0.0  # training images through one step per second
    vs_first_precision: float | None = None  # step time over the same case's at the first precision measured
    memory_mib: float | None = None  # on a GPU: parameters + the peak an epoch allocates (less resident data)


def make_setting(setting: str, device: torch.device, steps: int, batch_size: int, image_size: int = 224,
                 backbones: tuple[str, ...] = PAPER_BACKBONES) -> list[tuple[str, Dataset]]:
    """(backbone, data) pairs. digits: the real 8x8 digits and the small CNN; resnet18: random 3x64x64
    tensors, 10 classes; paper: `backbones` (ResNet18/34/50) on random uint8 images (resident as a loaded data set's
    are, normalised per batch) as many as MT-Defect's training split, at `image_size`, 5 classes.
    The training split is cut to `steps` whole batches (at most) so every sampler runs the same examples."""
    generator = torch.Generator().manual_seed(0)
    if setting == "digits":
        data, backbones = load_dataset(DataConfig(), device), ("small_cnn",)
    elif setting == "resnet18":
        n = steps * batch_size
        split = Split(torch.randn(n, 3, 64, 64, generator=generator), torch.randint(0, 10, (n,), generator=generator))
        data, backbones = Dataset("random 64x64", [str(i) for i in range(10)], split, split, split), ("resnet18",)
    else:
        pixels = torch.randint(0, 256, (MT_DEFECT_TRAIN, 3, image_size, image_size), dtype=torch.uint8,
                               generator=generator)
        mean, std = (torch.tensor(values).view(1, -1, 1, 1) for values in (IMAGENET_MEAN, IMAGENET_STD))
        split = Split(pixels, torch.arange(MT_DEFECT_TRAIN) % len(MT_DEFECT), mean, std)
        data = Dataset(f"MT-Defect-sized uint8 {image_size}px", list(MT_DEFECT), split, split, split,
                       IMAGENET_MEAN, IMAGENET_STD)
    data = data.to(device)
    whole = min(len(data.train) // batch_size, steps) * batch_size
    data.train = data.train.subset(slice(0, whole))
    return [(backbone, data) for backbone in backbones]


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


def _memory_mib(run: Run, split: Split) -> float:
    """One epoch's peak allocation on the GPU above what was allocated before it, plus the parameters:
    what a trial needs besides the resident images (activations, gradients, optimiser state)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run_epoch(run, split)
    parameters = sum(p.numel() * p.element_size() for p in run.model.parameters())
    return (torch.cuda.max_memory_allocated() - before + parameters) / 2**20


def benchmark(setting: str, device_name: str = "auto", rounds: int = 5, steps: int = 10, batch_size: int = 32,
              report: Callable[[str], None] = lambda message: None, precisions: tuple[str, ...] = ("auto",),
              image_size: int = 224, backbones: tuple[str, ...] = PAPER_BACKBONES,
              methods: tuple[str, ...] = ()) -> list[Row]:
    """Step time of every case of `setting` (or of the cases of `methods`) at each precision, as ratios to
    ERM on the same model and data (and, for digits and resnet18, of a plain DataLoader loop)."""
    device = resolve_device(device_name)
    chosen = tuple(case for case in (PAPER_CASES if setting == "paper" else CASES) if not methods or case[1] in methods)
    cases: tuple[Case, ...] = (("erm", "erm", {}, "1"),) + chosen
    rows = []
    for backbone, data in make_setting(setting, device, steps, batch_size, image_size, backbones):
        label = f"{backbone}, {data.name} {tuple(data.train.images.shape[1:])}, batch {batch_size}"
        rows += _measure(label, backbone, data, cases, setting != "paper", device_name, rounds, batch_size,
                         precisions, report)
    return rows


def _measure(label: str, backbone: str, data: Dataset, cases: tuple, with_dataloader: bool, device_name: str,
             rounds: int, batch_size: int, precisions: tuple[str, ...], report: Callable[[str], None]) -> list[Row]:
    runs = {(name, precision): prepare(TrainConfig(backbone=backbone, method=method, device=device_name,
                                                   precision=precision, params={"batch_size": batch_size, **params}),
                                       data)
            for precision in precisions for name, method, params, _ in cases}
    loop = ("plain DataLoader loop (ERM)", precisions[0])
    timings: dict[tuple[str, str], list[float]] = {key: [] for key in [*runs, *([loop] if with_dataloader else [])]}
    memory = {key: _memory_mib(run, run.train) for key, run in runs.items()} if _on_gpu(runs) else {}
    # A step's time is an epoch's time per training example times the batch size: l2rw trains on fewer
    # examples (its clean set leaves the training split), every other case on all of them.
    examples = {key: len(run.train) for key, run in runs.items()} | {loop: len(data.train)}
    for round_ in range(rounds + 1):  # round 0 warms up and is not counted
        for (name, precision), run in runs.items():
            report(f"{label}: round {round_}/{rounds}, {name} ({precision})")
            seconds = _epoch_seconds(run, run.train)
            if round_:
                timings[name, precision].append(seconds)
        if with_dataloader:
            seconds = dataloader_epoch_seconds(runs["erm", precisions[0]], data.train)
            if round_:
                timings[loop].append(seconds)
    step = {key: statistics.median(times) * batch_size / examples[key] for key, times in timings.items()}
    rows = []
    for precision in precisions:
        erm_step = step["erm", precision]
        ascent_ratio = ascent_step_seconds(runs["erm", precision], data.train, rounds * 3) / erm_step
        resolved = runs["erm", precision].precision
        for name, _, _, expected in cases:
            if not isinstance(expected, str):
                expected = f"ideal {2 + expected * ascent_ratio:.2f}"
            seconds = step[name, precision]
            first = seconds / step[name, precisions[0]] if len(precisions) > 1 else None
            rows.append(Row(label, name, 1000 * seconds, seconds / erm_step, expected, resolved,
                            batch_size / seconds, first, memory.get((name, precision))))
    if with_dataloader:
        seconds = step[loop]
        rows.append(Row(label, loop[0], 1000 * seconds, seconds / step["erm", precisions[0]],
                        "> 1: resident tensors win", rows[0].precision, batch_size / seconds))
    return rows


def _on_gpu(runs: dict[Any, Run]) -> bool:
    return next(iter(runs.values())).device.type == "cuda"


def machine() -> str:
    """One line naming where the figures were measured."""
    if torch.cuda.is_available():
        where = torch.cuda.get_device_name()
    else:
        where = f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    return f"{where}; torch {torch.__version__}"
