"""Is the verdict calibrated? (`robust-tune bench verdict`) Whole campaigns of the decision procedure
(pipeline/compare/decision.py: the pilot, the rounds of searches or pairs, their planning and stopping, the family,
equivalence, the trimmed units) simulated under a generative model of the confirmation runs whose truth is known
(pipeline/bench/verdict_model.py: the split, the seed, method by split, each method's search luck, the test images a
pair's runs share, runs that collapse), and what the verdicts got right: the wrong words, the power and the share
decided, the coverage of every interval the verdict prints and the runs it spent.

A scenario gives every compared method the same true difference, a multiple of each metric's smallest effect
(TRUTHS); the campaign's values up to the design's caps go to decide(), which uses only what the campaign would have
trained. Torch-free: numpy draws, decide() decides (most of a simulation's time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pipeline.bench.verdict_model import (METRIC_LABELS, POINT, Model, Truth, as_values, draw_accuracies,
                                          scenario_truth, TRUTH_DRAWS)
from pipeline.compare.decision import Axis, Decisions, Outcome, Values, decide
from pipeline.compare.verdict import accuracy_bounds, method_mean
from pipeline.report.tables import Table

TRUTHS = (0.0, 0.5, 1.0, 2.0)  # the scenarios: every compared method's true difference, in smallest effects
PRINTED = 0.0005  # the verdict prints to 0.1 point: an interval's end within half of that holds a truth
COVERAGES = {  # the intervals the verdict prints, by their label here
    "primary": "difference (cell)",  # a primary cell's simultaneous interval
    "family": "difference (family)",  # every primary cell's at once
    "secondary": "secondary 95%",  # a secondary metric's difference
    "improvement": "P>ERM 95%",  # Clopper-Pearson's, primary and secondary cells
    "mean": "mean ± 95%",  # each method's mean accuracy, a t interval over its runs (or searches)
}


# --- one campaign's verdict, scored ------------------------------------------------------------------------------

def word_truth(truth: Truth, key: tuple[str, str], smallest: float) -> float:
    """The true difference a cell's word is judged against: the expected difference in accuracy, which clipping at
    0 or 100% moves off the model's shift (far below it near the ceiling); the shift itself where the two agree to
    the printed precision (a method's extra spread moves a clipped mean by a hair: no difference at a shift of 0,
    exactly the smallest effect at a shift of one)."""
    shift, expected = truth.multiple * smallest, truth.difference[key]
    return shift if abs(expected - shift) <= PRINTED else expected


def wrong(outcome: Outcome | None, truth: float, smallest: float) -> bool:
    """Whether a word is wrong for a true difference `truth`: better where it is not above 0, worse where it is
    not below, equivalent where it is not inside (-smallest, +smallest)."""
    if outcome is Outcome.BETTER:
        return truth <= 0
    if outcome is Outcome.WORSE:
        return truth >= 0
    if outcome is Outcome.EQUIVALENT:
        return abs(truth) >= smallest
    return False


def _covers(low: float | None, high: float | None, truth: float) -> bool | None:
    """Whether [low, high] holds the truth to the precision the verdict prints (PRINTED); None where it prints no
    interval."""
    if low is None or high is None:
        return None
    return low - PRINTED <= truth <= high + PRINTED


@dataclass(frozen=True)
class Scored:
    """One simulated campaign: each primary cell's word, for each interval kind whether each printed interval held
    its truth (None: none printed), and what it spent: pairs per search and searches per method."""

    words: dict[tuple[str, str], Outcome]
    covers: dict[str, list[bool | None]]
    pairs: dict[str, int]
    searches: dict[str, int]


def score(model: Model, decisions: Decisions, values: Values, truth: Truth) -> Scored:
    """What one campaign's verdict got right against the truth."""
    covers: dict[str, list[bool | None]] = {kind: [] for kind in COVERAGES}
    words = {}
    for key, cell in decisions.cells.items():
        words[key] = cell.outcome or Outcome.UNDECIDED
        covers["primary"].append(_covers(cell.low, cell.high, truth.difference[key]))
    shown = [c for c in covers["primary"] if c is not None]
    covers["family"].append(all(shown) if shown else None)
    for key, cell in decisions.secondary.items():
        covers["secondary"].append(_covers(cell.low, cell.high, truth.difference[key]))
    for key, cell in [*decisions.cells.items(), *decisions.secondary.items()]:
        if cell.improvement is not None:
            covers["improvement"].append(_covers(cell.improvement.low, cell.improvement.high, truth.improvement[key]))
    for method in model.methods:
        searches = decisions.searches.get(method, 0)
        keys = [(r, s) for r in range(searches) for s in range(decisions.pairs.get(method, 0))]
        for m in model.metrics:
            runs = {k: values[method][m.key][k] for k in keys}
            if len(runs) >= 2:  # the interval the verdict prints
                bounds = accuracy_bounds(*method_mean(runs, searches, model.trim))
                low, high = (None, None) if bounds is None else bounds
                covers["mean"].append(_covers(low, high, truth.accuracy[(method, m.key)]))
    return Scored(words, covers, dict(decisions.pairs), dict(decisions.searches))


