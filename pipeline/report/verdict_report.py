"""A campaign's verdict as tables: what each method was tuned to and what it cost, the ranking of the
methods, and each method against tuned ERM with the reading in words underneath."""
from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from pipeline.search.bounds import widening_lines
from pipeline.compare.across_tasks import MIN_TASKS, AcrossTasks
from pipeline.compare.budget_curves import half_budget
from pipeline.compare.decision import Axis
from pipeline.spec.campaign_config import REFERENCE
from pipeline.compare.stats import CONFIDENCE
from pipeline.report.tables import Table, parameter_text, percent
from pipeline.compare.verdict import (FEW_TEST_IMAGES, METRIC_LABELS, METRICS, MethodResult, Verdict, VerdictCell,
                                      VerdictWarning, accuracy_bounds)

SECONDARY = "secondary"  # the verdict column of a metric not decided on
ALL_EQUAL = "all equal"  # ... of a primary metric left out: every run of every method scored the same


def _parameters(result: MethodResult) -> str:
    return " | ".join(" ".join(f"{k}={parameter_text(v, 3)}" for k, v in p.items()) or "-"
                      for p in result.parameters) or "-"


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}" if minutes < 60 else f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def _interval(mean: float, half: float | None) -> str:
    """A mean accuracy and its 95% interval in %, the interval kept inside [0, 100]: `94.6 ± 1.0`, or its ends
    where the interval reaches past 0 or 100 (`99.2 [97, 100]`)."""
    bounds = accuracy_bounds(mean, half)
    if bounds is None or half is None:
        return percent(mean)
    if bounds != (mean - half, mean + half):
        return f"{percent(mean)} [{100 * bounds[0]:.0f}, {100 * bounds[1]:.0f}]"
    return f"{percent(mean)} ± {100 * half:.1f}"


def _end(value: float) -> str:
    """An interval's end in points: one decimal below 10, whole points above (the width of a terminal)."""
    points = 100 * value
    return f"{points:+.1f}" if abs(points) < 10 else f"{points:+.0f}"


def _difference(c: VerdictCell) -> str:
    text = f"{100 * c.difference:+.1f}"
    if c.low is None or c.high is None:
        return text + (" (exact)" if c.exact else "")
    if c.low == c.high:
        return text + " (exact)"
    return f"{text} [{_end(c.low)}, {_end(c.high)}]"


def _improvement(c: VerdictCell) -> str:
    """P(method > ERM) and its Clopper-Pearson interval, in %: `80 [44, 97]`."""
    i = c.p_improvement
    if i is None:
        return ""
    return f"{100 * i.probability:.0f} [{100 * i.low:.0f}, {100 * i.high:.0f}]"


CONFIGURATIONS = "*"  # marks a word about the configurations one search per method found, not the methods


def _word(c: VerdictCell, constant: bool = False) -> str:
    if c.outcome is None:
        return ALL_EQUAL if constant else SECONDARY
    return ("open" if c.open else c.outcome.value) + (CONFIGURATIONS if c.about == "configurations" else "")


def cell_columns(c: VerdictCell, constant: bool = False) -> list[str]:
    """A cell as the terminal and the page show it: the difference with its interval, P>ERM % and the word (`all
    equal` for a metric every run scored the same on, `constant`)."""
    return [_difference(c), _improvement(c), _word(c, constant)]


