"""Paper-style tables from the store: the best combination per (data set, network, method).

Reads only the tool's own tables (not Ax). Builds plain tables (headers + rows of text) that
the CLI renders with Rich or writes as Markdown, CSV, LaTeX, JSON or one HTML page.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline.search.bounds import bound_flags, searched_ranges, widening_lines
from pipeline.errors import UserError
from pipeline.methods.declarations import ALL_PARAMS
from pipeline.config import DataConfig
from pipeline.store import (EvaluationRecord, Store, StudyRecord, TrialRecord, TrialStatus, best_trial, model_pick,
                            trial_budget, trials_completed)
from pipeline.store.records import feasible, importance_refused, pareto_set
from pipeline.spec.study_config import StudyConfig
from pipeline.compare.evaluate import COMPARE_DIFFERENCES, COMPARE_METRICS, TUNED, run_metrics, value_text
from pipeline.compare.stats import CONFIDENCE, PairedDifference, holm, mean_interval, paired_difference, \
    simultaneous_confidence
from pipeline.report.tables import TOO_FEW, Table, parameter_text, percent, too_wide
from pipeline.training.result import never_right

OBJECTIVE_LABELS = {"val_accuracy": "val acc", "test_accuracy": "test acc",
                    "val_balanced_accuracy": "val balanced", "test_balanced_accuracy": "test balanced",
                    "val_worst_class_accuracy": "val worst", "test_worst_class_accuracy": "test worst"}


def dataset_label(data: DataConfig) -> str:
    """A short name for a data set as configured, with its imbalance and where it applies, if any."""
    label = (Path(data.manifest).name if data.manifest else Path(data.root).name if data.root
             else Path(data.path).stem if data.path else data.name)
    if data.imbalance_class is not None:
        label += f" (class {data.imbalance_class} at {100 * data.imbalance_keep:g}% in {data.imbalance_in})"
    return label


def selection_label(study: StudyConfig) -> str:
    """How a study's best trial was chosen: "val", or "test *" (optimistic), "test, no val split *"."""
    if not study.selected_on_test:
        return "val"
    return "test, no val split *" if study.data.val_fraction == 0 else "test *"


def objectives_label(study: StudyConfig) -> str:
    """A study's objective, or its objectives joined by commas, in the tables' short words."""
    return ", ".join(OBJECTIVE_LABELS.get(o, o) for o in study.all_objectives)


def _select(store: Store, names: list[str] | None) -> list[StudyRecord]:
    """The studies named (each must exist), in the order they were stored; all of them by default."""
    for name in names or []:
        store.require_study(name)
    return [s for s in store.all_studies() if not names or s.name in names]


def never_right_text(method: str, where: str, classes: list[str], runs: int, kind: str) -> str:
    """The warning that `method` never got `classes` right in any of its `runs` runs (`kind`: trial, run) of
    `where` (its study, or a campaign)."""
    named = ", ".join(repr(c) for c in classes)
    several = len(classes) > 1
    return (f"Warning: {method} never got class{'es' if several else ''} {named} right: none of the {runs} "
            f"{kind}{'s' if runs != 1 else ''} of {where} got one of {'their' if several else 'its'} test images "
            "right.")


def worst_class(trial: TrialRecord) -> str | None:
    """The name of the class with the lowest test accuracy in a trial (the first of equals), where it stored
    its per-class accuracies."""
    test = (trial.per_class or {}).get("test") or {}
    accuracies = {name: value for name, value in test.items() if isinstance(value, (int, float))}
    return min(accuracies, key=lambda name: accuracies[name]) if accuracies else None


def present_metrics(trial: TrialRecord) -> dict[str, float]:
    """The metrics of a trial known to have them: one the best-trial rule, the Pareto set or the model's pick chose
    (each chooses among completed trials with every objective), or one a filter on its metrics kept."""
    assert trial.metrics is not None, f"trial {trial.trial_index} has no metrics"
    return trial.metrics