def simulate_campaign(model: Model, truth: Truth, seed: int, index: int) -> Scored:
    """Campaign `index` of the scenario: drawn from its own generator (the same whatever process runs it),
    decided, scored."""
    rng = np.random.default_rng([seed, int(round(1000 * truth.multiple)), index])
    values = as_values(model, draw_accuracies(model, truth.multiple, rng))
    names = [m.key for m in model.metrics]
    return score(model, decide(values, model.methods, model.design(), secondary=names), values, truth)


# --- many campaigns, summarised ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rate:
    """A share (or a mean) over the simulated campaigns with its Monte Carlo standard error; `units` counted."""

    value: float
    se: float
    units: int


def ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Rate:
    """sum(numerators) / sum(denominators) over campaigns, its standard error by the campaigns as clusters (the
    cells of one campaign share its draws): the ratio estimator's linearisation."""
    x, n = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    total, campaigns = n.sum(), len(n)
    if total == 0:
        return Rate(math.nan, math.nan, 0)
    value = float(x.sum() / total)
    if campaigns < 2:
        return Rate(value, math.nan, int(total))
    residual = x - value * n
    se = math.sqrt(float(np.sum(residual ** 2)) * campaigns / (campaigns - 1)) / total
    return Rate(value, se, int(total))


def share(flags: Sequence[bool]) -> Rate:
    """The share of campaigns where `flags` holds."""
    return ratio([float(f) for f in flags], [1.0] * len(flags))


@dataclass(frozen=True)
class Scenario:
    """The verdicts of many simulated campaigns at one true difference."""

    multiple: float
    campaigns: int
    any_wrong: Rate  # campaigns with any wrong word: the family-wise false-positive rate at a true difference of 0
    wrong_cells: Rate  # cells with a wrong word
    false_equivalent: Rate  # campaigns with a wrong `equivalent` (at a true difference of a smallest effect or more)
    correct: dict[tuple[str, str], Rate]  # per cell: decided, and rightly
    decided: dict[tuple[str, str], Rate]  # per cell: decided, whatever the word
    words: dict[tuple[str, str], dict[str, float]]  # per cell: the share of each word
    coverage: dict[str, Rate]  # per interval kind (COVERAGES)
    missing: dict[str, int]  # per interval kind: intervals the verdict could not give (too few units)
    pairs: dict[str, Rate]  # per method: the mean pairs per search it was compared on
    searches: dict[str, Rate]  # per method: the mean searches it was compared on