def cost_table(verdict: Verdict) -> Table:
    """What each method was tuned to and what tuning and re-training it cost."""
    table = Table(f"Campaign {verdict.campaign}: each method's tuned configuration and its cost",
                  ["method", "tuned parameters", "trials", "epochs", "search", "seeds", "re-training"], [])
    for m in verdict.methods:
        seeds = f"{m.searches}x{m.seeds}" if m.searches > 1 else str(m.seeds)
        table.rows.append([m.method, _parameters(m), f"{m.trials}/{m.budget}", str(m.epochs), _clock(m.search_seconds),
                           seeds, _clock(m.retrain_seconds)])
        table.records.append({"method": m.method, "studies": m.studies, "parameters": m.parameters,
                              "trials": m.trials, "budget": m.budget, "epochs": m.epochs,
                              "search_seconds": m.search_seconds, "seeds": m.seeds, "searches": m.searches,
                              "retrain_seconds": m.retrain_seconds, "missing": m.missing,
                              "bound_flags": [dataclasses.asdict(f) for f in m.bound_flags],
                              "widenings": [{"study": name, **w.to_dict()} for name, w in m.widenings]})
    table.notes.append("Every method searched with the same budget per search; epochs are all its trials' together; "
                       "search and re-training are training time (minutes:seconds); seeds: the pairs each search was "
                       "re-trained on (searches x pairs). Tuned parameters are the picked trial's searched values"
                       + (", one set per search." if verdict.replicates > 1 else "."))
    table.notes += [f"{m.method} ({name}): {line}" for m in verdict.methods
                    for name in dict.fromkeys(n for n, _ in m.widenings)
                    for line in widening_lines([w for n, w in m.widenings if n == name])]
    table.notes += [f.text(m.method) for m in verdict.methods for f in m.bound_flags]
    looks = verdict.decisions.looks
    if looks:
        compared = [m for m in verdict.methods if not m.missing]
        design = verdict.design
        if verdict.decisions.axis is Axis.SEARCHES:
            most = design.max_searches * len(compared)
            ran = sum(m.searches for m in compared)
            table.notes.append(f"Searches came in rounds planned for power (looks at {', '.join(map(str, looks))} "
                               f"searches per method, at most {design.max_searches}; the first {design.searches} "
                               f"planned {verdict.decisions.planned_pairs or design.seeds} pairs per search): {ran} "
                               f"searches of the {most} the campaign allows.")
        else:
            most = design.max_seeds * verdict.replicates * len(compared)
            ran = sum(m.seeds * verdict.replicates for m in compared)
            table.notes.append(f"Pairs came in rounds planned for power (looks at {', '.join(map(str, looks))} "
                               f"pairs, at most {design.max_seeds}): {ran} re-training runs of the {most} the "
                               "campaign allows.")
    return table


def ranking_table(verdict: Verdict) -> Table:
    """Per metric, the methods from best to worst mean; '>' where the lead is detectable, '≈' where not."""
    table = Table("Ranking on the seeds every method ran", ["metric", "ranking (> detectable lead, ≈ not)"], [])
    for ranking in verdict.pairs:
        text = ranking["order"][0] + f" {percent(ranking['means'][ranking['order'][0]])}"
        for step in ranking["steps"]:
            text += ((" > " if step["detectable"] else " ≈ ")
                     + f"{step['follower']} {percent(ranking['means'][step['follower']])}")
        table.rows.append([METRIC_LABELS[ranking["metric"]], text])
        table.records.append(ranking)
    if table.rows:
        table.notes.append(f"Means in % over the {verdict.pairs[0]['seeds']} runs every method has; each pair's paired "
                           "difference is tested, Holm-adjusted over all pairs and metrics at 5% family-wise. A family "
                           "of its own, unlike the verdict's: every pair of methods, every metric, on the pairs all "
                           "of them ran, and no smallest effect, so '≈' here is no evidence of equivalence, and a "
                           "'>' here and the verdict's word may differ; the verdict below decides.")
    return table


def json_record(record: Any) -> dict[str, Any]:
    """A verdict record (VerdictCell, ImprovementRecord) as its JSON: each field under the key it declares, a
    record inside as its own JSON, a word as its text."""
    shown: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.metadata.get("json") is None:
            continue
        value = getattr(record, f.name)
        shown[f.metadata["json"]] = (json_record(value) if dataclasses.is_dataclass(value)
                                     else value.value if isinstance(value, Enum) else value)
    return shown


def warning_record(w: VerdictWarning) -> dict[str, Any]:
    """A warning as its JSON: what it names, its unset fields left out."""
    return {k: v for k, v in dataclasses.asdict(w).items() if v is not None}


