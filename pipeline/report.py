"""Paper-style tables from the store: the best combination per (data set, network, method).

Reads only the tool's own tables (not Ax). Builds plain tables (headers + rows of text) that
the CLI renders with Rich or writes as Markdown, CSV, LaTeX, JSON or one HTML page.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline.errors import UserError
from pipeline.methods.declarations import ALL_PARAMS
from pipeline.config import DataConfig
from pipeline.store import EvaluationRecord, Store, StudyRecord, TrialRecord, best_trial
from pipeline.study_config import StudyConfig
from pipeline.stats import CONFIDENCE, mean_interval
from pipeline.tables import Table, percent

OBJECTIVE_LABELS = {"val_accuracy": "val acc", "test_accuracy": "test acc",
                    "val_balanced_accuracy": "val balanced", "test_balanced_accuracy": "test balanced",
                    "val_worst_class_accuracy": "val worst", "test_worst_class_accuracy": "test worst"}


def dataset_label(data: DataConfig) -> str:
    """A short name for a data set as configured, with its imbalance and where it applies, if any."""
    label = Path(data.manifest).name if data.manifest else Path(data.root).name if data.root else data.name
    if data.imbalance_class is not None:
        label += f" (class {data.imbalance_class} at {100 * data.imbalance_keep:g}% in {data.imbalance_in})"
    return label


def selection_label(study: StudyConfig) -> str:
    """How a study's best trial was chosen: "val", or "test *" (optimistic), "test, no val split *"."""
    if not study.selected_on_test:
        return "val"
    return "test, no val split *" if study.data.val_fraction == 0 else "test *"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _select(store: Store, names: list[str] | None) -> list[StudyRecord]:
    """The studies named (each must exist), in the order they were stored; all of them by default."""
    for name in names or []:
        store.require_study(name)
    return [s for s in store.all_studies() if not names or s.name in names]


def best_table(store: Store, names: list[str] | None = None) -> Table:
    """One row per (data set, network, method): the best trial's searched parameters and accuracies."""
    best: dict[tuple[str, str, str], tuple[StudyRecord, TrialRecord, int]] = {}
    for study in _select(store, names):
        trials = store.trials(study.id)
        trial = best_trial(study, trials)
        if trial is None:
            continue
        config = study.study
        key = (dataset_label(config.data), config.backbone, config.method)
        completed = sum(t.status == "completed" for t in trials)
        if key not in best or trial.metrics[config.objective] > best[key][1].metrics[best[key][0].study.objective]:
            best[key] = (study, trial, completed)
    # Every searched parameter, and the papers' columns (alpha, T, eta, epoch, beta, IS) where fixed,
    # in the registries' order.
    columns = [p for p in ALL_PARAMS
               if any(p.name in s.study.search or (p.column and p.name in s.study.fixed)
                      for s, _, _ in best.values())]
    headers = (["data set", "network", "method"] + [p.column or p.name for p in columns]
               + ["val acc", "test acc", "worst class", "trials", "selected on", "study"])
    table = Table("Best combination of hyper-parameters", headers, [])
    for (dataset, network, method), (study, trial, completed) in sorted(best.items()):
        config = study.study
        params = [_value(trial.parameters.get(p.name, config.fixed.get(p.name, "-"))) for p in columns]
        table.rows.append([dataset, network, method, *params, percent(trial.metrics.get("val_accuracy")),
                           percent(trial.metrics.get("test_accuracy")),
                           percent(trial.metrics.get("test_worst_class_accuracy")),
                           f"{completed}/{config.budget.trials}",
                           selection_label(config), study.name])
        table.records.append({"dataset": dataset, "network": network, "method": method, "study": study.name,
                              "trial_index": trial.trial_index, "parameters": trial.parameters,
                              "metrics": trial.metrics, "completed_trials": completed,
                              "objective": config.objective, "selected_on_test": config.selected_on_test})
    table.notes.append("Accuracies in %. The best trial is chosen by each study's objective; "
                       "worst class is the lowest per-class accuracy on the test set.")
    if any(r["selected_on_test"] for r in table.records):
        table.notes.append("* selected on test accuracy (the papers' protocol): its test accuracy is "
                           "optimistic, not an estimate of accuracy on new data.")
    return table