def summarise(model: Model, truth: Truth, scored: list[Scored]) -> Scenario:
    """One scenario's rates over its campaigns."""
    multiple, smallest = truth.multiple, {m.key: m.smallest for m in model.metrics}

    def bad(key: tuple[str, str], outcome: Outcome) -> bool:
        return wrong(outcome, word_truth(truth, key, smallest[key[1]]), smallest[key[1]])

    cells = list(scored[0].words) if scored else []
    correct, decided, words = {}, {}, {}
    for key in cells:
        got = [s.words.get(key, Outcome.UNDECIDED) for s in scored]
        correct[key] = share([o is not Outcome.UNDECIDED and not bad(key, o) for o in got])
        decided[key] = share([o is not Outcome.UNDECIDED for o in got])
        words[key] = {o.value: sum(g is o for g in got) / len(got) for o in Outcome}
    coverage, missing = {}, {}
    for kind in COVERAGES:
        coverage[kind] = ratio([sum(c is True for c in s.covers[kind]) for s in scored],
                               [sum(c is not None for c in s.covers[kind]) for s in scored])
        missing[kind] = sum(c is None for s in scored for c in s.covers[kind])
    return Scenario(
        multiple, len(scored),
        any_wrong=share([any(bad(k, o) for k, o in s.words.items()) for s in scored]),
        wrong_cells=ratio([sum(bad(k, o) for k, o in s.words.items()) for s in scored],
                          [len(s.words) for s in scored]),
        false_equivalent=share([any(o is Outcome.EQUIVALENT and bad(k, o) for k, o in s.words.items())
                                for s in scored]),
        correct=correct, decided=decided, words=words, coverage=coverage, missing=missing,
        pairs={method: ratio([s.pairs.get(method, 0) for s in scored], [1.0] * len(scored))
               for method in model.methods},
        searches={method: ratio([s.searches.get(method, 0) for s in scored], [1.0] * len(scored))
                  for method in model.methods})


def _job(arguments: tuple[Model, Truth, int, range]) -> list[Scored]:
    """A batch of one scenario's campaigns (one process's share)."""
    model, truth, seed, indices = arguments
    return [simulate_campaign(model, truth, seed, i) for i in indices]


@dataclass(frozen=True)
class Simulation:
    """bench verdict's answer: the model simulated and each scenario's verdicts."""

    model: Model
    campaigns: int
    seed: int
    scenarios: list[Scenario]
    seconds_per_campaign: float


def simulate(model: Model, campaigns: int, seed: int = 0, truths: Sequence[float] = TRUTHS, processes: int = 1,
             report: Callable[[str], None] = lambda message: None, truth_draws: int = TRUTH_DRAWS) -> Simulation:
    """`campaigns` campaigns of each scenario in `truths` (true differences in smallest effects), here or spread
    over `processes` processes; the numbers do not depend on where a campaign ran."""
    import time

    started, scenarios = time.perf_counter(), []
    for multiple in truths:
        truth = scenario_truth(model, multiple, seed, truth_draws)
        step = max(1, math.ceil(campaigns / max(1, 4 * processes)))
        batches = [(model, truth, seed, range(i, min(campaigns, i + step))) for i in range(0, campaigns, step)]
        scored: list[Scored] = []
        for done in _run(batches, processes):
            scored += done
            report(f"true difference {multiple:g}x the smallest effect: {len(scored)}/{campaigns} campaigns")
        scenarios.append(summarise(model, truth, scored))
    seconds = (time.perf_counter() - started) / max(1, campaigns * len(truths))
    return Simulation(model, campaigns, seed, scenarios, seconds)


def _run(batches: list[Any], processes: int) -> Any:
    """Each batch's campaigns, in order: here, or on `processes` spawned processes."""
    if processes <= 1:
        for batch in batches:
            yield _job(batch)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(_job, batches)


# --- the tables --------------------------------------------------------------------------------------------------

def _points(value: float) -> str:
    """A fraction in points, one decimal."""
    return f"{value / POINT:.1f}"


def _pm(rate: Rate, scale: float = 100.0, digits: int = 1) -> str:
    """A rate as `value ± se` (percent by default); '-' where nothing was counted."""
    if rate.units == 0 or math.isnan(rate.value):
        return "-"
    se = "" if math.isnan(rate.se) else f" ± {scale * rate.se:.{digits}f}"
    return f"{scale * rate.value:.{digits}f}{se}"


def _truth_label(multiple: float) -> str:
    """A true difference as a column header: 0, 0.5x, 1x, ..."""
    return "0" if multiple == 0 else f"{multiple:g}x"


def _record(rate: Rate) -> dict[str, float | int | None]:
    """A rate in a JSON record: its value, Monte Carlo standard error and the units it counts."""
    def number(x: float) -> float | None:
        return None if math.isnan(x) else float(x)

    return {"value": number(rate.value), "se": number(rate.se), "units": rate.units}


