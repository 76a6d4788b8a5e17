"""A campaign's verdict as tables: what each method was tuned to and what it cost, the ranking of the
methods, and each method against tuned ERM with the reading in words underneath."""
from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.compare.across_tasks import MIN_TASKS, AcrossTasks
from pipeline.compare.budget_curves import half_budget
from pipeline.spec.campaign_config import REFERENCE
from pipeline.compare.stats import CONFIDENCE
from pipeline.report.tables import Table, parameter_text, percent
from pipeline.compare.verdict import (FEW_TEST_IMAGES, METRIC_LABELS, METRICS, NO_DIFFERENCE, Comparison, MethodResult,
                              Verdict)

SHOWN_LABELS = {NO_DIFFERENCE: "none detected"}  # the terminal's word; the data keep the full phrase


def _parameters(result: MethodResult) -> str:
    return " | ".join(" ".join(f"{k}={parameter_text(v, 3)}" for k, v in p.items()) or "-"
                      for p in result.parameters) or "-"


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}:{seconds:02d}" if minutes < 60 else f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def _interval(mean: float, half: float | None) -> str:
    return percent(mean) + ("" if half is None else f" ± {100 * half:.1f}")


def _end(value: float) -> str:
    """An interval's end in points: one decimal below 10, whole points above (the width of a terminal)."""
    points = 100 * value
    return f"{points:+.1f}" if abs(points) < 10 else f"{points:+.0f}"


def _difference(c: Comparison) -> str:
    text = f"{100 * c.difference.mean:+.1f}"
    return text if c.low is None else f"{text} [{_end(c.low)}, {_end(c.high)}]"


def _improvement(c: Comparison) -> str:
    """P(method > ERM) and its bootstrap interval, in %: `80 [40, 100]`; `100 (n=3)` when every unit scored the
    same, so that resampling them gives no interval."""
    i = c.improvement
    if i is None:
        return ""
    if i.low == i.high:
        return f"{100 * i.probability:.0f} (n={i.units})"
    return f"{100 * i.probability:.0f} [{100 * i.low:.0f}, {100 * i.high:.0f}]"


def cost_table(verdict: Verdict) -> Table:
    """What each method was tuned to and what tuning and re-training it cost."""
    table = Table(f"Campaign {verdict.campaign}: each method's tuned configuration and its cost",
                  ["method", "tuned parameters", "trials", "epochs", "search", "seeds", "re-training"], [])
    for m in verdict.methods:
        table.rows.append([m.method, _parameters(m), f"{m.trials}/{m.budget}", str(m.epochs), _clock(m.search_seconds),
                           str(m.seeds), _clock(m.retrain_seconds)])
        table.records.append({"method": m.method, "studies": m.studies, "parameters": m.parameters,
                              "trials": m.trials, "budget": m.budget, "epochs": m.epochs,
                              "search_seconds": m.search_seconds, "seeds": m.seeds,
                              "retrain_seconds": m.retrain_seconds, "missing": m.missing,
                              "bound_flags": [dataclasses.asdict(f) for f in m.bound_flags]})
    table.notes.append("Every method searched with the same budget; epochs are all its trials' together; search "
                       "and re-training are training time (minutes:seconds). Tuned parameters are the best trial's "
                       "searched values"
                       + (", one set per search replicate." if verdict.replicates > 1 else "."))
    table.notes += [f.text(m.method) for m in verdict.methods for f in m.bound_flags]
    if len(verdict.looks) > 1:
        compared = [m for m in verdict.methods if not m.missing]
        most = verdict.looks[-1] * verdict.replicates * len(compared)
        ran = sum(m.seeds * verdict.replicates for m in compared)
        table.notes.append(f"Seeds came in rounds ({', '.join(map(str, verdict.looks))}): {ran} re-training runs of "
                           f"the {most} the campaign allows; the stopping rule saved {most - ran}.")
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
                           "difference is tested, Holm-adjusted over all pairs and metrics at 5% family-wise.")
    return table


