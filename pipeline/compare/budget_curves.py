"""Budget curves (Dodge et al. 2019, "Show your work"): the expected best validation score after n = 1..budget
trials, for every method of a campaign, so a reader sees whether a ranking holds with less tuning or needs more.

The estimator reads a study's N trained trials as draws from one distribution of validation scores: with the
scores sorted, v_1 <= ... <= v_N, the best of n draws with replacement is v_i with probability
(i/N)^n - ((i-1)/N)^n, so E[best of n] = sum_i v_i ((i/N)^n - ((i-1)/N)^n), and its standard deviation comes from
the same probabilities (the interval drawn is the mean +- one standard deviation, within the scores seen, as
allentune draws it). A Bayesian-optimisation study's trials are not independent draws: after the Sobol start each
is proposed from the ones before. The curve therefore answers "the best of n trials picked at random from those
this search ran", which is exact for its Sobol part and a pessimistic reading of the model-guided part (they were
picked to be good); beside it, each curve keeps the best-so-far in the order the search ran them, which is what the
search itself had after n trials. Pure Python: no torch, no Ax.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pipeline.store import CampaignRecord, Store, TrialStatus


def expected_max(values: Sequence[float], n: int) -> tuple[float, float]:
    """The expected maximum of `n` draws with replacement from `values` (Dodge et al. 2019, eq. 1) and its standard
    deviation."""
    if not values or n < 1:
        raise ValueError(f"need at least one value and n >= 1, got {len(values)} values and n = {n}")
    ordered = sorted(values)
    count = len(ordered)
    chances = [(i / count) ** n - ((i - 1) / count) ** n for i in range(1, count + 1)]
    mean = math.fsum(v * p for v, p in zip(ordered, chances))
    variance = math.fsum((v - mean) ** 2 * p for v, p in zip(ordered, chances))
    return mean, math.sqrt(max(0.0, variance))


@dataclass(frozen=True)
class BudgetCurve:
    """One method's expected best validation score after n = 1..budget trials, its interval (mean +- one standard
    deviation, within the scores seen) and the search's own best-so-far in the order it ran its trials."""

    method: str
    objective: str
    trials: int  # trained trials with a score, over every search replicate
    budget: int
    expected: tuple[float, ...]  # at n = 1..budget
    low: tuple[float, ...]
    high: tuple[float, ...]
    observed: tuple[float, ...]  # best so far after each trial, in the order replicate 0 ran them

    def at(self, n: int) -> float:
        """The expected best after `n` trials (1-based)."""
        return self.expected[n - 1]


def budget_curve(method: str, objective: str, scores: Sequence[float], run_order: Sequence[float],
                 budget: int) -> BudgetCurve:
    """The curve of `scores` (every trained trial's validation score) up to `budget` trials; `run_order`: one
    search's scores in the order it ran them."""
    expected, low, high = [], [], []
    for n in range(1, budget + 1):
        mean, spread = expected_max(scores, n)
        expected.append(mean)
        low.append(max(min(scores), mean - spread))
        high.append(min(max(scores), mean + spread))
    observed = [max(run_order[:k]) for k in range(1, len(run_order) + 1)]
    return BudgetCurve(method, objective, len(scores), budget, tuple(expected), tuple(low), tuple(high),
                       tuple(observed))


def campaign_curves(store: Store, campaign: CampaignRecord) -> list[BudgetCurve]:
    """Each method's curve of a one-task campaign (or one task's record), from its studies' stored trials: trained
    trials with a score (failed ones and epoch prefixes left out), every search replicate pooled."""
    curves = []
    budget = int(campaign.budget.get("trials", 0))
    for method in campaign.methods:
        scores: list[float] = []
        run_order: list[float] = []
        objective = ""
        for replicate, name in enumerate(campaign.study_names(method)):
            study = store.study(name)
            if study is None:
                continue
            objective = study.study.objective
            done = [t for t in store.trials(study.id) if t.ran and t.status != TrialStatus.FAILED]
            found = [t.metrics[objective] for t in sorted(done, key=lambda t: t.trial_index)
                     if t.metrics and objective in t.metrics]
            scores += found
            run_order += found if replicate == 0 else []
        if scores and budget:
            curves.append(budget_curve(method, objective, scores, run_order, budget))
    return curves


def half_budget(budget: int) -> int:
    """The budget the ranking is compared at: half the full one, at least one trial."""
    return max(1, budget // 2)


# Expected bests closer than this (half a point of the objective, an accuracy between 0 and 1) are a tie, not an
# order: on the few hundred validation images of a small data set one image moves the score by that much or more,
# and the expected best is an estimate from a handful of trials, so a smaller gap says nothing about which method
# tunes better.
ORDER_TOLERANCE = 0.005

Order = list[tuple[str, ...]]  # methods from best to worst, each entry one method or several tied
TIE = f"= marks expected bests within {100 * ORDER_TOLERANCE:g} points of each other, a tie"  # order_text's `=`


def order_at(curves: Sequence[BudgetCurve], n: int, tolerance: float = ORDER_TOLERANCE) -> Order:
    """The methods by expected best after `n` trials, highest first; a method within `tolerance` of the first of its
    group ties with it (one entry, in the campaign's order), so a swap by less than that is a tie, not a new order."""
    ranked = sorted(curves, key=lambda c: -c.at(n))
    groups: list[list[BudgetCurve]] = []
    for curve in ranked:
        if groups and groups[-1][0].at(n) - curve.at(n) <= tolerance:
            groups[-1].append(curve)
        else:
            groups.append([curve])
    position = {c.method: i for i, c in enumerate(curves)}
    return [tuple(sorted((c.method for c in group), key=position.__getitem__)) for group in groups]


def order_text(order: Order) -> str:
    """An order in words: `a > b = c`, `=` joining methods tied within the tolerance."""
    return " > ".join(" = ".join(group) for group in order)


def budget_note(curves: Sequence[BudgetCurve]) -> str:
    """In words: whether the order of the methods by expected best validation score at the full budget is the one at
    half of it, gaps within ORDER_TOLERANCE called ties; empty without two curves."""
    if len(curves) < 2:
        return ""
    budget = curves[0].budget
    half = half_budget(budget)
    full, halved = order_at(curves, budget), order_at(curves, half)
    if full == halved:
        said = f"{order_text(full)}; {TIE}" if any(len(group) > 1 for group in full) else order_text(full)
        return f"the order by expected best validation score is the same at {half} and {budget} trials ({said})"
    return (f"the order by expected best validation score changes with the budget: {order_text(halved)} at {half} "
            f"trials, {order_text(full)} at {budget}{f' ({TIE})' if any(len(g) > 1 for g in full + halved) else ''}"
            "; a method that gains with more trials may be harder to tune, not better")
