"""What a training run produced, typed: one record from the trainer through a trial's runner (a Dask worker
included) to the store, the study loop and Ax. Free of torch, so the store and the reports read it without it.

`metrics` are the run's measurements on its validation and test splits, and nothing else: how many images they
rest on (`examples`), the batches' distinct examples and the training time are facts about the run, kept apart.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pipeline.config import RunSettings

if TYPE_CHECKING:
    import torch

# What the store's `metrics` column holds beside the metrics, as every version has stored it: facts about the run.
RUN_FACTS = ("val_examples", "test_examples", "train_seconds", "distinct_per_batch")


def metrics_column(metrics: dict[str, float], examples: dict[str, int] | None, train_seconds: float,
                   distinct_per_batch: float | None) -> dict[str, float]:
    """The store's `metrics` column of a run: its metrics, then the run's facts (RUN_FACTS) that column has always
    held beside them; the store's records part them again (store.records.StoredMetrics)."""
    facts: dict[str, float] = {f"{split}_examples": n for split, n in (examples or {}).items()}
    facts["train_seconds"] = train_seconds
    if distinct_per_batch is not None:
        facts["distinct_per_batch"] = distinct_per_batch
    return {**metrics, **facts}


def never_right(per_class: Sequence[Mapping[str, float]]) -> list[str]:
    """The classes that every one of several runs (each its test accuracy per class) got no test image right of, in
    name order: what a method never learned on this data, however its mean looks."""
    classes = sorted({name for run in per_class for name in run})
    return [name for name in classes if per_class and all(run.get(name, 0.0) == 0.0 for run in per_class)]


@dataclass(frozen=True)
class SplitMetrics:
    """Top-1 accuracy of one split, and per class (classes absent from the split are left out).
    An empty split (no validation split: val_fraction = 0) has no accuracy: None, never a made-up 0."""

    accuracy: float | None
    balanced_accuracy: float | None
    worst_class_accuracy: float | None
    per_class_accuracy: dict[str, float]
    examples: int

    def scalars(self) -> dict[str, float]:
        """The split's metrics as numbers (accuracy, balanced_accuracy, worst_class_accuracy), those it has."""
        return {key: value for key, value in (("accuracy", self.accuracy), ("balanced_accuracy",
                self.balanced_accuracy), ("worst_class_accuracy", self.worst_class_accuracy)) if value is not None}


@dataclass(frozen=True)
class ValTest:
    """A run's or an epoch's validation and test metrics together: the one place the pair is flattened into the
    names study files use (val_accuracy, test_worst_class_accuracy, ...) and laid out as the store keeps it."""

    val: SplitMetrics
    test: SplitMetrics

    def metrics(self) -> dict[str, float]:
        """The metrics by their names in study files, those the splits have: val_accuracy, test_accuracy, ..."""
        return {f"{split}_{key}": value for split, metrics in self.items() for key, value in metrics.scalars().items()}

    def metrics_and_examples(self) -> dict[str, float]:
        """Each split's metrics, then its image count (val_examples), split by split: an epoch prefix's stored
        `metrics` column, as every version since 0.5.0 has written it."""
        return {f"{split}_{key}": float(value) for split, metrics in self.items()
                for key, value in {**metrics.scalars(), "examples": metrics.examples}.items()}

    def per_class(self) -> dict[str, dict[str, float]]:
        """Each split's accuracy per class: {"val": {class: accuracy}, "test": {...}}."""
        return {split: metrics.per_class_accuracy for split, metrics in self.items()}

    def examples(self) -> dict[str, int]:
        """How many images each split's metrics rest on: {"val": n, "test": n}."""
        return {split: metrics.examples for split, metrics in self.items()}

    def items(self) -> tuple[tuple[str, SplitMetrics], tuple[str, SplitMetrics]]:
        """(name, metrics) of each split, validation first."""
        return ("val", self.val), ("test", self.test)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """As the store keeps an epoch's: {"val": SplitMetrics as a dict, "test": ...}."""
        return {"val": asdict(self.val), "test": asdict(self.test)}

    @classmethod
    def read(cls, val: Mapping[str, Any] | None, test: Mapping[str, Any] | None) -> ValTest | None:
        """An epoch's pair from its stored "val" and "test" (`to_dict`); None when stored before 0.5.0 (neither)."""
        if val is None or test is None:
            return None
        return cls(SplitMetrics(**val), SplitMetrics(**test))


class _Evaluated:
    """What holds a validation and a test split's metrics (an epoch, a run): them as one pair, and by name."""

    val: SplitMetrics
    test: SplitMetrics

    @property
    def splits(self) -> ValTest:
        """The validation and test metrics as one pair."""
        return ValTest(self.val, self.test)

    @property
    def metrics(self) -> dict[str, float]:
        """The validation and test metrics by their names in study files: val_accuracy, test_worst_class_accuracy..."""
        return self.splits.metrics()


