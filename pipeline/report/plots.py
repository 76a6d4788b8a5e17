"""Pictures of stored studies: the optimisation trace, parameter maps, learning curves, per-class accuracy.

The GI-LS paper's Figures 3-7 for any study. Each kind of picture is one function in PICTURES, from
a study's stored records to Pictures (a matplotlib Figure plus the data it plots, so tests can read
what is drawn); a new kind is one more function there. Figures are drawn off screen (Agg, no
pyplot state) and only by the commands that draw: importing this module imports matplotlib.
"""
from __future__ import annotations

import functools
import io
import itertools
import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from pipeline.errors import UserError
from pipeline.compare.evaluate import TUNED
from pipeline.output_file import make_folder, write_output
from pipeline.compare.evaluate import COMPARE_METRICS
from pipeline.compare.verdict import accuracy_bounds
from pipeline.report.study_tables import _select, compare_table, dataset_label, present_metrics
from pipeline.store import ImportanceRecord, Store, StudyRecord, TrialRecord, TrialStatus, best_trial
from pipeline.store.records import EvaluationRecord, feasible, pareto_set

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.ticker import MaxNLocator

    from pipeline.search.surrogate import Axis


@dataclass
class Picture:
    """One figure of one study (or of several studies of one data set) and the data it plots."""

    study: str
    kind: str  # trace, map-<param>-<param>, curves, per-class, compare, pareto-front
    figure: Figure
    data: dict[str, Any] = field(default_factory=dict)
    caption: str = ""  # one sentence saying what it shows, for the page (the file name where none)

    @property
    def file_name(self) -> str:
        return f"{safe_file_stem(self.study)}-{self.kind}.png"

    @functools.cached_property
    def png(self) -> bytes:
        fit_text(self.figure)
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=SAVE_DPI, metadata={"Software": None})
        return buffer.getvalue()


SAVE_DPI = 80  # the pictures' resolution, in the files and on the page


def fit_text(figure: Figure) -> None:
    """Wrap the figure's title and each panel's title onto as many lines as they need to fit, the figure's within
    its width and a panel's within its panel's, and each legend entry within 40% of the figure's width.
    Constrained layout makes room for a title's height and an outside legend's width but never wraps either, so a
    long title (a study's long name, the note of a study without a model) runs off both sides of the picture and a
    long legend entry squeezes the plot to nothing. Widths are measured as drawn, so any font and size fits."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(figure)
    # legends first: a wide one squeezes the panels, and their titles would be wrapped to the squeezed width
    for step in ["legends"] + ["titles"] * 3:  # wrapping makes titles taller, so panels narrower or wider
        figure.draw_without_rendering()
        renderer = canvas.get_renderer()
        legends = [*figure.legends, *(legend for axes in figure.axes if (legend := axes.get_legend()) is not None)]
        texts = [(text, 0.4 * figure.bbox.width) for legend in legends
                 for text in (*legend.get_texts(), legend.get_title())]
        if step == "titles":  # the suptitle (one of the figure's texts), and each panel's centre, left and right titles
            texts = [(text, figure.bbox.width) for text in figure.texts
                     if figure.get_suptitle() and text.get_text() == figure.get_suptitle()]
            texts += [(title, axes.bbox.width) for axes in figure.axes for title in _titles(axes)]
        changed = False
        for text, room in texts:
            content = text.get_text()
            width = text.get_window_extent(renderer).width if content.strip() else 0.0
            if width <= 0.98 * room:
                continue
            longest = max(len(line) for line in content.splitlines())
            columns = max(10, int(longest * 0.95 * room / width))
            text.set_text("\n".join(textwrap.fill(line, columns) for line in content.splitlines()))
            changed = True
        if step == "titles" and not changed:
            return


def _titles(axes: Any) -> list[Any]:
    """A panel's centre, left and right titles: the texts it holds of its own, outside its text() and annotate()
    notes (tick labels belong to its axes)."""
    from matplotlib.text import Text

    return [child for child in axes.get_children() if isinstance(child, Text) and child not in axes.texts]


@dataclass
class StudyData:
    """What a picture may draw from: the study, its trials in order, its best trial and its GP."""

    study: StudyRecord
    trials: list[TrialRecord]
    model: Any = None  # surrogate.StudyModel, or None with too few trials or no Ax record
    comparison: list[dict[str, Any]] = field(default_factory=list)  # report.compare_table's records, if evaluated
    importance: ImportanceRecord | None = None  # as stored when a run of the study ended
    runs: list[EvaluationRecord] = field(default_factory=list)  # its evaluation runs (`robust-tune evaluate`)

    @property
    def objective(self) -> str:
        return self.study.study.objective

    @property
    def best(self) -> TrialRecord | None:
        return best_trial(self.study, self.trials)


def safe_file_stem(name: str) -> str:
    """`name` with every run of characters other than letters, digits, '_', '-' and '.' made one '_',
    and none at either end (no hidden file, no option look-alike)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-") or "study"


def _percent_label(objective: str) -> str:
    return f"{objective.replace('_', ' ')} (%)"


def _words(metric: str) -> str:
    """A metric's name in a sentence: "validation balanced accuracy"."""
    return metric.replace("val_", "validation ").replace("_", " ")


def _who(s: StudyData) -> str:
    """A study as titles name it: its name, method and network."""
    return f"{s.study.name} ({s.study.study.method}, {s.study.study.backbone})"


MIN_SPAN = 2.0  # percentage points: a y axis never zooms in further, so equal results look equal


def readable_ylim(axes: Any, values: list[float], low: float | None = None) -> None:
    """Keep the y axis at least MIN_SPAN points tall around `values` (and not below `low`): matplotlib otherwise
    spreads results a hundredth of a point apart over the whole height, as if they differed."""
    if not values:
        return
    bottom, top = min(values), max(values)
    if top - bottom < MIN_SPAN:
        middle = (top + bottom) / 2
        bottom, top = middle - MIN_SPAN / 2, middle + MIN_SPAN / 2
        if low is not None and bottom < low:
            bottom, top = low, low + MIN_SPAN
        axes.set_ylim(bottom - 0.1 * MIN_SPAN, top + 0.1 * MIN_SPAN)