def best_table(store: Store, names: list[str] | None = None) -> Table:
    """One row per (data set, network, method): the best trial's searched parameters and accuracies."""
    best: dict[tuple[str, str, str], tuple[StudyRecord, TrialRecord, int]] = {}
    tested: dict[str, list[dict[str, float]]] = {}  # study -> each trained trial's test accuracy per class
    for study in _select(store, names):
        trials = store.trials(study.id)
        tested[study.name] = [t.per_class["test"] for t in trials if t.per_class and t.per_class.get("test")]
        trial = best_trial(study, trials)
        if trial is None:
            continue
        config = study.study
        key = (dataset_label(config.data), config.backbone, config.method)
        completed = trials_completed(trials)
        if key not in best or (present_metrics(trial)[config.objective]
                               > present_metrics(best[key][1])[best[key][0].study.objective]):
            best[key] = (study, trial, completed)
    # Every searched parameter, and the papers' columns (alpha, T, eta, epoch, beta, IS) where fixed,
    # in the registries' order.
    columns = [p for p in ALL_PARAMS
               if any(p.name in s.study.search or (p.column and p.name in s.study.fixed)
                      for s, _, _ in best.values())]
    shown = sorted(best.items())
    moved = {study.name: store.widenings(study.id) for _, (study, _, _) in shown}
    flags = {study.name: bound_flags(searched_ranges(study.study.search, moved[study.name]), trial.parameters)
             for _, (study, trial, _) in shown}
    objectives = {study.study.objective for _, (study, _, _) in shown}
    only = next(iter(objectives)) if len(objectives) == 1 else None
    objective_header = OBJECTIVE_LABELS.get(only, only) if only else "objective"
    headers = (["data set", "network", "method"] + [p.column or p.name for p in columns]
               + [objective_header, "test acc", "worst class", "trials", "selected on"]
               + (["on a bound"] if any(flags.values()) else []) + ["study"])
    table = Table("Best combination of hyper-parameters", headers, [], key=objective_header)
    for (dataset, network, method), (study, trial, completed) in shown:
        config = study.study
        params = [parameter_text(trial.parameters.get(p.name, config.fixed.get(p.name, "-"))) for p in columns]
        on_bound = [", ".join(f.short for f in flags[study.name]) or "-"] if any(flags.values()) else []
        worst = worst_class(trial)
        metrics = present_metrics(trial)
        table.rows.append([dataset, network, method, *params, percent(metrics.get(config.objective)),
                           percent(metrics.get("test_accuracy")),
                           percent(metrics.get("test_worst_class_accuracy")) + (f" ({worst})" if worst else ""),
                           f"{completed}/{trial_budget(config, bool(moved[study.name]))}",
                           selection_label(config), *on_bound, study.name])
        table.records.append({"dataset": dataset, "network": network, "method": method, "study": study.name,
                              "trial_index": trial.trial_index, "parameters": trial.parameters,
                              "metrics": trial.metrics, "worst_class": worst, "examples": trial.examples,
                              "distinct_per_batch": trial.distinct_per_batch, "completed_trials": completed,
                              "objective": config.objective, "selected_on_test": config.selected_on_test,
                              "strategy": config.strategy, "seeds_per_trial": config.budget.seeds_per_trial,
                              "bound_flags": [asdict(f) for f in flags[study.name]],
                              "widenings": [w.to_dict() for w in moved[study.name]],
                              "never_right": never_right(tested[study.name])})
    ranked = ("" if len(objectives) == 1 else "objective: the value of each study's own (" + ", ".join(
        f"{study.name}: {OBJECTIVE_LABELS.get(study.study.objective, study.study.objective)}"
        for _, (study, _, _) in shown) + "); ")
    table.notes.append(f"Accuracies in %. The best trial is chosen by each study's objective; {ranked}worst class "
                       "is the lowest per-class accuracy on the test set, the class named beside it.")
    table.notes += [f"{name}: {line}" for name, found in moved.items() for line in widening_lines(found)]
    table.notes += [flag.text(name) for name, found in flags.items() for flag in found]
    table.notes += [never_right_text(r["method"], r["study"], r["never_right"], len(tested[r["study"]]), "trial")
                    for r in table.records if r["never_right"]]
    if any(r["selected_on_test"] for r in table.records):
        table.notes.append("* selected on test accuracy (the papers' protocol): its test accuracy is "
                           "optimistic, not an estimate of accuracy on new data.")
    searched_otherwise = [f"{study.name} ({study.study.strategy})" for study, _, _ in best.values()
                          if not study.study.strategy.startswith("gp")]
    if searched_otherwise:
        table.notes.append("Searched without the Gaussian process: " + ", ".join(searched_otherwise) + ".")
    other_gp = [f"{study.name} ({study.study.strategy})" for study, _, _ in best.values()
                if study.study.strategy.startswith("gp-")]
    if other_gp:
        table.notes.append("Searched by a Gaussian process with options (docs/design/search.md): "
                           + ", ".join(other_gp) + ".")
    averaged = [f"{study.name} ({study.study.budget.seeds_per_trial})" for study, _, _ in best.values()
                if study.study.budget.seeds_per_trial > 1]
    if averaged:
        table.notes.append("Each trial's accuracies are a mean over training seeds in: " + ", ".join(averaged) + ".")
    several = [f"{study.name} ({', '.join(study.study.objectives)})" for study, _, _ in best.values()
               if study.study.multi_objective]
    if several:
        table.notes.append("Several objectives in: " + ", ".join(several) + "; the row is the trial of the Pareto "
                           "set best on the first objective, one of the trade-offs the Pareto set lists.")
    constrained = [f"{study.name} ({'; '.join(study.study.constraints)})" for study, _, _ in best.values()
                   if study.study.constraints]
    if constrained:
        table.notes.append("A trial breaking a constraint is never best: " + ", ".join(constrained) + ".")
    return table