def verdict_table(verdict: Verdict) -> Table:
    """One row per method and metric: the mean over pairs, the difference to tuned ERM with its interval, the
    probability of improvement and the word (primary metrics) or `secondary`."""
    seeds = {m.seeds for m in verdict.methods if m.seeds}
    seeds_text = f"{'/'.join(map(str, sorted(seeds)))} pairs" if seeds else "no pairs yet"
    if verdict.replicates > 1:
        seeds_text = f"{verdict.replicates} searches x {seeds_text}"
    thin = _thin_metrics(verdict)
    primary = verdict.design.primary
    title = (f"Verdict of campaign {verdict.campaign}: every method tuned on equal footing against tuned ERM "
             f"({seeds_text})" if verdict.about == "methods" else
             f"Verdict of campaign {verdict.campaign}: the configurations one search per method found against tuned "
             f"ERM's ({seeds_text}); not the methods")
    table = Table(title, ["method", "metric", "mean ± 95%", "vs ERM", "P>ERM %", "verdict"], [])
    metrics = [*[m for m in primary if m in METRICS], *[m for m in METRICS if m not in primary]]
    for m in verdict.methods:
        record: dict[str, Any] = {"method": m.method, "studies": m.studies, "parameters": m.parameters,
                                  "seeds": m.seeds, "searches": m.searches, "missing": m.missing,
                                  "about": verdict.about,
                                  "search_luck": {k: v for k, v in m.luck.items()},
                                  "collapsed_runs": m.collapsed, "runs": m.runs,
                                  "same_as_erm": verdict.same_as_erm.get(m.method),
                                  "bound_flags": [dataclasses.asdict(f) for f in m.bound_flags],
                                  "widenings": [{"study": name, **w.to_dict()} for name, w in m.widenings],
                                  "rare_class": None if verdict.rare is None else dataclasses.asdict(verdict.rare),
                                  "means": {k: {"mean": v[0], "half_width": v[1],
                                                **({} if (b := accuracy_bounds(*v)) is None
                                                   else {"low": b[0], "high": b[1]})}
                                            for k, v in m.means.items()},
                                  "vs_erm": {},
                                  "warnings": [warning_record(w) for w in verdict.warnings  # the campaign's: ERM's row
                                               if w.method == m.method or (w.method is None
                                                                           and m.method == REFERENCE)]}
        for i, metric in enumerate(metrics):
            mean = _interval(*m.means[metric]) if metric in m.means else "-"
            c = verdict.records.get((m.method, metric))
            label = METRIC_LABELS[metric] + ("*" if metric in thin else "")
            row = [m.method if i == 0 else "", label, mean]
            if m.method == REFERENCE or c is None:
                row += ["", "", "reference" if m.method == REFERENCE and i == 0 else ("" if m.missing is None or i
                                                                                      else "no runs")]
            else:
                row += cell_columns(c, metric in verdict.decisions.constant)
                record["vs_erm"][metric] = json_record(c)
            table.rows.append(row)
        table.records.append(record)
    table.notes += _verdict_notes(verdict, thin)
    table.summary = f"Reading: {verdict.reading}"  # the last note: the page says it first
    return table


def _verdict_notes(verdict: Verdict, thin: dict[str, int]) -> list[str]:
    design, decisions = verdict.design, verdict.decisions
    family = len(decisions.family)
    effects = ", ".join(f"{METRIC_LABELS[m]} ±{100 * design.smallest_effect[m]:g}" for m in design.primary
                        if m not in decisions.constant)
    trimmed = f"{100 * design.trim:g}% trimmed " if design.trim else ""
    if verdict.replicates > 1:
        unit = f"the {verdict.replicates} searches (each search's {trimmed}mean difference over its pairs)"
    else:
        unit = "the paired runs" + (f" (Yuen's {trimmed}mean)" if design.trim else "")
    searches = decisions.axis is Axis.SEARCHES
    looks = ", ".join(map(str, decisions.looks)) or "none yet"
    spends = (f"Looks at {looks} searches per method, planned for 80% power after a pilot of {design.searches} that "
              f"decides nothing: each spends a share of {1 - CONFIDENCE:.0%} in proportion to the searches it adds"
              if searches else
              f"Looks at {looks} pairs, planned for 80% power: each spends a share of {1 - CONFIDENCE:.0%} in "
              "proportion to the pairs it adds")
    notes = [
        f"Accuracies in %; {_rare_text(verdict)}. Decided on {effects} points (the primary metrics and their "
        "smallest effects); the other rows are secondary: per-comparison 95% intervals, not decisions.",
        f"Each primary word is read off its interval over {unit}, simultaneous over the {family} primary cells: "
        "better or worse where it excludes 0, equivalent where two one-sided tests at the same level put the "
        "difference inside ± the smallest effect (the narrower interval: the JSON's equivalence_low and _high), "
        "undecided otherwise; exact: every unit differed by the same, so the exact sign test stands for "
        "the t interval. "
        f"{spends}, so the chance of any wrong word stays at most {1 - CONFIDENCE:.0%}.",
        *([f"*: rests on fewer than {FEW_TEST_IMAGES} test images of a class, where one image moves an accuracy by "
           f"{100 / max(1, min(thin.values())):.0f} points: its interval assumes a smooth measure and is not exact."]
          if thin else []),
        "P>ERM %: the share of paired runs where the method beats ERM (ties count half; "
        + ("each search's share, averaged" if verdict.replicates > 1 else "Bouthillier et al. 2021")
        + ") with its 95% Clopper-Pearson interval over the "
        + (f"{verdict.replicates} searches." if verdict.replicates > 1 else "paired runs."),
        *_luck_notes(verdict),
        f"What varies between the paired runs, so what the intervals contain: {verdict.varies}.",
        *([f"{CONFIGURATIONS}: about the configurations one search per method found, not the methods: another "
           "search finds others, and its luck is in none of these intervals (2 or more searches count it)."]
          if verdict.about == "configurations" else []),
        *[f"Warning: {w.text}." for w in verdict.warnings if w.kind != "on_bound"],
        f"Reading: {verdict.reading}"]
    return notes