def trace_figure(studies: list[StudyData], title: str) -> tuple[Figure, dict[str, Any]]:
    """The objective of every trial in order, one colour, marker and line style per study, failed trials as red
    crosses at the bottom, the best so far as a step line; the Sobol trials shaded when the studies share their
    number. Several studies' dots are set a little apart sideways and their lines drawn thinner one after another,
    so none hides another; the legend, one entry per study, sits outside the plot."""
    figure = Figure(figsize=(8, 4), layout="constrained")
    axes = figure.add_subplot()
    data: dict[str, Any] = {}
    shared = len(studies) > 1
    plotted: list[float] = []
    for i, s in enumerate(studies):
        color, marker, style = f"C{i % 10}", "osD^v<>P*X"[i % 10], ("-", "--", "-.", ":")[i % 4]
        done = [(t.trial_index, 100 * t.metrics[s.objective]) for t in s.trials
                if t.ran and t.status != TrialStatus.FAILED and t.metrics and s.objective in t.metrics]
        failed = [t.trial_index for t in s.trials if t.status == TrialStatus.FAILED]
        # the best so far when each trained trial ended: its epoch prefixes (search.epoch_prefixes) count from then
        prefixes = {i: [100 * t.metrics[s.objective] for t in s.trials if t.prefix_of == i and t.metrics
                        and s.objective in t.metrics] for i, _ in done}
        best_so_far = list(itertools.accumulate((max([v, *prefixes[i]]) for i, v in done), max))
        offset = 0.25 * (i / (len(studies) - 1) - 0.5) if shared else 0.0
        axes.plot([x + offset for x, _ in done], [v for _, v in done], marker, color=color,
                  alpha=0.6 if shared else 1.0, markersize=5 if shared else 6, linestyle="none",
                  label=None if shared else "trial", gid=f"objective:{s.study.name}")
        axes.step([x for x, _ in done], best_so_far, where="post", color=color, linestyle=style,
                  linewidth=line_width(i, len(studies)), label=None if shared else "best so far")
        if shared:  # one legend entry per study: its marker and line style
            axes.plot([], [], marker=marker, linestyle=style, color=color, label=_who(s))
        if failed:
            axes.plot(failed, [0.03] * len(failed), "x", color="red", markersize=8,
                      transform=axes.get_xaxis_transform(), label="failed trial" if i == 0 or not shared else None)
        plotted += [v for _, v in done]
        data[s.study.name] = {"trial_index": [x for x, _ in done], "objective": [v for _, v in done],
                              "failed": failed, "best_so_far": best_so_far}
    last = max((t.trial_index for s in studies for t in s.trials if t.prefix_of is None), default=0)
    bounds = set()  # per study: (Sobol trials, the index the GP's first trial has); prefixes have indices of their own
    for s in studies:
        own = sorted(t.trial_index for t in s.trials if t.prefix_of is None)
        count = s.study.study.budget.initial
        bounds.add((min(count, len(own)), own[count] if count < len(own) else (own[-1] + 1 if own else 0)))
    if len(bounds) == 1:
        count, sobol = bounds.pop()
        axes.axvspan(-0.5, sobol - 0.5, color="grey", alpha=0.12, label=f"Sobol (first {count} trials)")
        if sobol <= last:  # some trials came from the Gaussian process: where they start, named in the legend
            axes.axvline(sobol - 0.5, color="grey", linestyle=":", linewidth=1,
                         label=f"Gaussian process from trial {sobol}")
    readable_ylim(axes, plotted)
    axes.set(title=title, xlabel="trial (Ax's index, in the order run)",
             ylabel=_percent_label(studies[0].objective))
    axes.title.set_fontsize(10)
    cast("MaxNLocator", axes.xaxis.get_major_locator()).set_params(integer=True)  # a linear axis's AutoLocator
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                title="dots: trials; lines: best so far" if shared else None, title_fontsize=7)
    return figure, data


def line_width(i: int, count: int) -> float:
    """The best-so-far line of the i-th of `count` studies drawn on one trace: 1.5 points alone; with several, from 4
    points for the first down to 1 for the last, so each line shows under the ones drawn after it and none is a
    smear."""
    return 1.5 if count == 1 else 4.0 - 3.0 * i / (count - 1)


def trace_pictures(s: StudyData) -> list[Picture]:
    figure, data = trace_figure([s], f"{_who(s)}: {s.objective.replace('_', ' ')} of every trial")
    return [Picture(s.study.name, "trace", figure, data[s.study.name],
                    f"The {_words(s.objective)} of every trial of {s.study.name}, in the order they ran, and the "
                    "best so far as a line; the first trials are Sobol's spread over the space, the later ones "
                    "the Gaussian process's proposals.")]


def _trial_points(s: StudyData, x: str, y: str | None = None) -> list[tuple[Any, Any, float]]:
    """(x value, y value or objective %, objective %) of each completed trial."""
    return [(t.parameters[x], t.parameters[y] if y else 100 * t.metrics[s.objective], 100 * t.metrics[s.objective])
            for t in s.trials if t.status == TrialStatus.COMPLETED and t.metrics and s.objective in t.metrics]