def verdict_table(verdict: Verdict) -> Table:
    """One row per method and metric: the mean over seeds, the paired difference to tuned ERM with its
    simultaneous interval, the Holm-adjusted p-value and the verdict word."""
    seeds = {m.seeds for m in verdict.methods if m.seeds}
    seeds_text = f"{'/'.join(map(str, sorted(seeds)))} seeds" if seeds else "no seeds yet"
    if verdict.replicates > 1:
        seeds_text = f"{verdict.replicates} searches x {seeds_text}"
    thin = _thin_metrics(verdict)
    table = Table(f"Verdict of campaign {verdict.campaign}: every method tuned on equal footing against tuned ERM "
                  f"({seeds_text})", ["method", "metric", "mean ± 95%", "vs ERM (simult.)", "Holm p", "P>ERM %",
                                      "verdict"], [])
    for m in verdict.methods:
        record: dict[str, Any] = {"method": m.method, "studies": m.studies, "parameters": m.parameters,
                                  "seeds": m.seeds, "missing": m.missing,
                                  "same_as_erm": verdict.same_as_erm.get(m.method),
                                  "bound_flags": [dataclasses.asdict(f) for f in m.bound_flags],
                                  "rare_class": None if verdict.rare is None else dataclasses.asdict(verdict.rare),
                                  "means": {k: {"mean": v[0], "half_width": v[1]} for k, v in m.means.items()},
                                  "vs_erm": {}}
        for i, metric in enumerate(METRICS):
            mean = _interval(*m.means[metric]) if metric in m.means else "-"
            c = verdict.comparisons.get((m.method, metric))
            row = [m.method if i == 0 else "", METRIC_LABELS[metric] + ("*" if metric in thin else ""), mean]
            if m.method == REFERENCE or c is None:
                row += ["", "", "", "reference" if m.method == REFERENCE and i == 0 else ("" if m.missing is None or i
                                                                                          else "no runs")]
            elif m.method in verdict.same_as_erm:  # no degenerate interval: the words say what it is
                row += ["identical runs" if i == 0 else "", "", "", "is ERM" if i == 0 else ""]
            else:
                row += [_difference(c), f"{c.adjusted_p:.3f}", _improvement(c), SHOWN_LABELS.get(c.label, c.label)]
            if c is not None and m.method != REFERENCE:
                improvement = c.improvement
                record["vs_erm"][metric] = {
                    "difference": c.difference.mean, "low": c.low, "high": c.high, "p_value": c.difference.p_value,
                    "adjusted_p": c.adjusted_p, "level": c.level, "family": c.family, "seeds": c.seeds,
                    "units": c.difference.n, "verdict": c.label, "decided_by": c.how,
                    "p_improvement": None if improvement is None else {
                        "probability": improvement.probability, "low": improvement.low, "high": improvement.high,
                        "units": improvement.units},
                    "same_as_erm": m.method in verdict.same_as_erm}
            table.rows.append(row)
        table.records.append(record)
    family = max((c.family for c in verdict.comparisons.values()), default=0)
    unit = (f"the {verdict.replicates} searches (each search's mean difference over its pairs)"
            if verdict.replicates > 1 else "the paired runs")
    if len(verdict.looks) == 1:
        test = (f"Paired t test over {unit} per method and metric; p-values Holm-adjusted over the family of {family} "
                f"comparisons (methods x metrics), verdict at {1 - CONFIDENCE:.0%} family-wise; intervals are "
                f"simultaneous (Bonferroni, each at {100 * (1 - (1 - CONFIDENCE) / max(family, 1)):.2f}%).")
    else:
        test = (f"Paired t test over {unit}, seeds added in rounds at {', '.join(map(str, verdict.looks))}: each look "
                f"spends its share of {1 - CONFIDENCE:.0%} (O'Brien-Fleming-type alpha spending, Holm over the whole "
                "family at every look); a comparison is decided at the first look it crosses, or set aside when "
                "its trend could not cross by the last (futility); intervals are simultaneous at the deciding look.")
    table.notes += [
        f"Accuracies in %; {_rare_text(verdict)}. {test} The intervals are simultaneous over the family, so wider than "
        "report --compare's per-comparison 95% intervals of the same differences.",
        *([f"*: rests on fewer than {FEW_TEST_IMAGES} test images of a class, where one image moves an accuracy by "
           f"{100 / max(1, min(thin.values())):.0f} points: its interval assumes a smooth measure and is not exact."]
          if thin else []),
        "better / worse: a difference detected at that level; none detected: no difference detectable at this level "
        "(not evidence that there is none).",
        "P>ERM %: the share of paired runs where the method beats ERM (ties count half; "
        + ("each search's share, averaged" if verdict.replicates > 1 else "Bouthillier et al. 2021")
        + ") with a 95% percentile bootstrap interval over the "
        + (f"{verdict.replicates} searches" if verdict.replicates > 1 else "paired runs")
        + "; with few of them the interval cannot reach "
          "beyond the shares seen, and (n=N) means all N scored the same: no interval to give.",
        f"What varies between the paired runs, so what the intervals contain: {verdict.varies}.",
        f"Reading: {verdict.reading}"]
    return table


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
    """The cost table, the ranking, the verdict with its reading, then the budget curves' table."""
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
        "Per task, each method's mean over the pairs every method ran; ranked per task, then averaged. The test is "
        f"autorank's (at least {MIN_TASKS} tasks; nonparametric): Friedman with the Nemenyi critical difference (CD: "
        "two methods differ where their mean ranks are further apart), or Wilcoxon's signed-rank test for two "
        "methods; at 5%.",
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
    return tables + [t for t in (ranks, versus) if t.rows]