def pareto_table(store: Store, name: str) -> Table:
    """The Pareto set of a multi-objective study: each completed trial keeping every constraint that no other
    such trial beats on every objective, with its searched parameters and objectives."""
    study = store.require_study(name)
    config = study.study
    searched = list(config.search)
    labels = {p.name: p.column or p.name for p in ALL_PARAMS}
    trials = store.trials(study.id)
    front = pareto_set(study, trials)
    best = best_trial(study, trials)
    headers = ["trial", *[labels.get(p, p) for p in searched], *[OBJECTIVE_LABELS.get(o, o) for o in
                                                                  config.all_objectives]]
    table = Table(f"Pareto set of {name} ({len(front)} of {sum(t.status == TrialStatus.COMPLETED for t in trials)} "
                  f"completed trials; objectives {', '.join(config.all_objectives)})", headers, [])
    for t in front:
        marker = " *" if best is not None and t.trial_index == best.trial_index else ""
        table.rows.append([f"{t.trial_index}{marker}", *[parameter_text(t.parameters.get(p, "-")) for p in searched],
                           *[percent(present_metrics(t)[o]) for o in config.all_objectives]])
        table.records.append({"study": name, "trial_index": t.trial_index, "parameters": t.parameters,
                              "objectives": {o: present_metrics(t)[o] for o in config.all_objectives},
                              "best": t is best})
    table.notes.append("Accuracies in %. No trial of the set is better on every objective than another; each is a "
                       f"trade-off. * the trial best on {config.objective}, the one `best`, `evaluate` and "
                       "`train --from-study` take without --trial.")
    if config.constraints:
        table.notes.append(f"Only trials keeping every constraint ({'; '.join(config.constraints)}) count.")
    return table


def model_pick_table(store: Store, names: list[str] | None = None) -> Table | None:
    """Per study, the best observed trial beside the model's pick (the completed trial its Gaussian process
    predicts best, with the 95% interval of that prediction); None when no study has a prediction stored."""
    table = Table("The best observed trial and the model's pick", ["study", "objective", "best", "value",
                                                                  "pick", "predicted", "observed"], [])
    for study in _select(store, names):
        trials = store.trials(study.id)
        observed, modelled = best_trial(study, trials), model_pick(study, trials)
        if observed is None or modelled is None:
            continue
        objective, predicted = study.study.objective, modelled.predicted
        assert predicted is not None, "model_pick picks a trial with a prediction"
        mean, sd = predicted["mean"], predicted["sd"]
        table.rows.append([study.name, OBJECTIVE_LABELS.get(objective, objective), trial_label(observed),
                           percent(present_metrics(observed)[objective]), trial_label(modelled),
                           f"{percent(mean)} [{percent(mean - 1.96 * sd)}, {percent(mean + 1.96 * sd)}]",
                           percent(present_metrics(modelled)[objective])])
        table.records.append({"study": study.name, "objective": objective, "observed_trial": observed.trial_index,
                              "observed_value": present_metrics(observed)[objective],
                              "model_trial": modelled.trial_index, "predicted_mean": mean, "predicted_sd": sd,
                              "model_trial_value": present_metrics(modelled)[objective],
                              "fitted_on": predicted["fitted_on"]})
    if not table.rows:
        return None
    table.notes.append("In %. best: the best observed trial and its value; pick: the model's pick, the completed "
                       "trial with the highest posterior mean of the study's Gaussian process (fitted on every "
                       "completed trial when a run of the study ended), with the 95% interval of that mean; the best "
                       "observed value is partly a lucky draw of training noise. "
                       "`evaluate --pick model` re-trains the model's pick.")
    return table