def _luck_notes(verdict: Verdict) -> list[str]:
    """Each method's search luck (two or more searches) and its collapsed runs, in a line each."""
    lucky = [m for m in verdict.methods if m.luck]
    notes = []
    if lucky:
        shown = "; ".join(f"{m.method} " + ", ".join(f"{METRIC_LABELS[k]} {100 * v:.1f}"
                                                      for k, v in m.luck.items() if k in verdict.design.primary)
                          for m in lucky)
        notes.append("Search luck, the standard deviation of a search's tuned configuration from search to search "
                     f"beyond its pairs' noise (points, from each method's own runs): {shown}.")
    fallen = [m for m in verdict.methods if m.collapsed]
    if fallen:
        notes.append("Collapsed runs (trimmed out of the units, counted here: a method that collapses more often is "
                     "worse in a way the difference does not show): "
                     + ", ".join(f"{m.method} {m.collapsed} of {m.runs}" for m in fallen) + ".")
    return notes


def _rare_text(verdict: Verdict) -> str:
    """`rare class = '3' (5 training, 37 validation and 35-38 test images per run)`: which class, on how much."""
    rare = verdict.rare
    if rare is None:
        return "rare class = the class with the fewest training examples"

    def span(counts: tuple[int, int] | None) -> str:
        return "?" if counts is None else str(counts[0]) if counts[0] == counts[1] else f"{counts[0]}-{counts[1]}"

    if rare.test is None:
        return f"rare class = {rare.name!r} ({span(rare.train)} training images per run)"
    return (f"rare class = {rare.name!r} ({span(rare.train)} training, {span(rare.val)} validation and "
            f"{span(rare.test)} test images per run)")


def _thin_metrics(verdict: Verdict) -> dict[str, int]:
    """The metrics resting on fewer than FEW_TEST_IMAGES test images of a class, with that count."""
    rare = verdict.rare
    thin = {}
    if rare is not None and rare.test is not None and rare.test[0] < FEW_TEST_IMAGES:
        thin["smallest_class_accuracy"] = rare.test[0]
    if rare is not None and rare.fewest_test is not None and rare.fewest_test < FEW_TEST_IMAGES:
        thin["test_worst_class_accuracy"] = rare.fewest_test
    return thin