def _span(values: Sequence[float]) -> str:
    """A per-method figure in points: one value, or its range over the methods."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    return _points(low) if round(low / POINT, 1) == round(high / POINT, 1) else f"{_points(low)}-{_points(high)}"


def design_text(model: Model) -> str:
    """The campaign's design simulated, in words."""
    compared = len(model.methods) - 1
    methods = f"{compared} method{'s' if compared > 1 else ''} against ERM ({', '.join(model.methods[1:])})"
    if model.design().axis is Axis.SEARCHES:
        runs = (f"a pilot of {model.searches} searches per method of {model.seeds} pairs each plans the pairs per "
                f"search (up to {model.max_seeds}) and the searches, {model.searches_per_round} a round up to "
                f"{model.max_searches}")
    else:
        runs = (f"{model.searches} search{'es' if model.searches > 1 else ''} each; pairs {model.seeds}, then "
                f"{model.seeds_per_round} a round up to {model.max_seeds}")
    unit = f"{100 * model.trim:g}% trimmed units" if model.trim else "means"
    collapse = ", ".join(f"{100 * model.collapse_rate(j):.1f}" for j in range(len(model.methods)))
    return (f"{methods}; {runs}; {unit}; alpha {100 * model.alpha:g}%; the normal terms of a run correlated "
            f"{model.correlation:.2f} across its metrics; a pair's runs share their test images (correlation "
            f"{model.image_correlation:.2f}); runs that collapse (%, ERM first): {collapse}.")


def figures_table(model: Model, source: str, notes: Sequence[str] = ()) -> Table:
    """The figures simulated, per metric, in points: where they come from and what the campaign's design is."""
    rows, records = [], []
    for m in model.metrics:
        primary = m.key in model.primary
        rows.append([METRIC_LABELS[m.key], "primary" if primary else "second.", _points(m.level),
                     str(m.test_images or "-"), _points(m.split_sd), _points(m.seed_sd), _span(m.interaction_sd),
                     _span(m.search_sd), _points(m.smallest)])
        records.append({"metric": m.key, "primary": primary, "level": m.level, "test_images": m.test_images,
                        "split_sd": m.split_sd, "seed_sd": m.seed_sd, "interaction_sd": list(m.interaction_sd),
                        "search_sd": list(m.search_sd), "smallest_effect": m.smallest, "collapsed": m.collapsed})
    legend = ("Points: ERM = ERM's expected accuracy before the noise; images = the test images its binomial "
              "noise rests on; then standard deviations: the split (shared by a pair's methods), the training seed "
              "(each run's own), method x split (a method's difference to ERM moving with the split), search (a "
              "search's luck, shared by its pairs; ERM's and each method's); effect = the smallest effect that "
              "matters (a secondary metric's only scales its true differences).")
    return Table(f"Figures simulated ({source})", ["metric", "role", "ERM", "images", "split", "seed",
                                                   "m x split", "search", "effect"],
                 rows, [design_text(model), *notes, legend], records)


def errors_table(simulation: Simulation) -> Table:
    """The wrong words per true difference: the family-wise false-positive rate at 0, a false equivalent at 1x."""
    rows, records = [], []
    for s in simulation.scenarios:
        label = "0 (none)" if s.multiple == 0 else f"{s.multiple:g}x smallest"
        rows.append([label, _pm(s.any_wrong), _pm(s.false_equivalent), _pm(s.wrong_cells, digits=2)])
        records.append({"truth": s.multiple, "campaigns": s.campaigns, "any_wrong": _record(s.any_wrong),
                        "false_equivalent": _record(s.false_equivalent), "wrong_cells": _record(s.wrong_cells)})
    notes = [f"Share of {simulation.campaigns} simulated campaigns per true difference (every compared method's, "
             "in smallest effects), ± its Monte Carlo standard error. A wrong word: better where the truth is not "
             "above 0, worse where it is not below, equivalent where it is not inside ± the smallest effect. At 0 "
             "any wrong word is the family-wise false-positive rate; at 1x a wrong equivalent is the false "
             "equivalent. The design holds every row to at most alpha."]
    return Table("Wrong words (%)", ["true difference", "any wrong word", "wrong equivalent", "wrong cells"], rows,
                 notes, records)