def importance_table(store: Store, names: list[str] | None = None) -> Table | None:
    """Per study, the share of its objective's variance each searched parameter explains alone under the study's
    GP (first-order Sobol index, with a 90% interval), as stored when a run of it ended; a study without it gets
    a note saying why. None when no selected study searches a parameter."""
    table = Table("Which parameters mattered: share of the objective's variance each explains",
                  ["study", "objective", "parameter", "share", "90% interval", "trials"], [])
    for study in _select(store, names):
        if not study.study.search:
            continue
        stored = store.importance(study.id)
        if stored is None or not stored.parameters:
            table.notes.append(f"{study.name}: {_no_importance(store, study, stored)}.")
            continue
        objective = OBJECTIVE_LABELS.get(stored.objective, stored.objective)
        for share in stored.parameters:
            table.rows.append([study.name, objective, share.name, percent(share.share),
                               f"{percent(share.low)}-{percent(share.high)}", str(stored.fitted_on)])
            table.records.append({"study": study.name, "objective": stored.objective, "parameter": share.name,
                                  "share": share.share, "low": share.low, "high": share.high,
                                  "fitted_on": stored.fitted_on})
    if not table.rows and not table.notes:
        return None
    if table.rows:  # with no rows, the notes say why each study has none; no shares to explain
        table.notes.insert(0, "Share in %: the part of the objective's variance over the search space that a "
                              "parameter explains alone (first-order Sobol index of the study's Gaussian process, "
                              "fitted on the study's completed trials when a run of it ended), with the 5-95% range "
                              "over the model's posterior draws. Shares need not sum to 100: the rest is "
                              "interactions and noise.")
    return table


def _no_importance(store: Store, study: StudyRecord, stored: Any) -> str:
    """Why a study has no parameter importance, in a few words."""
    if stored is not None and stored.note:
        return f"no importance: {stored.note}"
    completed = sum(t.status == TrialStatus.COMPLETED for t in store.trials(study.id))
    if (refused := importance_refused(completed, len(study.study.search))) is not None:
        return f"no importance: {refused}"
    return ("no importance stored: it is made when a run of the study ends (a study run before 0.5.0 gets it at "
            "its next run that completes a trial)")


def trials_table(store: Store, name: str) -> Table:
    """Every trial of one study: its parameters, status, accuracies, time and error."""
    study = store.require_study(name)
    config = study.study
    searched = list(config.search)
    labels = {p.name: p.column or p.name for p in ALL_PARAMS}
    ranked_on = [m for m in config.told_metrics if m not in ("val_accuracy", "test_accuracy")]  # else shown already
    headers = ["trial", "status", *[labels.get(p, p) for p in searched],
               *[OBJECTIVE_LABELS.get(o, o) for o in ranked_on], "val acc", "test acc", "worst class", "train s",
               *(["feasible"] if config.constraints else []), "error"]
    seeds = config.budget.seeds_per_trial
    table = Table(f"Trials of {name} ({config.method} on {dataset_label(config.data)}, "
                  f"{config.backbone}; {'objectives' if config.multi_objective else 'objective'} "
                  f"{', '.join(config.all_objectives)}"
                  + (f"; constraints {'; '.join(config.constraints)}" if config.constraints else "")
                  + f"; search {config.strategy}"
                  + (f"; each trial the mean of {seeds} seeds" if seeds > 1 else "") + ")", headers, [],
                  key=OBJECTIVE_LABELS.get(config.objective, config.objective))
    for t in store.trials(study.id):
        m = t.metrics or {}
        table.rows.append([str(t.trial_index), status_text(t),
                           *[parameter_text(t.parameters.get(p, "-")) for p in searched],
                           *[percent(m.get(o)) for o in ranked_on],
                           percent(m.get("val_accuracy")), percent(m.get("test_accuracy")),
                           percent(m.get("test_worst_class_accuracy")),
                           "-" if t.train_seconds is None else f"{t.train_seconds:.1f}",
                           *([_feasible_text(study, t)] if config.constraints else []),
                           (t.error or "").splitlines()[0] if t.error else ""])  # the terminal cuts it
        table.records.append({k: v for k, v in asdict(t).items() if k not in ("id", "settings")})
    if any(t.prefix_of is not None or t.status == TrialStatus.EARLY_STOPPED for t in store.trials(study.id)):
        table.notes.append("stopped at E: stopped early after epoch E (budget.early_stopping); prefix of K: trial K's "
                           "run at this epoch count, exact, told to Ax as a trial of its own (search.epoch_prefixes)")
    return table