def map_figure(s: StudyData, x: str, y: str) -> tuple[Figure, dict[str, Any]]:
    """The GP's mean and standard error over parameters x and y, the others at the best trial's values,
    with the trials as black points. A choice parameter is drawn as one curve per value; two choices
    as a grid of cells."""
    best_so_far = s.best
    assert best_so_far is not None, "map_pictures maps a study with a best trial"
    best = dict(best_so_far.parameters)
    model = s.model
    xa, ya = model.axis(x, include=best[x]), model.axis(y, include=best[y])
    if xa.choice and not ya.choice:  # the continuous one across
        xa, ya, x, y = ya, xa, y, x
    points = [{**best, x: vx, y: vy} for vy in ya.values for vx in xa.values]
    mean, se = model.predict(points)
    width = len(xa.values)
    mean = [[100 * m for m in mean[r * width:(r + 1) * width]] for r in range(len(ya.values))]
    se = [[100 * e for e in se[r * width:(r + 1) * width]] for r in range(len(ya.values))]
    figure = Figure(figsize=(10, 4), layout="constrained")
    panels = figure.subplots(1, 2)
    trials = _trial_points(s, x, y)
    fixed = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.items()
                      if k not in (x, y))
    figure.suptitle(f"{_who(s)}: Gaussian process of {s.objective.replace('_', ' ')} over {x} and {y}"
                    + (f"\n(at the best trial's {fixed})" if fixed else ""), fontsize=10)
    disagree = disagreements(s)
    label = s.objective.replace("_", " ")
    anywhere = " (others at any value)" if fixed else ""  # trials need not lie on the slice drawn
    if ya.choice and not xa.choice:  # one curve per value of the choice
        for panel, grid, what in ((panels[0], mean, f"mean of {label} (%)"), (panels[1], se, "standard error (%)")):
            for row, value in enumerate(ya.values):
                panel.plot(xa.values, grid[row], color=f"C{row}", label=f"{y}={value}")
            panel.set(xlabel=x + (" (log scale)" if xa.log else ""), ylabel=what, title=what)
            panel.set_xscale("log" if xa.log else "linear")
        for row, value in enumerate(ya.values):  # the model's 95% band
            panels[0].fill_between(xa.values, [m - 2 * e for m, e in zip(mean[row], se[row])],
                                   [m + 2 * e for m, e in zip(mean[row], se[row])], color=f"C{row}", alpha=0.12)
        for row, value in enumerate(ya.values):
            marker = "osD^v"[row % 5]
            at = [(px, obj) for px, py, obj in trials if py == value]
            panels[0].plot([p for p, _ in at], [o for _, o in at], marker, color="black", markerfacecolor=f"C{row}",
                           linestyle="none", label=f"trials, {y}={value}{anywhere}")
        for d in disagree:  # observed, and what the model predicts at the trial's own parameters
            panels[0].plot([d["parameters"][x]] * 2, [d["observed"], d["predicted"]], color="C3", linewidth=1)
        panels[0].legend(fontsize=7)
    else:
        def position(axis, value):  # choices sit at their index
            return axis.values.index(value) if axis.choice else value

        for panel, grid, what, cmap in ((panels[0], mean, f"mean of {label} (%)", "viridis"),
                                        (panels[1], se, "standard error (%)", "magma")):
            mesh = panel.pcolormesh([position(xa, v) for v in xa.values], [position(ya, v) for v in ya.values],
                                    grid, shading="nearest", cmap=cmap)
            figure.colorbar(mesh, ax=panel, label=what)
            panel.scatter([position(xa, px) for px, _, _ in trials], [position(ya, py) for _, py, _ in trials],
                          c="black", s=18, label=f"trials{anywhere}")
            for k, d in enumerate(disagree if panel is panels[0] else []):  # trial: measured vs the model's mean
                panel.annotate(f"trial {d['trial']}: {d['observed']:.0f} vs {d['predicted']:.0f}",
                               (position(xa, d["parameters"][x]), position(ya, d["parameters"][y])),
                               textcoords="offset points", xytext=(6, 10 if k % 2 == 0 else -16), fontsize=7,
                               color="red", bbox={"boxstyle": "round,pad=0.1", "fc": "white", "alpha": 0.8})
            for axis, set_scale, set_ticks in ((xa, panel.set_xscale, panel.set_xticks),
                                               (ya, panel.set_yscale, panel.set_yticks)):
                if axis.log:
                    set_scale("log")
                if axis.choice:
                    set_ticks(range(len(axis.values)), [str(v) for v in axis.values])
            panel.set(xlabel=x + (" (log scale)" if xa.log else ""), ylabel=y + (" (log scale)" if ya.log else ""),
                      title=what)
    _mark_disagreements(panels[0], disagree, x, None if ya.choice and not xa.choice else y, xa, ya)
    data = {"x": x, "y": y, "x_values": xa.values, "y_values": ya.values, "mean": mean, "se": se, "best": best,
            "disagree": disagree}
    return figure, data


DISAGREE_SE = 2.0  # a trial whose result lies further than this many standard errors from the model's mean ...
DISAGREE_POINTS = MIN_SPAN  # ... and further than this many points is marked on the maps


def disagreements(s: StudyData) -> list[dict[str, Any]]:
    """The completed trials the study's GP does not believe: its mean at the trial's own parameters lies outside
    the 95% band (DISAGREE_SE standard errors) and more than DISAGREE_POINTS points from what was measured (a
    lucky or collapsed run the model smooths over, or a region it misjudges)."""
    done = [t for t in s.trials if t.status == TrialStatus.COMPLETED and t.metrics and s.objective in t.metrics]
    if not done:
        return []
    means, ses = s.model.predict([dict(t.parameters) for t in done])
    found = []
    for t, mean, se in zip(done, means, ses):
        observed, predicted = 100 * present_metrics(t)[s.objective], 100 * mean
        if abs(observed - predicted) > max(DISAGREE_SE * 100 * se, DISAGREE_POINTS):
            found.append({"trial": t.trial_index, "observed": observed, "predicted": predicted, "se": 100 * se,
                          "parameters": dict(t.parameters)})
    return found


def _mark_disagreements(panel: Any, disagree: list[dict[str, Any]], x: str, y: str | None, xa: Axis, ya: Axis) -> None:
    """Red rings on the trials the model does not believe (`disagreements`), with a legend entry saying so."""
    if not disagree:
        return

    def position(axis: Axis, value: Any) -> Any:
        return axis.values.index(value) if axis.choice else value

    xs = [position(xa, d["parameters"][x]) for d in disagree]
    ys = [d["observed"] for d in disagree] if y is None else [position(ya, d["parameters"][y]) for d in disagree]
    panel.scatter(xs, ys, s=140, facecolors="none", edgecolors="red", linewidths=2,
                  label=f"trial the model disagrees with (> {DISAGREE_SE:g} s.e.): measured vs model", zorder=5)
    panel.legend(fontsize=7)


