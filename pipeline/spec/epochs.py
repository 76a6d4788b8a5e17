"""What a trial's per-epoch results are good for in a study: the exact results of shorter runs a run passes
through (epoch prefixes, told to Ax as observations of their own) and the rule that stops a trial that is
behind the others at the same epoch (early stopping). Torch-free; the study loop and the benchmarks use it.

A run to E epochs passes exactly through the state a run to E' < E ends in, because nothing in a run depends
on its total epoch count: the learning-rate schedule (x lr_decay every lr_step epochs) and every method part
(the registries' `uses_total_epochs` says so per part; tests/training/test_epoch_metrics.py proves it per part).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pipeline.params import Range

# How a trial may be stopped early (budget.early_stopping): never, below the median of the trials before it at the
# same epoch, or below budget.early_stopping_percentile of them.
EARLY_STOPPING = {
    "off": "every trial trains to its end",
    "median": "a trial whose best objective so far is below the median of earlier trials' at the same epoch stops",
    "percentile": "a trial below budget.early_stopping_percentile of earlier trials at the same epoch stops",
}
# Earlier trials that must have reached an epoch before a trial may be stopped there: with fewer, a median is noise.
MIN_CURVES = 3


def objective_curve(epochs: Sequence[Mapping[str, float]], metric: str) -> tuple[float, ...]:
    """`metric` at each epoch of a run, given each epoch's metrics by name (EpochMetrics.metrics, EpochRecord.metrics),
    up to the first epoch that lacks it (a run stored before 0.5.0 has none)."""
    curve = []
    for epoch in epochs:
        value = epoch.get(metric)
        if value is None:
            break
        curve.append(float(value))
    return tuple(curve)


@dataclass(frozen=True)
class StopRule:
    """Early stopping, decided where the trial trains (also on a Dask worker: plain data, picklable): after epoch
    e (from `min_epochs` on), a trial whose best value so far is below `percentile` of the best values so far of
    the earlier trials that reached epoch e stops there, when at least MIN_CURVES of them did."""

    percentile: float  # 50: the median stopping rule
    min_epochs: int
    curves: tuple[tuple[float, ...], ...]  # the objective at each epoch of every earlier trained trial

    def threshold(self, epoch: int) -> float | None:
        """The value a trial must reach by `epoch` to go on; None when too few earlier trials reached it."""
        import numpy as np

        reached = [max(curve[:epoch]) for curve in self.curves if len(curve) >= epoch]
        if epoch < self.min_epochs or len(reached) < MIN_CURVES:
            return None
        return float(np.percentile(reached, self.percentile))

    def should_stop(self, values: Sequence[float]) -> bool:
        """Whether a trial with these objective values (one per epoch so far) stops now."""
        threshold = self.threshold(len(values))
        return threshold is not None and max(values) < threshold


def stop_percentile(rule: str, percentile: float) -> float | None:
    """The percentile a study's early-stopping setting stops below; None when it is off."""
    return {"off": None, "median": 50.0, "percentile": percentile}[rule]


def prefix_epochs(search: Mapping[str, Any], trained: int, ended: bool) -> range:
    """The epoch counts a trial that trained `trained` epochs holds exact results for, besides its own: every
    count in the searched range of `epochs` below it, and, when it stopped early (not `ended`), its last one too."""
    space = search.get("epochs")
    if not isinstance(space, Range):
        return range(0)
    return range(int(space.low), min(trained + (0 if ended else 1), int(space.high) + 1))