def trial_label(trial: TrialRecord) -> str:
    """A trial's index, with the trial it is an epoch prefix of: `7 (prefix of 5)`."""
    return str(trial.trial_index) + ("" if trial.prefix_of is None else f" (prefix of {trial.prefix_of})")


def status_text(trial: TrialRecord) -> str:
    """A trial's status for a table: `prefix of K` for an epoch prefix, `stopped at E` for an early-stopped trial."""
    if trial.prefix_of is not None:
        return f"prefix of {trial.prefix_of}"
    if trial.status == TrialStatus.EARLY_STOPPED:
        return f"stopped at {len(trial.epochs)}"
    return trial.status


def pareto_tables(store: Store, names: list[str] | None = None) -> list[Table]:
    """The Pareto set of each named multi-objective study (all by default); none for single-objective ones."""
    return [pareto_table(store, s.name) for s in _select(store, names) if s.study.multi_objective]


def _feasible_text(study: StudyRecord, trial: TrialRecord) -> str:
    """yes or no for a completed trial (whether it keeps every constraint), "-" for any other."""
    if trial.status != TrialStatus.COMPLETED or not trial.metrics:
        return "-"
    return "yes" if feasible(study, trial) else "no"


def _progress_text(completed: int, budget: int) -> str:
    """`5 of 8` trials; `10 (budget 8)` when runs given `--trials N` went past the study's own budget."""
    return f"{completed} of {budget}" if completed <= budget else f"{completed} (budget {budget})"


def studies_table(store: Store) -> Table:
    """Every study in the database: what it trains, how far it has come, its best objective so far."""
    table = Table(f"Studies in {store.shown}", ["study", "method", "data set", "network", "trials", "failed",
                                              "best", "objective"], [])
    for study in store.all_studies():
        trials = store.trials(study.id)
        config = study.study
        best = best_trial(study, trials)
        completed = trials_completed(trials)
        running = sum(t.status == TrialStatus.RUNNING for t in trials)
        budget = trial_budget(config, bool(store.widenings(study.id)))
        table.rows.append([study.name, config.method, dataset_label(config.data), config.backbone,
                           _progress_text(completed, budget)
                           + (f" +{running} running" if running else ""),
                           str(sum(t.status == TrialStatus.FAILED for t in trials)),
                           "-" if best is None else percent(present_metrics(best)[config.objective]),
                           objectives_label(config)
                           + (" (no val split) *" if config.data.val_fraction == 0 else "")])
        table.records.append({"study": study.name, "method": config.method, "completed": completed,
                              "running": running, "budget": budget,
                              "objective": config.objective,
                              "best": None if best is None else present_metrics(best)[config.objective]})
    if any(r["completed"] > r["budget"] for r in table.records):
        table.notes.append("(budget N): the study file's budget; `run --trials` took this study past it")
    return table


# What the compare table reports per variant: (metric key, column). "smallest_class_accuracy" is the test
# accuracy of the class with the fewest training examples (the rare class of an imbalanced study).
def _interval_text(mean: float, half_width: float | None, signed: bool = False) -> str:
    text = f"{100 * mean:+.1f}" if signed else f"{100 * mean:.1f}"
    return text if half_width is None else f"{text} ± {100 * half_width:.1f}"


def _difference_text(difference: dict[str, Any] | None) -> str:
    """A difference as the table shows it: signed, with its interval, ~ when that contains 0; "-" for none."""
    if difference is None:
        return "-"
    half = difference["half_width"]
    if half is not None and too_wide(-half, half):
        return f"{100 * difference['mean']:+.1f} ({TOO_FEW})"
    text = _interval_text(difference["mean"], half, signed=True)
    return text + (" ~" if difference["contains_zero"] else "")