def scatter_figure(s: StudyData, x: str, y: str, note: str) -> Figure:
    """Trials over x and y coloured by their objective, for a study without a model."""
    figure = Figure(figsize=(5, 4), layout="constrained")
    axes = figure.add_subplot()
    trials = _trial_points(s, x, y)
    codes = {v: i for i, v in enumerate(sorted({str(p[k]) for p in trials for k in (0, 1)}))}

    def coordinate(value):
        return codes[str(value)] if isinstance(value, (bool, str)) else value

    dots = axes.scatter([coordinate(p[0]) for p in trials], [coordinate(p[1]) for p in trials],
                        c=[p[2] for p in trials], cmap="viridis", edgecolors="black")
    figure.colorbar(dots, ax=axes, label=_percent_label(s.objective))
    axes.set(xlabel=x, ylabel=y, title=f"{s.study.name}: trials over {x} and {y}\n{note}")
    axes.title.set_fontsize(9)
    return figure


def map_pictures(s: StudyData) -> list[Picture]:
    """Two panels (GP mean, standard error) per pair of searched parameters, or the trials alone and a note."""
    searched = list(s.study.study.search)
    if s.best is None:
        return []
    pictures = []
    for x, y in itertools.combinations(searched, 2):
        kind = f"map-{x}-{y}"
        if s.model is None:
            completed = sum(t.status == TrialStatus.COMPLETED for t in s.trials)
            note = (f"no Gaussian process: {completed} completed trial(s); "
                    "a model needs 3 and Ax's records of the study")
            pictures.append(Picture(s.study.name, kind, scatter_figure(s, x, y, note), {"note": note},
                                    f"The completed trials of {s.study.name} over {x} and {y}, coloured by their "
                                    f"{_words(s.objective)}: too few for a Gaussian process to map."))
        else:
            figure, data = map_figure(s, x, y)
            pictures.append(Picture(s.study.name, kind, figure, data,
                                    f"What the Gaussian process of {s.study.name} predicts for the "
                                    f"{_words(s.objective)} over {x} and {y} (left) and how unsure it is (right), "
                                    "the other parameters at the best trial's values; dots are the trials."))
    return pictures


def curves_pictures(s: StudyData) -> list[Picture]:
    """The best trial's training loss and validation accuracy per epoch."""
    best = s.best
    if best is None or not best.epochs:
        return []
    figure = Figure(figsize=(9, 3.5), layout="constrained")
    loss, accuracy = figure.subplots(1, 2)
    epochs = [e.epoch for e in best.epochs]
    losses, accuracies = [e.train_loss for e in best.epochs], [e.val_accuracy for e in best.epochs]
    loss.plot(epochs, losses, "o-")
    loss.set(xlabel="epoch", ylabel="training loss (cross-entropy, nats)", title="training loss")
    accuracy.plot(epochs, [math.nan if a is None else 100 * a for a in accuracies], "o-", color="C2")
    accuracy.set(xlabel="epoch", ylabel="validation accuracy (%)", title="validation accuracy")
    for axes in (loss, accuracy):
        axes.xaxis.get_major_locator().set_params(integer=True)
    figure.suptitle(f"{_who(s)}: best trial {best.trial_index}, training loss and validation accuracy per epoch",
                    fontsize=10)
    return [Picture(s.study.name, "curves", figure,
                    {"train_loss": losses, "val_accuracy": accuracies},
                    f"The training loss and validation accuracy of {s.study.name}'s best trial "
                    f"({best.trial_index}) after each epoch.")]


def per_class_pictures(s: StudyData) -> list[Picture]:
    """The best trial's test accuracy per class as horizontal bars, so class names of any length are read whole
    and never run together; the worst class's bar (or, at 0%, its marker) in red, the rare class named."""
    best = s.best
    if best is None or not best.per_class or not best.per_class.get("test"):
        return []
    classes = list(best.per_class["test"])
    values = [100 * best.per_class["test"][c] for c in classes]
    rare = s.study.study.data.imbalance_class
    worst = min(values)
    worst_names = [c for c, v in zip(classes, values) if v == worst]
    figure = Figure(figsize=(7, max(3.4, 0.3 * len(classes) + 1.6)), layout="constrained")
    axes = figure.add_subplot()
    rows = range(len(classes))
    bars = axes.barh(rows, values, color=["C3" if v == worst else "C0" for v in values])
    labels = [f"{c} (rare in training)" if rare is not None and c == str(rare) else c for c in classes]
    if rare is not None and str(rare) in classes:
        bars[classes.index(str(rare))].set_hatch("//")
    for y, value in zip(rows, values):  # each value written at its bar's end: a class at 0% has no bar to see
        axes.annotate(f"{value:.0f}", (value, y), textcoords="offset points", xytext=(9 if value < 1 else 3, 0),
                      va="center", fontsize=7, color="C3" if value == worst else "black")
    zero = [y for y, v in zip(rows, values) if v < 1]
    axes.plot([0] * len(zero), zero, ">", color="C3", markersize=7, clip_on=False,
              label="class at 0% (no bar)" if zero else None)
    mean = sum(values) / len(values)
    axes.axvline(mean, color="grey", linestyle="--", label=f"mean over classes ({mean:.1f})")
    axes.set_yticks(rows, labels, fontsize=8)
    axes.set(xlim=(0, 110), ylim=(len(classes) - 0.5, -0.5), ylabel="class", xlabel="test accuracy (%)")
    named = worst_names[0] if len(worst_names) == 1 else f"{len(worst_names)} classes"
    axes.set_title(f"{_who(s)}: test accuracy per class, best trial {best.trial_index}; worst in red: {named} at "
                   f"{worst:.0f}%", fontsize=9)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    caption = (f"The test accuracy of {s.study.name}'s best trial ({best.trial_index}) on each of its "
               f"{len(classes)} classes; the worst ({', '.join(worst_names)}, {worst:.0f}%) in red.")
    return [Picture(s.study.name, "per-class", figure, {"classes": classes, "test_accuracy": values,
                                                        "worst": worst_names}, caption)]


def _variant_label(record: dict[str, Any]) -> str:
    """A compared variant as a picture names it: the tuned configuration with its method ("tuned hws"), a baseline
    or varied value by its name, with its method when the name does not start with it."""
    if record["variant"] == TUNED:
        return f"{TUNED} {record['method']}"
    return record["variant"] if record["variant"].startswith(record["method"]) else \
        f"{record['variant']} ({record['method']})"