def trials_table(store: Store, name: str) -> Table:
    """Every trial of one study: its parameters, status, accuracies, time and error."""
    study = store.require_study(name)
    config = study.study
    searched = list(config.search)
    labels = {p.name: p.column or p.name for p in ALL_PARAMS}
    objective = config.objective
    ranked_on = [] if objective in ("val_accuracy", "test_accuracy") else [objective]  # else shown already
    headers = ["trial", "status", *[labels.get(p, p) for p in searched],
               *[OBJECTIVE_LABELS.get(o, o) for o in ranked_on], "val acc", "test acc", "worst class", "train s",
               "error"]
    table = Table(f"Trials of {name} ({config.method} on {dataset_label(config.data)}, "
                  f"{config.backbone}; objective {config.objective})", headers, [])
    for t in store.trials(study.id):
        m = t.metrics or {}
        table.rows.append([str(t.trial_index), t.status, *[_value(t.parameters.get(p, "-")) for p in searched],
                           *[percent(m.get(o)) for o in ranked_on],
                           percent(m.get("val_accuracy")), percent(m.get("test_accuracy")),
                           percent(m.get("test_worst_class_accuracy")),
                           "-" if t.train_seconds is None else f"{t.train_seconds:.1f}",
                           (t.error or "").splitlines()[0][:80] if t.error else ""])
        table.records.append({k: v for k, v in asdict(t).items() if k not in ("id", "settings")})
    return table


def studies_table(store: Store) -> Table:
    """Every study in the database: what it trains, how far it has come, its best objective so far."""
    table = Table(f"Studies in {store.shown}", ["study", "method", "data set", "network", "trials", "failed",
                                              "best", "objective"], [])
    for study in store.all_studies():
        trials = store.trials(study.id)
        config = study.study
        best = best_trial(study, trials)
        completed = sum(t.status == "completed" for t in trials)
        running = sum(t.status == "running" for t in trials)
        table.rows.append([study.name, config.method, dataset_label(config.data), config.backbone,
                           f"{completed}/{config.budget.trials}" + (f" +{running} running" if running else ""),
                           str(sum(t.status == "failed" for t in trials)),
                           "-" if best is None else percent(best.metrics[config.objective]),
                           OBJECTIVE_LABELS.get(config.objective, config.objective)
                           + (" (no val split) *" if config.data.val_fraction == 0 else "")])
        table.records.append({"study": study.name, "method": config.method, "completed": completed,
                              "running": running, "budget": config.budget.trials,
                              "objective": config.objective,
                              "best": None if best is None else best.metrics[config.objective]})
    return table


# What the compare table reports per variant: (metric key, column). "smallest_class_accuracy" is the test
# accuracy of the class with the fewest training examples (the rare class of an imbalanced study).
COMPARE_METRICS = (("test_accuracy", "test acc"), ("test_balanced_accuracy", "balanced"),
                   ("test_worst_class_accuracy", "worst class"), ("smallest_class_accuracy", "smallest class"))
COMPARE_DIFFERENCES = ("test_accuracy", "test_balanced_accuracy", "smallest_class_accuracy")  # shown as columns
def run_metrics(run: EvaluationRecord) -> dict[str, float]:
    """A run's compared metrics, with the test accuracy of its smallest training class."""
    smallest = min(run.train_class_counts, key=lambda name: run.train_class_counts[name])
    return {**run.metrics, "smallest_class_accuracy": run.per_class["test"].get(smallest, math.nan)}


def _interval_text(mean: float, half_width: float | None, signed: bool = False) -> str:
    text = f"{100 * mean:+.1f}" if signed else f"{100 * mean:.1f}"
    return text if half_width is None else f"{text} ± {100 * half_width:.1f}"