@dataclass
class _Row:
    """One row of the compare table: a variant's runs by seed, and the studies it belongs to (several when
    their runs are the same: the same settings, seed and results, trained once and shared)."""

    studies: list[StudyRecord]
    variant: str
    runs: dict[int, EvaluationRecord]

    @property
    def method(self) -> str:
        return next(iter(self.runs.values())).settings.method

    @property
    def params(self) -> dict[str, Any]:
        return next(iter(self.runs.values())).settings.params

    def values(self) -> dict[int, dict[str, float]]:
        """Each seed's compared metrics."""
        return {seed: run_metrics(run) for seed, run in sorted(self.runs.items())}

    def sameness(self) -> tuple:
        """What makes two studies' variants one row: per seed, the planned settings and the results."""
        return tuple((seed, json.dumps(run.config, sort_keys=True), json.dumps(run.metrics, sort_keys=True))
                     for seed, run in sorted(self.runs.items()))


def _rows(study: StudyRecord, runs: list[EvaluationRecord]) -> list[_Row]:
    """A study's variants, the tuned configuration first, the others in the order they were stored."""
    by_variant: dict[str, dict[int, EvaluationRecord]] = {}
    for run in runs:
        by_variant.setdefault(run.variant, {})[run.seed] = run
    return [_Row([study], variant, seeds) for variant, seeds in sorted(by_variant.items(), key=lambda v: v[0] != TUNED)]


DEFAULTS = {p.name: p.default for p in ALL_PARAMS}


def shown_params(row: _Row, tuned: dict[str, Any] | None) -> dict[str, Any]:
    """A baseline's or varied value's parameters worth showing: those that differ from the tuned
    configuration's (the ones it has) or else from their defaults; none for the tuned configuration."""
    if row.variant == TUNED:
        return {}
    tuned = tuned or {}
    return {k: v for k, v in row.params.items() if (tuned[k] if k in tuned else DEFAULTS.get(k, v)) != v}


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={value_text(v)}" for k, v in params.items()) or "-"


def _summary(values: dict[int, dict[str, float]]) -> dict[str, tuple[float, float | None]]:
    return {key: mean_interval([values[s][key] for s in sorted(values)]) for key, _ in COMPARE_METRICS}


def _headers(against: str, with_params: bool) -> list[str]:
    return (["study", "variant", "method", "seeds"] + [label for _, label in COMPARE_METRICS]
            + [f"vs {against}: {dict(COMPARE_METRICS)[key]}" for key in COMPARE_DIFFERENCES]
            + (["parameters"] if with_params else []) + ["selected on"])


def _add_row(table: Table, row: _Row, differences: dict[str, dict[str, Any]], against: str | None,
             shown: dict[str, Any], with_params: bool) -> None:
    """One variant's line and its record (every parameter, and those shown)."""
    values, study = row.values(), row.studies[0]
    summary = _summary(values)
    table.rows.append(
        [", ".join(s.name for s in row.studies), row.variant, row.method, str(len(values))]
        + [_interval_text(*summary[key]) for key, _ in COMPARE_METRICS]
        + [_difference_text(differences.get(key)) for key in COMPARE_DIFFERENCES]
        + ([_params_text(shown)] if with_params else []) + [selection_label(study.study)])
    table.records.append({
        "study": study.name, "studies": [s.name for s in row.studies], "variant": row.variant, "method": row.method,
        "trial_index": next(iter(row.runs.values())).trial_index, "seeds": sorted(values), "baseline": against,
        "metrics": {key: {"mean": summary[key][0], "half_width": summary[key][1],
                          "values": [values[s][key] for s in sorted(values)]} for key, _ in COMPARE_METRICS},
        "difference": differences, "params": row.params, "params_shown": shown,
        "objective": study.study.objective, "selected_on": selection_label(study.study)})


def _selection_note(table: Table) -> None:
    if any(r["selected_on"] != "val" for r in table.records):
        table.notes.append("* the configuration was selected on test accuracy (the papers' protocol): the tuned "
                           "variant's test figures are optimistic.")