def compare_pictures(s: StudyData) -> list[Picture]:
    """The evaluated variants (`robust-tune evaluate`): mean and 95% interval over seeds of the test
    accuracy and of the smallest training class's accuracy, the numbers of `report --compare`; an interval is
    drawn inside [0, 100], where accuracies lie."""
    if not s.comparison:
        return []
    shown = [(key, label) for key, label in COMPARE_METRICS if key in ("test_accuracy", "smallest_class_accuracy")]
    variants = [f"{_variant_label(r)}\n({len(r['seeds'])} seeds)" for r in s.comparison]
    others = [_variant_label(r) for r in s.comparison if r["variant"] != TUNED]
    figure = Figure(figsize=(max(6, 1.3 * len(variants) + 3), 3.5), layout="constrained")
    data: dict[str, Any] = {"variants": [r["variant"] for r in s.comparison]}
    for panel, (key, label) in enumerate(shown):
        axes = figure.add_subplot(1, len(shown), panel + 1)
        means = [100 * r["metrics"][key]["mean"] for r in s.comparison]
        halves = [100 * (r["metrics"][key]["half_width"] or 0.0) for r in s.comparison]
        bounds = [accuracy_bounds(r["metrics"][key]["mean"], r["metrics"][key]["half_width"]) or
                  (r["metrics"][key]["mean"],) * 2 for r in s.comparison]
        lows, highs = [100 * b[0] for b in bounds], [100 * b[1] for b in bounds]
        axes.errorbar(range(len(variants)), means, yerr=[[m - lo for m, lo in zip(means, lows)],
                                                         [hi - m for m, hi in zip(means, highs)]],
                      fmt="o", capsize=4, color="C0")
        axes.set_xticks(range(len(variants)), variants, fontsize=8)
        axes.set_xlim(-0.6, len(variants) - 0.4)
        readable_ylim(axes, lows + highs, low=0.0)
        axes.set(ylabel=f"{label if label.startswith('test') else 'test ' + label} (%)",
                 title="test accuracy" if key == "test_accuracy" else f"test accuracy of the {label}")
        axes.title.set_fontsize(9)
        data[key] = list(zip(means, halves))
        data[f"{key}_interval"] = list(zip(lows, highs))
    against = f", against {', '.join(others)}" if others else " (no baseline evaluated)"
    figure.suptitle(f"{_who(s)}: best configuration re-trained over seeds{against}\n"
                    "mean and 95% interval over seeds, within 0-100%", fontsize=10)
    seeds = sorted({len(r["seeds"]) for r in s.comparison})
    caption = (f"{s.study.name}'s best configuration re-trained on {'/'.join(map(str, seeds))} seeds"
               + (f" beside {', '.join(others)}" if others else "")
               + ": the mean test accuracy and the smallest training class's, each with its 95% interval over seeds.")
    return [Picture(s.study.name, "compare", figure, data, caption)]


def epoch_curves_picture(study: str, runs: Sequence[EvaluationRecord], rare_class: str | None,
                         who: str) -> Picture | None:
    """The hardness paper's Figure 1 for any evaluation whose runs stored per-epoch test metrics (`evaluate --vary
    beta=0.1,1,10,100 --against erm`): test accuracy per epoch of each variant, overall and on `rare_class`, the
    mean over seeds drawn with the seeds' range shaded. None when no run has epochs."""
    variants: dict[str, list[EvaluationRecord]] = {}
    for run in runs:
        if run.epochs:
            variants.setdefault(run.variant, []).append(run)
    if not variants:
        return None
    panels = [("test_accuracy", "test accuracy", lambda test: test.accuracy)]
    if rare_class is not None and any(epoch.splits is not None and rare_class in epoch.splits.test.per_class_accuracy
                                      for group in variants.values() for run in group for epoch in run.epochs):
        panels.append(("rare_class_accuracy", f"test accuracy of class {rare_class} (rare in training)",
                       lambda test: test.per_class_accuracy.get(rare_class)))
    figure = Figure(figsize=(5 * len(panels) + 2, 4), layout="constrained")
    data: dict[str, Any] = {"variants": list(variants), "seeds": {v: len(g) for v, g in variants.items()}}
    for number, (key, label, value_of) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), number + 1)
        drawn: dict[str, dict[str, list[int] | list[float]]] = {}
        for colour, (variant, group) in enumerate(variants.items()):
            per_epoch: dict[int, list[float]] = {}
            for run in group:
                for epoch in run.epochs:
                    value = None if epoch.splits is None else value_of(epoch.splits.test)
                    if value is not None:
                        per_epoch.setdefault(epoch.epoch, []).append(100 * value)
            epochs = sorted(per_epoch)
            means = [float(np.mean(per_epoch[e])) for e in epochs]
            name = f"{TUNED} {group[0].config.get('method', '')}".strip() if variant == TUNED else variant
            axes.plot(epochs, means, "-o", markersize=3, color=f"C{colour}", label=f"{name} ({len(group)} seeds)")
            if len(group) > 1:
                axes.fill_between(epochs, [min(per_epoch[e]) for e in epochs], [max(per_epoch[e]) for e in epochs],
                                  color=f"C{colour}", alpha=0.15, linewidth=0)
            drawn[variant] = {"epochs": epochs, "mean": means}
        readable_ylim(axes, [m for d in drawn.values() for m in d["mean"]], low=0.0)
        epochs_drawn = sorted({e for d in drawn.values() for e in d["epochs"]})
        if len(epochs_drawn) <= 10:
            axes.set_xticks(epochs_drawn)  # a tick per epoch: never fractions of one
        else:
            cast("MaxNLocator", axes.xaxis.get_major_locator()).set_params(integer=True)  # a linear axis's AutoLocator
        axes.set(xlabel="epoch", ylabel=f"{label} (%)", title=label)
        axes.title.set_fontsize(9)
        data[key] = drawn
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.suptitle(f"{who}: test accuracy per epoch of each evaluated variant\nmean over seeds, their range shaded",
                    fontsize=10)
    rare = f", overall and on class {rare_class}" if len(panels) > 1 else ""
    return Picture(study, "epoch-curves", figure, data,
                   f"The test accuracy of each variant of {study} re-trained over seeds, after each epoch: the mean "
                   f"over seeds as a line, their range shaded{rare}.")