@dataclass(frozen=True)
class EpochMetrics(_Evaluated):
    """What one epoch ended with: its mean training loss, and the model's validation and test metrics then.
    The run to E epochs passes through the state a run to E' < E ends in, so epoch E' here is that run's result."""

    epoch: int
    train_loss: float
    val: SplitMetrics
    test: SplitMetrics

    def to_dict(self) -> dict[str, Any]:
        """As the store keeps it (rt_evaluations.epochs): {"epoch", "train_loss", "val": {...}, "test": {...}}."""
        return {"epoch": self.epoch, "train_loss": self.train_loss, **self.splits.to_dict()}


@dataclass(frozen=True)
class SeedRun:
    """One seed's part of a trial trained on several (budget.seeds_per_trial): its metrics and training time."""

    seed: int
    train_seconds: float
    metrics: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """As the store keeps it (trials.seed_runs): {"seed", "train_seconds", metric: value, ...}."""
        return {"seed": self.seed, "train_seconds": self.train_seconds, **self.metrics}


@dataclass(frozen=True)
class RunResult(_Evaluated):
    """Everything a run produced, with the exact settings that produced it."""

    val: SplitMetrics
    test: SplitMetrics
    epochs: tuple[EpochMetrics, ...]  # every epoch's training loss, validation and test metrics, in order
    train_seconds: float
    seed: int
    settings: RunSettings
    # Mean number of different examples in a training batch: below the batch size when a sampler drew
    # an example twice (hardness-weighted sampling at a large beta).
    distinct_per_batch: float | None = None
    stopped_at: int | None = None  # the epoch an early-stopping rule ended the run at, before its planned end
    seed_runs: tuple[SeedRun, ...] = ()  # trained on several seeds: each one's part, and this their mean
    # the trained network, where it was trained; never sent from a worker or stored (`without_model`)
    model: torch.nn.Module | None = field(default=None, repr=False, compare=False)

    @property
    def per_class(self) -> dict[str, dict[str, float]]:
        """Each split's accuracy per class: {"val": {class: accuracy}, "test": {...}}."""
        return self.splits.per_class()

    @property
    def examples(self) -> dict[str, int]:
        """How many images each split's metrics rest on: {"val": n, "test": n}."""
        return self.splits.examples()

    def stored_metrics(self) -> dict[str, float]:
        """The store's `metrics` column of this run (`metrics_column`)."""
        return metrics_column(self.metrics, self.examples, self.train_seconds, self.distinct_per_batch)

    def without_model(self) -> RunResult:
        """This result without the network: what crosses a process boundary and what is stored."""
        return replace(self, model=None)

    def to_dict(self) -> dict[str, Any]:
        """`train --format json`: flat metric keys first (val_accuracy, test_accuracy, ...), then the details."""
        flat = {f"{name}_{key}": value for name, metrics in (("val", self.val), ("test", self.test))
                for key, value in asdict(metrics).items() if key != "per_class_accuracy"}
        return {**flat,
                "val_per_class_accuracy": self.val.per_class_accuracy,
                "test_per_class_accuracy": self.test.per_class_accuracy,
                "epoch_train_loss": [epoch.train_loss for epoch in self.epochs],
                "epoch_val_accuracy": [epoch.val.accuracy for epoch in self.epochs],
                "epochs": [epoch.to_dict() for epoch in self.epochs],
                "train_seconds": self.train_seconds, "distinct_per_batch": self.distinct_per_batch,
                "seed": self.seed, "settings": self.settings.to_dict(), "stopped_at": self.stopped_at}


def mean_split(splits: list[SplitMetrics]) -> SplitMetrics:
    """Several seeds' metrics of one split as one: each metric averaged, per class class by class (a class some
    seed's split lacks over the seeds that have it); the examples are the first seed's."""
    def mean(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return sum(present) / len(present) if len(present) == len(values) else None

    classes = dict.fromkeys(name for split in splits for name in split.per_class_accuracy)
    per_class = {name: sum(v) / len(v) for name in classes
                 if (v := [s.per_class_accuracy[name] for s in splits if name in s.per_class_accuracy])}
    return SplitMetrics(mean([s.accuracy for s in splits]), mean([s.balanced_accuracy for s in splits]),
                        mean([s.worst_class_accuracy for s in splits]), per_class, splits[0].examples)


def over_seeds(runs: list[RunResult]) -> RunResult:
    """Several seeds' results as one trial's: every validation and test metric (per-class ones class by class)
    averaged, the training time summed, the first seed's details (curves, settings) kept, and each seed's
    metrics in `seed_runs`, from which the study tells Ax the objective's standard error."""
    if len(runs) == 1:
        return runs[0]
    return replace(runs[0], val=mean_split([r.val for r in runs]), test=mean_split([r.test for r in runs]),
                   train_seconds=sum(r.train_seconds for r in runs), model=None,
                   seed_runs=tuple(SeedRun(r.seed, r.train_seconds, r.metrics) for r in runs))
