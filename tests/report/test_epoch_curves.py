"""The hardness paper's Figure 1 from evaluation runs' per-epoch test metrics, built from records made here.

The runs hold the store's typed epochs (EvaluationRecord.epochs: EpochRecord, its val and test SplitMetrics);
the picture reads only the fields built here.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from pipeline.report.plots import epoch_curves_picture
from pipeline.store.records import EpochRecord
from pipeline.training.result import SplitMetrics, ValTest


@dataclass(frozen=True)
class Run:
    variant: str
    seed: int
    config: dict[str, Any]
    epochs: list[EpochRecord] = field(default_factory=list)


def run(variant: str, seed: int, overall: list[float], rare: list[float]) -> Run:
    """A run of `variant` whose test accuracy at epoch k is overall[k - 1], its digit 3's rare[k - 1]."""
    val = SplitMetrics(None, None, None, {}, 0)
    epochs = [EpochRecord(k, 0.5, None, ValTest(val, SplitMetrics(a, None, None, {"3": r, "1": 0.99}, 100)))
              for k, (a, r) in enumerate(zip(overall, rare), start=1)]
    return Run(variant, seed, {"method": "erm" if variant == "erm" else "hws"}, epochs)


def test_figure_1_draws_each_variants_mean_over_seeds_overall_and_on_the_rare_digit():
    runs = [run("erm", 0, [0.90, 0.92, 0.93], [0.10, 0.20, 0.30]),
            run("erm", 1, [0.92, 0.94, 0.95], [0.30, 0.40, 0.50]),
            run("beta=10", 0, [0.91, 0.95, 0.97], [0.40, 0.60, 0.70]),
            run("beta=10", 1, [0.93, 0.95, 0.97], [0.60, 0.60, 0.70]),
            run("tuned", 0, [0.90, 0.96, 0.98], [0.50, 0.65, 0.80]),
            Run("beta=100", 0, {"method": "hws"})]  # stored before epochs were: nothing to draw
    picture = epoch_curves_picture("hws-mnist-wrn16-1", runs, "3", "hws-mnist-wrn16-1 (hws, wrn16_1)")
    assert picture is not None and picture.kind == "epoch-curves"
    assert picture.data["variants"] == ["erm", "beta=10", "tuned"]
    assert picture.data["seeds"] == {"erm": 2, "beta=10": 2, "tuned": 1}
    overall, rare = picture.data["test_accuracy"], picture.data["rare_class_accuracy"]
    assert overall["erm"]["epochs"] == [1, 2, 3]
    assert [round(m, 6) for m in overall["erm"]["mean"]] == [91.0, 93.0, 94.0]
    assert [round(m, 6) for m in rare["beta=10"]["mean"]] == [50.0, 60.0, 70.0]
    assert [round(m, 6) for m in rare["tuned"]["mean"]] == [50.0, 65.0, 80.0]
    panels = picture.figure.axes
    assert [axes.get_title() for axes in panels] == ["test accuracy", "test accuracy of class 3 (rare in training)"]
    assert [line.get_label() for line in panels[1].get_lines()] == ["erm (2 seeds)", "beta=10 (2 seeds)",
                                                                    "tuned hws (1 seeds)"]
    assert Image.open(io.BytesIO(picture.png)).size[0] > 0
    from conftest import texts_off_canvas

    assert texts_off_canvas(picture) == []


def test_without_a_rare_class_or_any_epochs_there_is_less_or_nothing_to_draw():
    runs = [run("erm", 0, [0.9, 0.95], [0.2, 0.3])]
    picture = epoch_curves_picture("s", runs, None, "s")
    assert picture is not None and "rare_class_accuracy" not in picture.data and len(picture.figure.axes) == 1
    assert "rare_class_accuracy" not in epoch_curves_picture("s", runs, "7", "s").data  # no class 7 in the runs
    assert epoch_curves_picture("s", [Run("erm", 0, {})], "3", "s") is None