def importance_pictures(s: StudyData) -> list[Picture]:
    """Which parameters mattered: each searched parameter's share of the objective's variance under the study's
    GP (report's importance table), a bar per parameter with its 90% interval, the largest on top."""
    if s.importance is None or not s.importance.parameters:
        return []
    shares = s.importance.parameters
    figure = Figure(figsize=(7, 0.45 * len(shares) + 1.5), layout="constrained")
    axes = figure.add_subplot()
    values = [100 * p.share for p in shares]
    errors = [[100 * (p.share - p.low) for p in shares], [100 * (p.high - p.share) for p in shares]]
    axes.barh(range(len(shares)), values, xerr=errors, capsize=4, color="C0", ecolor="0.3")
    for y, (value, share) in enumerate(zip(values, shares)):
        axes.annotate(f"{value:.0f}%", (100 * share.high, y), textcoords="offset points", xytext=(6, 0), va="center",
                      fontsize=8)
    axes.set_yticks(range(len(shares)), [p.name for p in shares])
    axes.set_ylim(len(shares) - 0.5, -0.5)
    axes.set_xlim(0, 110)
    axes.set_xlabel("share of the objective's variance explained alone (%), with 90% interval", fontsize=8)
    axes.set_title(f"{s.study.name} ({s.study.study.method}): which parameters mattered for "
                   f"{s.importance.objective.replace('_', ' ')}\nfirst-order Sobol indices of the study's Gaussian "
                   f"process ({s.importance.fitted_on} trials)", fontsize=9)
    data = {"parameters": [p.name for p in shares], "share": values,
            "interval": [(100 * p.low, 100 * p.high) for p in shares]}
    return [Picture(s.study.name, "importance", figure, data,
                    f"How much of the {_words(s.importance.objective)}'s variance each parameter {s.study.name} "
                    "searched explains alone, under the study's Gaussian process, with its 90% interval.")]


def front_pictures(s: StudyData) -> list[Picture]:
    """A multi-objective study's Pareto front: every completed trial on the first two objectives, the Pareto set
    highlighted and joined in order of the first, trials breaking a constraint in grey."""
    config = s.study.study
    if not config.multi_objective:
        return []
    x, y = config.objectives[:2]
    done = [t for t in s.trials
            if t.status == TrialStatus.COMPLETED and t.metrics and x in t.metrics and y in t.metrics]
    if not done:
        return []
    front = sorted(pareto_set(s.study, s.trials), key=lambda t: (present_metrics(t)[x], -present_metrics(t)[y]))
    on_front = {t.trial_index for t in front}
    groups = {"infeasible": [t for t in done if not feasible(s.study, t)],
              "other": [t for t in done if feasible(s.study, t) and t.trial_index not in on_front]}
    figure = Figure(figsize=(5.5, 4.5), layout="constrained")
    axes = figure.add_subplot()

    def points(trials: list[TrialRecord]) -> tuple[list[float], list[float]]:
        return [100 * present_metrics(t)[x] for t in trials], [100 * present_metrics(t)[y] for t in trials]

    if groups["infeasible"]:
        axes.plot(*points(groups["infeasible"]), "o", color="0.75", label="breaks a constraint")
    axes.plot(*points(groups["other"]), "o", color="C0", alpha=0.6, label="trial")
    axes.plot(*points(front), "D-", color="C3", markersize=7, label="Pareto set")
    for t in front:
        axes.annotate(str(t.trial_index), (100 * present_metrics(t)[x], 100 * present_metrics(t)[y]),
                      textcoords="offset points",
                      xytext=(4, 4), fontsize=7)
    axes.set(xlabel=_percent_label(x), ylabel=_percent_label(y),
             title=f"{s.study.name}: Pareto front of {len(done)} completed trials")
    axes.title.set_fontsize(9)
    axes.legend(fontsize=7, loc="lower left")
    data = {"x": x, "y": y, "pareto": [t.trial_index for t in front],
            "infeasible": [t.trial_index for t in groups["infeasible"]],
            "points": {t.trial_index: (present_metrics(t)[x], present_metrics(t)[y]) for t in done}}
    return [Picture(s.study.name, "pareto-front", figure, data,
                    f"Every completed trial of {s.study.name} on {_words(x)} and {_words(y)}; the Pareto set, the "
                    "trials no other beats on both, joined in red.")]


VERDICT_COLOURS = {"better": "C2", "worse": "C3", "equivalent": "C0", "undecided": "C1"}  # by the decision's word
SECONDARY = "0.5"  # a secondary metric's difference: not a decision


def verdict_picture(verdict: Any) -> Picture:
    """A campaign's differences to tuned ERM (verdict.Verdict): one row per method, one panel per metric,
    each difference with its interval (simultaneous on a primary metric, 95% on a secondary one), zero and the
    smallest effect marked, the decision's colour on the point (grey: secondary, not a decision); the legend names
    the colours drawn, and only those."""
    from matplotlib.lines import Line2D

    from pipeline.compare.verdict import METRIC_LABELS, METRICS

    methods = [m.method for m in verdict.methods if any(verdict.cell(m.method, k) for k in METRICS)]
    figure = Figure(figsize=(2.6 * len(METRICS) + 1, 0.45 * len(methods) + 1.9), layout="constrained")
    data: dict[str, Any] = {"methods": methods}
    drawn: dict[str, str] = {}  # word -> colour, in the order first drawn
    for panel, metric in enumerate(METRICS):
        axes = figure.add_subplot(1, len(METRICS), panel + 1)
        axes.axvline(0, color="0.3", linewidth=1)
        primary = metric in verdict.design.primary
        if primary:
            smallest = 100 * verdict.design.smallest_effect[metric]
            axes.axvspan(-smallest, smallest, color="0.9", zorder=0)
        rows = []
        for y, method in enumerate(methods):
            c = verdict.cell(method, metric)
            if c is None:
                continue
            mean = 100 * c.mean
            low, high = (mean, mean) if c.low is None or c.high is None else (100 * c.low, 100 * c.high)
            word = "secondary" if c.outcome is None else c.outcome.value
            colour = VERDICT_COLOURS.get(word, SECONDARY)
            drawn.setdefault(word, colour)
            axes.errorbar([mean], [y], xerr=[[mean - low], [high - mean]], fmt="o", capsize=3, color=colour)
            rows.append({"method": method, "difference": mean, "low": low, "high": high,
                         "verdict": None if c.outcome is None else c.outcome.value, "colour": colour})
        axes.set_yticks(range(len(methods)), methods if panel == 0 else [""] * len(methods))
        axes.set_ylim(len(methods) - 0.5, -0.5)
        axes.set_title(METRIC_LABELS[metric] + ("" if primary else " (secondary)"), fontsize=9)
        axes.set_xlabel("difference to ERM (points)", fontsize=8)
        data[metric] = rows
    handles: list[Artist] = [Line2D([], [], marker="o", linestyle="none", color=colour, label=word)
                             for word, colour in drawn.items()]
    handles.append(Patch(color="0.9", label="within the smallest effect"))
    figure.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8)
    figure.suptitle(f"{verdict.campaign}: each method minus tuned ERM, with its interval, coloured by the verdict",
                    fontsize=9)
    words = ", ".join(drawn)
    caption = (f"Each method of campaign {verdict.campaign} minus tuned ERM on each metric, with its interval "
               f"(simultaneous on a primary metric, 95% on a secondary one), coloured by its word ({words}); the "
               "shaded band is the smallest effect that matters.")
    return Picture(verdict.campaign, "verdict", figure, data, caption)