def compare_table(store: Store, names: list[str] | None = None, baseline: str | None = None) -> Table:
    """Per study and variant (the tuned configuration, each baseline, each varied value): the mean and
    95% interval over seeds of the test metrics, and the paired difference to a reference over the seeds
    both ran, marked ~ when its interval contains 0. One study: the reference is `baseline` (default erm,
    when evaluated). Several: each study's tuned configuration against one reference (see across_studies)."""
    chosen = [(s, store.evaluations(s.id)) for s in _select(store, names)]
    chosen = [(s, runs) for s, runs in chosen if runs]
    if not chosen:
        raise UserError(f"no evaluations in {store.shown}{' for ' + ', '.join(names) if names else ''}; "
                        "run `robust-tune evaluate STUDY` first")
    if len(chosen) > 1:
        return across_studies([_rows(study, runs) for study, runs in chosen], baseline)
    return _one_study(_rows(*chosen[0]), baseline)


def _one_study(rows: list[_Row], baseline: str | None) -> Table:
    """One study's variants, each against `baseline` (default erm) on the seeds both ran."""
    wanted = baseline or "erm"
    if baseline and not any(r.variant == baseline for r in rows):
        raise UserError(f"--baseline {baseline} was not evaluated; evaluated variants: "
                        f"{', '.join(sorted(r.variant for r in rows))}")
    reference = next((r.values() for r in rows if r.variant == wanted), {})
    tuned = next((r.params for r in rows if r.variant == TUNED), None)
    shown = [shown_params(r, tuned) for r in rows]
    table = Table("Evaluation over seeds", _headers(wanted, any(shown)), [])
    for row, params in zip(rows, shown):
        values = row.values()
        differences = {}
        matched = sorted(set(values) & set(reference)) if row.variant != wanted else []
        for key, _ in COMPARE_METRICS:
            if matched:
                mean, half = mean_interval([values[s][key] - reference[s][key] for s in matched])
                differences[key] = {"mean": mean, "half_width": half, "seeds": matched,
                                    "contains_zero": half is None or abs(mean) <= half}
        _add_row(table, row, differences, wanted if reference else None, params, any(shown))
    table.notes.append(f"Test accuracies in %: mean ± half-width of the {CONFIDENCE:.0%} Student t interval over "
                       "seeds; smallest class is the class with the fewest training examples. Differences are "
                       f"paired on the seeds both variants ran; ~ marks an interval that contains 0 "
                       "(no detectable difference).")
    if any(shown):
        table.notes.append("parameters: a baseline's values that differ from the tuned configuration's (or, "
                           "where it has none, from their defaults); the records hold every parameter.")
    _selection_note(table)
    table.detail = seed_table(table)
    return table


def seed_table(table: Table) -> Table:
    """Each seed's values behind an evaluation table's means and intervals (its records): one row per study, variant
    and seed, so a reader sees what an interval was made of (a collapsed run, a spread)."""
    detail = Table(f"Each seed's values ({sum(len(r['seeds']) for r in table.records)} runs)",
                   ["study", "variant", "seed", *[label for _, label in COMPARE_METRICS]], [])
    for record in table.records:
        for i, seed in enumerate(record["seeds"]):
            detail.rows.append([", ".join(record["studies"]), record["variant"], str(seed),
                                *[percent(record["metrics"][key]["values"][i]) for key, _ in COMPARE_METRICS]])
    detail.notes.append("Test accuracies in %, each of one run re-trained on that seed.")
    return detail


def _merged(per_study: list[list[_Row]]) -> list[_Row]:
    """Every study's rows, the tuned configurations first; a variant whose runs several studies share (the
    same settings, seed and results) is one row naming them all."""
    tuned = [r for rows in per_study for r in rows if r.variant == TUNED]
    others: list[_Row] = []
    for row in (r for rows in per_study for r in rows if r.variant != TUNED):
        same = next((o for o in others if o.sameness() == row.sameness() and row.studies[0] not in o.studies), None)
        if same is None:
            others.append(row)
        else:
            same.studies.append(row.studies[0])
    return tuned + others


def _reference(rows: list[_Row], studies: list[str], baseline: str | None) -> _Row:
    """What every study's tuned configuration is compared with: `baseline` naming a compared study (its tuned
    configuration) or a variant every compared study shares; by default the shared erm, else the first
    study's tuned configuration."""
    shared = [r for r in rows if r.variant != TUNED and len(r.studies) == len(studies)]
    tuned = {r.studies[0].name: r for r in rows if r.variant == TUNED}
    if baseline is None:
        return next((r for r in shared if r.variant == "erm"), None) or tuned.get(studies[0]) or rows[0]
    if baseline in tuned:
        return tuned[baseline]
    found = next((r for r in shared if r.variant == baseline), None)
    if found is None:
        raise UserError(f"--baseline {baseline}: with several studies it names a compared study whose tuned "
                        f"configuration was evaluated ({', '.join(tuned) or 'none'}) or a variant every compared "
                        f"study shares with the same runs ({', '.join(r.variant for r in shared) or 'none'})")
    return found