def compare_table(store: Store, names: list[str] | None = None, baseline: str | None = None) -> Table:
    """Per study and variant (the tuned configuration, each baseline, each varied value): the mean and
    95% interval over seeds of the test metrics, and the paired difference to `baseline` (default erm,
    when evaluated) over the seeds both ran, marked ~ when its interval contains 0."""
    chosen = [(s, store.evaluations(s.id)) for s in _select(store, names)]
    chosen = [(s, runs) for s, runs in chosen if runs]
    if not chosen:
        raise UserError(f"no evaluations in {store.shown}{' for ' + ', '.join(names) if names else ''}; "
                        "run `robust-tune evaluate STUDY` first")
    wanted = baseline or "erm"
    if baseline and not any(r.variant == baseline for _, runs in chosen for r in runs):
        known = sorted({r.variant for _, runs in chosen for r in runs})
        raise UserError(f"--baseline {baseline} was not evaluated; evaluated variants: {', '.join(known)}")
    headers = (["study", "variant", "method", "seeds"] + [label for _, label in COMPARE_METRICS]
               + [f"vs {wanted}: {dict(COMPARE_METRICS)[key]}" for key in COMPARE_DIFFERENCES] + ["selected on"])
    table = Table("Evaluation over seeds", headers, [])
    for study, runs in chosen:
        by_variant: dict[str, dict[int, EvaluationRecord]] = {}
        for run in runs:
            by_variant.setdefault(run.variant, {})[run.seed] = run
        reference = {seed: run_metrics(run) for seed, run in by_variant.get(wanted, {}).items()}
        for variant in sorted(by_variant, key=lambda v: v != "tuned"):  # the tuned configuration first
            seeds = by_variant[variant]
            values = {seed: run_metrics(run) for seed, run in seeds.items()}
            summary = {key: mean_interval([values[s][key] for s in sorted(values)]) for key, _ in COMPARE_METRICS}
            differences = {}
            matched = sorted(set(values) & set(reference)) if variant != wanted else []
            for key, _ in COMPARE_METRICS:
                if matched:
                    mean, half = mean_interval([values[s][key] - reference[s][key] for s in matched])
                    differences[key] = {"mean": mean, "half_width": half, "seeds": matched,
                                        "contains_zero": half is None or abs(mean) <= half}
            any_run = next(iter(seeds.values()))
            table.rows.append(
                [study.name, variant, any_run.settings.method, str(len(seeds))]
                + [_interval_text(*summary[key]) for key, _ in COMPARE_METRICS]
                + [_interval_text(differences[key]["mean"], differences[key]["half_width"], signed=True)
                   + (" ~" if differences[key]["contains_zero"] else "") if key in differences else "-"
                   for key in COMPARE_DIFFERENCES]
                + [selection_label(study.study)])
            table.records.append({
                "study": study.name, "variant": variant, "method": any_run.settings.method,
                "trial_index": any_run.trial_index, "seeds": sorted(seeds), "baseline": wanted if reference else None,
                "metrics": {key: {"mean": summary[key][0], "half_width": summary[key][1],
                                  "values": [values[s][key] for s in sorted(values)]} for key, _ in COMPARE_METRICS},
                "difference": differences, "params": any_run.settings.params,
                "objective": study.study.objective, "selected_on": selection_label(study.study)})
    table.notes.append(f"Test accuracies in %: mean ± half-width of the {CONFIDENCE:.0%} Student t interval over "
                       "seeds; smallest class is the class with the fewest training examples. Differences are "
                       f"paired on the seeds both variants ran; ~ marks an interval that contains 0 "
                       "(no detectable difference).")
    if any(r["selected_on"] != "val" for r in table.records):
        table.notes.append("* the configuration was selected on test accuracy (the papers' protocol): the tuned "
                           "variant's test figures are optimistic.")
    return table