def budget_picture(verdict: Any) -> Picture | None:
    """A campaign's (or one task's) budget curves (verdict.Verdict.curves): each method's expected best validation
    score after n trials with its band, and the best its own search had (dotted); None without curves."""
    curves = verdict.curves
    if not curves:
        return None
    figure = Figure(figsize=(5.2, 3.4), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    data: dict[str, Any] = {}
    for i, c in enumerate(curves):
        n = list(range(1, c.budget + 1))
        axes.plot(n, [100 * v for v in c.expected], "-o", markersize=3, color=f"C{i}", label=c.method)
        axes.fill_between(n, [100 * v for v in c.low], [100 * v for v in c.high], color=f"C{i}", alpha=0.12)
        axes.plot(range(1, len(c.observed) + 1), [100 * v for v in c.observed], ":", color=f"C{i}")
        data[c.method] = {"n": n, "expected": list(c.expected), "low": list(c.low), "high": list(c.high),
                          "observed": list(c.observed)}
    axes.set_xlabel("trials (n)", fontsize=8)
    axes.set_ylabel(f"expected best {curves[0].objective} (%)", fontsize=8)
    axes.set_xticks(range(1, curves[0].budget + 1))
    axes.legend(fontsize=7, loc="lower right")
    axes.set_title(f"{verdict.campaign}: expected best after n trials (dotted: the search's own best so far)",
                   fontsize=9)
    return Picture(verdict.campaign, "budget", figure, data,
                   f"Each method's expected best {_words(curves[0].objective)} after n trials of its search in "
                   f"campaign {verdict.campaign} (Dodge et al. 2019), with its band; dotted: the best its own search "
                   "had so far.")


def rank_picture(campaign: str, ranking: Any) -> Picture | None:
    """The critical-difference diagram of one metric's ranking across tasks (across_tasks.Ranking), drawn by
    scikit-posthocs (Demsar 2006: mean ranks on an axis, methods the Nemenyi test does not separate joined by a bar,
    the critical difference in the title); None where no Friedman test was made (too few tasks or methods)."""
    if ranking.test != "friedman":
        return None
    import pandas as pd
    from scikit_posthocs import critical_difference_diagram

    # the ranking's own decisions as the diagram's matrix: 0 where Nemenyi separates two methods, 1 where not
    apart = {frozenset(pair) for pair in ranking.differ}
    separated = pd.DataFrame([[0.0 if frozenset((a, b)) in apart else 1.0 for b in ranking.methods]
                              for a in ranking.methods], index=ranking.methods, columns=ranking.methods)
    figure = Figure(figsize=(6, 0.3 * len(ranking.methods) + 1.8), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    critical_difference_diagram(ranking.mean_ranks, separated, ax=axes, label_fmt_left="{label} ({rank:.2f})",
                                label_fmt_right="({rank:.2f}) {label}")
    axes.set_title(f"{campaign}: mean ranks on {ranking.metric} (1 best), Friedman p = {ranking.p_value:.3f}\n"
                   f"a bar joins the methods Nemenyi does not separate (CD {ranking.critical_difference:.2f})",
                   fontsize=9, pad=12)
    return Picture(campaign, f"ranks-{ranking.metric}", figure,
                   {"mean_ranks": ranking.mean_ranks, "critical_difference": ranking.critical_difference},
                   f"Each method's mean rank on {ranking.metric} over the tasks of campaign {campaign}; methods the "
                   "Nemenyi test cannot tell apart are joined by a bar.")


def across_pictures(result: Any) -> list[Picture]:
    """A campaign of several tasks (across_tasks.AcrossTasks): each task's verdict and budget curves, then each
    metric's critical-difference diagram where a Friedman test was made."""
    pictures = []
    for task in result.tasks:
        verdict = result.verdicts[task]
        pictures += [p for p in (verdict_picture(verdict), budget_picture(verdict)) if p is not None]
    return pictures + [p for r in result.rankings if (p := rank_picture(result.campaign, r)) is not None]


def search_picture(summaries: list[Any], checkpoints: tuple[int, ...]) -> Picture:
    """The search benchmark (search_bench.Summary) as regret curves: per problem, how far the true value of each
    strategy's recommendation after k trainings lies below the problem's best, median and interquartile band
    over search seeds (lower is better)."""
    problems = list(dict.fromkeys(s.problem for s in summaries))
    figure = Figure(figsize=(4.2 * len(problems), 3.6), layout="constrained")
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(s.strategy for s in summaries))}
    data: dict[str, Any] = {}
    for panel, problem in enumerate(problems):
        axes = figure.add_subplot(1, len(problems), panel + 1)
        for s in (s for s in summaries if s.problem == problem):  # a strategy's other picks: its colour, dashed
            label = s.strategy + ("" if s.pick == "observed" else f" ({s.pick} pick)")
            high, median, low = (np.array([100 * (s.best - s.quartiles[k][q]) for k in checkpoints])
                                 for q in range(3))  # the best value's quartile is the lowest regret's
            style = "-" if s.pick == "observed" else "--"
            axes.plot(checkpoints, median, style, marker="o", markersize=3, color=colours[s.strategy], label=label)
            if s.pick == "observed":
                axes.fill_between(checkpoints, low, high, color=colours[s.strategy], alpha=0.10)
            data[f"{problem}/{label}"] = {"k": list(checkpoints), "median_regret": median.tolist()}
        axes.set_title(problem, fontsize=9)
        axes.set_xlabel("trainings", fontsize=8)
        if panel == 0:
            axes.set_ylabel("regret: points below the best possible", fontsize=8)
        axes.set_xticks(checkpoints)
        axes.set_ylim(bottom=0)
    figure.legend(*figure.axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=7)
    figure.suptitle("Search strategies: regret of the recommended configuration, median and interquartile range "
                    "over search seeds", fontsize=10)
    return Picture("search-benchmark", "strategies", figure, data,
                   "How far each search strategy's recommendation lies below the best possible after k trainings, "
                   "per problem: the median over search seeds and its interquartile band.")