def _label(row: _Row) -> str:
    return f"{row.studies[0].name} {TUNED}" if row.variant == TUNED else row.variant


def _paired(row: _Row, reference: dict[int, dict[str, float]], key: str) -> tuple[PairedDifference, list[int]]:
    """The paired t test of `row` minus the reference on metric `key`, over the seeds both ran."""
    values = row.values()
    seeds = sorted(set(values) & set(reference))
    return paired_difference([values[s][key] for s in seeds], [reference[s][key] for s in seeds]), seeds


def _family_differences(compared: list[_Row], reference: dict[int, dict[str, float]],
                        confidence: float) -> list[dict[str, dict[str, Any]]]:
    """Each compared row's differences per metric: the mean, its simultaneous interval at `confidence`, the
    seeds, the paired t test's p-value and its Holm adjustment over the compared rows."""
    differences: list[dict[str, dict[str, Any]]] = [{} for _ in compared]
    for key, _ in COMPARE_METRICS:
        tests = [_paired(row, reference, key) for row in compared]
        adjusted = holm([1.0 if test.p_value is None else test.p_value for test, _ in tests])
        for found, (test, seeds), p_holm in zip(differences, tests, adjusted):
            half = test.half_width(confidence)
            found[key] = {"mean": test.mean, "half_width": half, "seeds": seeds,
                          "contains_zero": half is None or abs(test.mean) <= half,
                          "p_value": test.p_value, "p_holm": p_holm, "confidence": confidence}
    return differences


def across_studies(per_study: list[list[_Row]], baseline: str | None = None) -> Table:
    """Several studies evaluated on the same seeds: each study's tuned configuration against one reference
    (`_reference`), paired on the seeds both ran (pipeline.compare.stats.paired_difference), with Bonferroni
    simultaneous intervals and Holm-adjusted p-values over the comparisons; runs several studies share are
    one row."""
    studies = [rows[0].studies[0].name for rows in per_study]
    rows = _merged(per_study)
    reference = _reference(rows, studies, baseline)
    against = reference.values()
    compared = [r for r in rows if r.variant == TUNED and r is not reference and set(r.runs) & set(against)]
    confidence = simultaneous_confidence(len(compared))
    differences = dict(zip(map(id, compared), _family_differences(compared, against, confidence)))
    tuned = {r.studies[0].name: r.params for r in rows if r.variant == TUNED}
    shown = [shown_params(r, tuned.get(r.studies[0].name)) for r in rows]
    label = _label(reference)
    table = Table("Evaluation over seeds", _headers(label, any(shown)), [])
    for row, params in zip(rows, shown):
        _add_row(table, row, differences.get(id(row), {}), label, params, any(shown))
    table.notes.append(
        f"Test accuracies in %: mean ± half-width of the {CONFIDENCE:.0%} Student t interval over seeds; smallest "
        f"class is the class with the fewest training examples. Each study's tuned configuration is compared "
        f"with {label}, paired on the seeds both ran; with {len(compared)} comparison(s) the difference intervals "
        f"hold together ({confidence:.2%} each, Bonferroni) and the records give Holm-adjusted p-values; ~ marks "
        "an interval that contains 0 (no detectable difference).")
    if any(len(r.studies) > 1 for r in rows):
        table.notes.append("A variant several studies share (the same settings, seeds and results: trained once) "
                           "is one row naming them all.")
    other_data = [r.studies[0].name for r in compared if not _same_data(r, reference)]
    if other_data:
        table.notes.append(f"{', '.join(other_data)}: trained on other data than {label}, so a difference pairs "
                           "seeds, not examples.")
    if any(shown):
        table.notes.append("parameters: a baseline's values that differ from its study's tuned configuration's "
                           "(or, where it has none, from their defaults); the records hold every parameter.")
    _selection_note(table)
    table.detail = seed_table(table)
    return table


def _same_data(row: _Row, reference: _Row) -> bool:
    """Whether two rows' runs on their common seeds trained and tested on the same data (split included)."""
    return all(row.runs[s].config.get("data") == reference.runs[s].config.get("data")
               for s in set(row.runs) & set(reference.runs))