def power_table(simulation: Simulation) -> Table:
    """Per primary cell, the share decided rightly at each true difference above 0, and the share decided."""
    scenarios = [s for s in simulation.scenarios if s.multiple > 0]
    cells = list(scenarios[0].correct) if scenarios else []
    rows, records = [], []
    for key in cells:
        rows.append([key[0], METRIC_LABELS.get(key[1], key[1]),
                     *[f"{_pm(s.correct[key], digits=0)} ({100 * s.decided[key].value:.0f})" for s in scenarios]])
        for s in scenarios:
            records.append({"method": key[0], "metric": key[1], "truth": s.multiple, "right": _record(s.correct[key]),
                            "decided": _record(s.decided[key]), "words": s.words[key]})
    notes = ["Right: better, or equivalent where the truth is inside ± the smallest effect (at 0.5x); undecided is "
             "never right. In brackets, the share decided (any word). --format json has the share of each word."]
    return Table("Power: cells decided rightly (%)", ["method", "metric", *[_truth_label(s.multiple)
                                                                            for s in scenarios]], rows, notes, records)


def coverage_table(simulation: Simulation) -> Table:
    """Per interval kind the verdict prints, the share of its intervals that held the truth, per true difference."""
    model = simulation.model
    family = len(model.primary) * (len(model.methods) - 1)
    nominal = {"primary": f"{100 - 100 * model.alpha / max(1, family):.2f}+", "family": f"{100 - 100 * model.alpha:g}+",
               "secondary": "95", "improvement": "95+", "mean": "95"}
    rows, records = [], []
    for kind, label in COVERAGES.items():
        rows.append([label, *[_pm(s.coverage[kind]) for s in simulation.scenarios], nominal[kind]])
        for s in simulation.scenarios:
            records.append({"interval": kind, "truth": s.multiple, "coverage": _record(s.coverage[kind]),
                            "not_printed": s.missing[kind], "nominal": nominal[kind]})
    notes = ["Share of the intervals printed that held the truth, ± its Monte Carlo standard error. difference: "
             "a primary cell's simultaneous interval (its look's share of alpha, Bonferroni over the family), one "
             "at a time (cell) and all of a campaign's at once (family); secondary 95%: the other metrics' "
             "differences; P>ERM 95%: Clopper-Pearson's interval of P(method beats ERM on a pair); mean ± 95%: "
             "each method's mean accuracy over its runs (Student's t). Truth: the model's expected difference "
             "or accuracy, and its P(method beats ERM), ties half, from a large draw. An interval the verdict "
             "could not give (too few units) is left out."]
    if model.max_searches == 1 and any(max(m.search_sd) > 0 for m in model.metrics):
        notes.append("With one search per method its luck is in every pair: no interval can contain it, so they "
                     "cover the search's result, not the method's (replicates = 2 or more count it).")
    return Table("Coverage (%)", ["interval", *[_truth_label(s.multiple) for s in simulation.scenarios], "nominal"],
                 rows, notes, records)


def pairs_table(simulation: Simulation) -> Table:
    """Per method, the mean searches and pairs per search the campaigns spent, per true difference."""
    rows, records = [], []
    model = simulation.model
    for method in model.methods:
        rows.append([method, *[f"{s.searches[method].value:.1f} x {s.pairs[method].value:.1f}"
                               for s in simulation.scenarios]])
        records += [{"method": method, "truth": s.multiple, "pairs": _record(s.pairs[method]),
                     "searches": _record(s.searches[method])} for s in simulation.scenarios]
    notes = [f"Mean searches x pairs per search (at most {model.max_searches} x {model.max_seeds}) each method was "
             f"trained on, ERM the most; {1000 * simulation.seconds_per_campaign:.0f} ms a simulated campaign here."]
    return Table("Runs used", ["method", *[_truth_label(s.multiple) for s in simulation.scenarios]], rows, notes,
                 records)


def verdict_bench_tables(simulation: Simulation, source: str, notes: Sequence[str] = ()) -> list[Table]:
    """bench verdict's tables: the figures, the wrong words, the power, the coverage, the pairs."""
    return [figures_table(simulation.model, source, notes), errors_table(simulation), power_table(simulation),
            coverage_table(simulation), pairs_table(simulation)]