def epoch_curves_pictures(s: StudyData) -> list[Picture]:
    """The evaluated variants' test accuracy per epoch (the hardness paper's Figure 1), overall and on the class
    made rare in training, when the study's evaluation runs stored their epochs."""
    rare = s.study.study.data.imbalance_class
    picture = epoch_curves_picture(s.study.name, s.runs, None if rare is None else str(rare), _who(s))
    return [] if picture is None else [picture]


# Every kind of picture drawn for each study, in the order files are written and shown.
PICTURES: list[Callable[[StudyData], list[Picture]]] = [trace_pictures, importance_pictures, map_pictures,
                                                         curves_pictures, per_class_pictures, compare_pictures,
                                                         epoch_curves_pictures, front_pictures]


def load_studies(store: Store, names: list[str] | None, log_file: str | Path) -> list[StudyData]:
    """Each named study (all by default) with its trials and its GP fitted read-only from Ax's records."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(log_file)
    from pipeline.search.surrogate import MIN_TRIALS, load_study_model

    loaded = []
    for study in _select(store, names):
        trials = store.trials(study.id)
        searched = len(study.study.search) >= 2
        completed = sum(t.status == TrialStatus.COMPLETED for t in trials)
        model = (load_study_model(study.name, store.url, study.study.objective, study.study.strategy)
                 if searched and completed >= MIN_TRIALS else None)
        runs = store.evaluations(study.id)
        comparison = compare_table(store, [study.name]).records if runs else []
        loaded.append(StudyData(study, trials, model, comparison, store.importance(study.id), runs))
    return loaded


def draw(studies: list[StudyData]) -> list[Picture]:
    """Every picture of every study, and one trace per data set shared by several studies."""
    pictures = [p for s in studies for kind in PICTURES for p in kind(s)]
    by_dataset: dict[str, list[StudyData]] = {}
    for s in studies:
        by_dataset.setdefault(dataset_label(s.study.study.data), []).append(s)
    for dataset, group in by_dataset.items():
        if len(group) > 1:
            objectives = ", ".join(dict.fromkeys(g.objective.replace("_", " ") for g in group))
            figure, data = trace_figure(group, f"{dataset}: {objectives} of every trial, {len(group)} studies")
            pictures.append(Picture(dataset, "trace", figure, data,
                                    f"Every trial of the {len(group)} studies of data set {dataset} in the order "
                                    "they ran, one colour and marker per study, and each study's best so far as a "
                                    "line."))
    return pictures


def write_pictures(pictures: list[Picture], folder: Path, force: bool = False,
                   database: Path | None = None) -> list[Path]:
    """Write each picture as `folder/<file name>` (the folder made if missing), each atomically; an
    existing file is replaced only with `force`, checked for every file before any is written."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--plots {folder} is a file; name a folder")
    targets = [folder / p.file_name for p in pictures]
    taken = [t for t in targets if t.exists()]
    if taken and not force:
        raise UserError(f"--plots: {taken[0]} already exists; pass --force to replace it")
    make_folder(folder, "--plots")
    return [write_output(target, p.png, force, database, option="--plots") for target, p in zip(targets, pictures)]


def epochs_picture(runs: list[Any], budget: int, problem: str) -> Picture:
    """The epochs benchmark (epochs_bench.EpochsRun): the true value of each variant's recommendation against the
    epochs trained so far, median and interquartile band over search seeds (higher is better)."""
    figure = Figure(figsize=(6.4, 3.8), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    grid = np.arange(0, budget + 1)
    variants = list(dict.fromkeys(r.variant for r in runs))
    seeds = len({r.seed for r in runs})
    data: dict[str, Any] = {"epochs": grid.tolist()}
    for i, variant in enumerate(variants):
        values = 100 * np.array([[r.value_at(x) for x in grid] for r in runs if r.variant == variant])
        shown = ~np.isnan(values).any(axis=0)  # from the epoch every seed has a recommendation
        if not shown.any():
            continue
        low, median, high = np.percentile(values[:, shown], [25, 50, 75], axis=0)
        axes.plot(grid[shown], median, color=f"C{i}", label=variant)
        axes.fill_between(grid[shown], low, high, color=f"C{i}", alpha=0.12)
        data[variant] = {"median": [None] * int((~shown).sum()) + median.tolist()}
    axes.set_xlabel("total epochs trained", fontsize=8)
    axes.set_ylabel("true value of the recommendation (%)", fontsize=8)
    axes.set_xlim(0, budget)
    settled = [value for variant in variants if variant in data for value in data[variant]["median"][budget // 8:]
               if value is not None]
    if settled:  # the first trials' values would squash the part where the variants differ
        axes.set_ylim(bottom=math.floor(min(settled)) - 3)
    axes.legend(fontsize=8, loc="lower right")
    axes.set_title(f"{problem}: median and interquartile range over {seeds} search seeds", fontsize=9)
    return Picture("epochs-benchmark", "variants", figure, data,
                   f"The true value of each variant's recommendation against the epochs trained so far on {problem}: "
                   "the median over search seeds and its interquartile band.")