def budget_table(verdict: Verdict) -> Table:
    """Each method's expected best validation score after 1, half the budget and the full budget of trials (Dodge
    et al. 2019), and the best its search had after the full budget."""
    budget = verdict.curves[0].budget if verdict.curves else 0
    half = half_budget(budget)
    steps = sorted({1, half, budget})
    table = Table(f"Expected best validation score after n trials, campaign {verdict.campaign}",
                  ["method", *[f"n={n}" for n in steps], "search's best"], [])
    for c in verdict.curves:
        table.rows.append([c.method, *[f"{percent(c.at(n))} ({100 * c.low[n - 1]:.1f}-{100 * c.high[n - 1]:.1f})"
                                       for n in steps], percent(c.observed[-1]) if c.observed else "-"])
        table.records.append({"method": c.method, "objective": c.objective, "trials": c.trials, "budget": c.budget,
                              "n": list(range(1, c.budget + 1)), "expected": list(c.expected), "low": list(c.low),
                              "high": list(c.high), "observed": list(c.observed)})
    if verdict.curves:
        objective = verdict.curves[0].objective
        table.notes += [
            f"{objective} in %: the expected best of n trials drawn from each method's trained trials (Dodge et al. "
            "2019), (mean - sd to mean + sd) within the scores seen; search's best: the best its own search had. The "
            "search's trials are not independent draws (after the Sobol start each is chosen from the ones before): "
            "the curve reads them as if picked at random from those run, a pessimistic reading of the model-guided "
            "ones.", *([f"Budget: {verdict.budget_note}."] if verdict.budget_note else [])]
    return table


def verdict_tables(verdict: Verdict) -> list[Table]:
    """The cost table, the ranking, the verdict with its warnings and reading, then the budget curves' table."""
    return [t for t in (cost_table(verdict), ranking_table(verdict), verdict_table(verdict), budget_table(verdict))
            if t.rows]


def across_tables(result: AcrossTasks) -> list[Table]:
    """Every task's verdict tables, then the ranking over the tasks and each method against ERM over them, with
    the reading across tasks at the bottom."""
    tables = [t for task in result.tasks for t in verdict_tables(result.verdicts[task])]
    count = len(result.tasks)
    ranks = Table(f"Campaign {result.campaign} across its {count} tasks: mean rank of each method (1 = best)",
                  ["metric", "mean ranks", "test"], [])
    for r in result.rankings:
        shown = ", ".join(f"{m} {r.mean_ranks[m]:.2f}" for m in r.methods)
        if r.refusal:
            test = "not tested"
        else:
            name = "Friedman" if r.test == "friedman" else "Wilcoxon"
            test = f"{name} p={r.p_value:.3f}" + ("" if r.critical_difference is None
                                                  else f", CD {r.critical_difference:.2f}")
        ranks.rows.append([METRIC_LABELS[r.metric], shown or "-", test])
        ranks.records.append({"metric": r.metric, "methods": r.methods, "mean_ranks": r.mean_ranks,
                              "scores": r.scores, "test": r.test, "statistic": r.statistic, "p_value": r.p_value,
                              "critical_difference": r.critical_difference,
                              "differ": [list(pair) for pair in r.differ], "refusal": r.refusal or None})
    refusals = sorted({r.refusal for r in result.rankings if r.refusal})
    ranks.notes += [
        "Per task, each method's mean over the pairs every method ran; ranked per task, then averaged. The test "
        f"(at least {MIN_TASKS} tasks; nonparametric): autorank's Friedman with the Nemenyi critical difference (CD: "
        "two methods differ where their mean ranks are further apart), or for two methods scipy's two-sided "
        "Wilcoxon signed-rank test; at 5%.",
        *[f"Not tested: {text}." for text in refusals]]
    versus = Table(f"Campaign {result.campaign} across its {count} tasks: each method against tuned ERM",
                   ["method", "metric", "vs ERM [95%]", "P>ERM % [95%]"], [])
    for a in result.aggregates:
        versus.rows.append([a.method, METRIC_LABELS[a.metric],
                            f"{100 * a.difference:+.1f} [{_end(a.low)}, {_end(a.high)}]",
                            f"{100 * a.improvement:.0f} [{100 * a.improvement_low:.0f}, "
                            f"{100 * a.improvement_high:.0f}]"])
        versus.records.append(dataclasses.asdict(a))
    versus.notes += [
        "vs ERM: the mean over tasks of each task's mean paired difference, in points; P>ERM: per task the share of "
        "pairs of a method's run and ERM's that the method wins (ties half), averaged over tasks (rliable's "
        "estimators); intervals: 95% stratified bootstrap, resampling within each task (Agarwal et al. 2021). They "
        "count the runs' spread within the tasks, not the choice of tasks.",
        f"Reading across tasks: {result.reading or 'nothing to compare yet.'}"]
    versus.summary = versus.notes[-1]
    return tables + [t for t in (ranks, versus) if t.rows]
