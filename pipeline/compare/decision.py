"""Decisions by design: every primary (method, metric) cell of a campaign ends in better, worse, equivalent or
undecided, read off one simultaneous interval, with the confirmation pairs added in rounds planned for power.

The family is the primary cells: every method but ERM on each primary metric, less the metrics on which every run
of every method scored the same (nothing to compare: said once, left out). A look at n pairs spends the share
alpha * (n - n_before) / max_seeds of the error rate (a linear spending function: however the looks fall, their
shares add up to at most alpha) and draws each cell's interval at confidence 1 - share / m (Bonferroni over the
m cells). The word is read off that interval and the metric's smallest effect d:

    equivalent  the interval lies inside (-d, +d): two one-sided tests (Schuirmann 1987)
    better      the interval lies above 0 and reaches +d or beyond
    worse       the interval lies below 0 and reaches -d or beyond
    undecided   anything else: why, and about how many pairs would decide it

A wrong word needs its interval to miss the true difference, so the chance of any wrong word in the campaign is
at most the intervals' joint miss rate: at most alpha over all looks (the union bound). Differences without spread
(every unit the same) have no t interval: identical runs are ERM itself (equivalent), a constant non-zero
difference goes through the exact sign-flip test.

After each look, every cell still open plans the next one from its own spread: the pairs it needs for 80% power
at the level that look would have, to show a difference of d where its estimate is at least d/2 from 0 and
equivalence within +-d otherwise. The next look is the first round that reaches the largest need, up to
max_seeds (and within the training-time budget, when one is set). Futility sets a cell aside only when the budget
cannot decide it: its chance of any decision at max_seeds, at its estimated difference, is under FUTILE_BELOW.
A method gets the next round while one of its cells is open; a cell is tested at a look only when its method got
that look's pairs, so replaying the stored runs gives the decisions the campaign took.

With several search replicates the search is the unit: each replicate's mean difference over its pairs, a t
interval over the R searches, and the plan splits the variance into the searches' luck (which more pairs cannot
shrink) and the pairs' noise. Pure Python and scipy: no torch.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Mapping, Sequence

from pipeline.compare.stats import Improvement, paired_improvement, t_quantile

Key = tuple[int, int]  # (search replicate, pair)
Values = Mapping[str, Mapping[str, Mapping[Key, float]]]  # method -> metric -> key -> value in [0, 1]

POWER = 0.8  # the power each round is planned for
FUTILE_BELOW = 0.1  # a cell whose chance of any decision by max_seeds is under this is set aside
MOST_PAIRS = 1000  # how far the plan looks when it says how many pairs a cell would need


class Outcome(str, Enum):
    """The word a primary cell ends in."""

    BETTER = "better"
    WORSE = "worse"
    EQUIVALENT = "equivalent"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Design:
    """What a campaign decides on and how it may spend its pairs: the primary metrics, the smallest effect that
    matters on each (a fraction: 0.01 is one point), the rounds and the error rate."""

    primary: tuple[str, ...]
    smallest_effect: Mapping[str, float]
    seeds: int = 5  # the first round's pairs
    seeds_per_round: int = 5
    max_seeds: int = 30
    alpha: float = 0.05
    max_seconds: float | None = None  # the re-training's training time the rounds may spend, None: no limit

    def grid(self) -> list[int]:
        """The pair counts a look may fall at: the first round, each later round, and max_seeds."""
        return sorted(set(range(self.seeds, self.max_seeds, self.seeds_per_round)) | {self.max_seeds})

    def share(self, pairs: int, before: int) -> float:
        """The error rate a look at `pairs` spends after a look at `before` (linear spending)."""
        return self.alpha * (min(pairs, self.max_seeds) - before) / self.max_seeds


@dataclass(frozen=True)
class Cell:
    """One method against ERM on one metric: the difference, its interval and, for a primary cell, the word."""

    method: str
    metric: str
    mean: float  # the mean difference method - ERM over the units
    low: float | None  # the interval (simultaneous for a primary cell, 95% for a secondary one); None: none to give
    high: float | None
    confidence: float  # the interval's confidence
    pairs: int  # pairs per replicate the cell rests on
    units: int  # units of the test: the pairs, or the searches with several replicates
    outcome: Outcome | None  # None: a secondary cell, not a decision
    why: str = ""  # how it was decided, or why it is not
    needed: int | None = None  # pairs an undecided cell would need for 80% power (None: unknown or out of reach)
    exact: bool = False  # the sign-flip test's, not a t interval: the differences had no spread
    open: bool = False  # undecided only for now: the next planned round may decide it
    level: float = 0.0  # the error rate spent at the look that gave it
    family: int = 0  # primary cells
    smallest: float = 0.0  # the smallest effect that matters on the metric (a primary cell's)
    improvement: Improvement | None = None  # P(method > ERM) on the same pairs


@dataclass
class Decisions:
    """The replay of a campaign's looks on its stored runs: every cell as it stands, and what the campaign does
    next (`next_pairs` for `needing`; None: it is done)."""

    cells: dict[tuple[str, str], Cell]  # the primary cells
    secondary: dict[tuple[str, str], Cell]
    looks: list[int]
    family: list[tuple[str, str]]
    constant: list[str]  # metrics left out: every run of every method scored the same
    pairs: dict[str, int]  # pairs per replicate each method was compared on
    next_pairs: int | None = None
    needing: list[str] = field(default_factory=list)  # the methods the next round trains (ERM besides)
    round_runs: int = 0  # the runs the next round trains (every replicate, every method)
    round_seconds: float | None = None  # the next round's estimated training time (every replicate, every method)
    stopped: str = ""  # why no next round: "decided", "max_seeds", "time", "no runs"


def complete_pairs(values: Values, method: str, replicates: int) -> int:
    """How many pairs 0, 1, ... the method has stored for every replicate and metric."""
    metrics = values.get(method, {})
    if not metrics:
        return 0
    n = 0
    while all((r, n) in by_key for by_key in metrics.values() for r in range(replicates)):
        n += 1
    return n


def constant_metrics(values: Values, metrics: Sequence[str]) -> list[str]:
    """The metrics on which every stored run of every method has the same value (e.g. a class no run gets right)."""
    constant = []
    for metric in metrics:
        seen = {v for by_metric in values.values() for v in by_metric.get(metric, {}).values()}
        if len(seen) == 1:
            constant.append(metric)
    return constant


DIGITS = 12  # differences are rounded to this many decimals: counts of images that differ equally stay equal


def _units(values: Values, method: str, reference: str, metric: str, pairs: int, replicates: int) -> list[list[float]]:
    """The differences method - reference on pairs 0..pairs-1, one list per replicate. Rounded: accuracies are
    counts over a few images, and 18/37 - 19/37 and 0/37 - 1/37 differ in the 17th digit as floats, which a t
    interval would read as a spread of almost nothing."""
    mine, theirs = values[method][metric], values[reference][metric]
    return [[round(mine[(r, s)] - theirs[(r, s)], DIGITS) for s in range(pairs)] for r in range(replicates)]


def identical_runs(values: Values, method: str, reference: str, pairs: int, replicates: int) -> bool:
    """Whether the method's runs equal the reference's on every metric and pair: then it is the reference here
    (label smoothing tuned to alpha = 0), not a metric on which two methods happened to tie."""
    return all(values[method][metric][(r, s)] == values[reference][metric][(r, s)]
               for metric in values[method] for r in range(replicates) for s in range(pairs))


@dataclass(frozen=True)
class Spread:
    """The variance of a cell's differences, split for planning: the pairs' noise and the searches' luck."""

    mean: float
    within: float  # the variance of one pair's difference around its search's mean
    between: float  # the variance of the searches' luck (0 with one search)
    replicates: int

    def unit_sd(self, pairs: int) -> float:
        """The standard deviation of one unit at `pairs` pairs per replicate: a pair, or a search's mean."""
        if self.replicates == 1:
            return math.sqrt(self.within)
        return math.sqrt(self.between + self.within / pairs)

    def units(self, pairs: int) -> int:
        return pairs if self.replicates == 1 else self.replicates


def spread(by_replicate: list[list[float]]) -> Spread:
    """The mean difference and its variance components (one-way ANOVA, the between part floored at 0)."""
    replicates, pairs = len(by_replicate), len(by_replicate[0])
    flat = [d for rep in by_replicate for d in rep]
    mean = math.fsum(flat) / len(flat)
    if replicates == 1:
        return Spread(mean, statistics.variance(flat) if len(flat) > 1 else 0.0, 0.0, 1)
    within = (statistics.fmean([statistics.variance(rep) for rep in by_replicate]) if pairs > 1 else 0.0)
    means = [statistics.fmean(rep) for rep in by_replicate]
    between = max(0.0, statistics.variance(means) - within / pairs)
    return Spread(mean, within, between, replicates)


def interval(by_replicate: list[list[float]], confidence: float) -> tuple[float, float | None, float | None, bool]:
    """The mean difference and its two-sided interval at `confidence` over the units (the pairs, or the searches'
    means): Student's t; without spread, the exact sign-flip test's (a point where its level can be reached,
    else none). Returns the mean, the interval's ends and whether it is the exact test's."""
    units = by_replicate[0] if len(by_replicate) == 1 else [statistics.fmean(rep) for rep in by_replicate]
    n = len(units)
    mean = math.fsum(units) / n
    if n < 2:
        return mean, None, None, False
    sd = statistics.stdev(units)
    if sd == 0:  # every unit the same: the sign-flip test rejects any other shift at level 2 / 2^n
        reachable = 2 * 0.5 ** n <= 1 - confidence
        return (mean, mean, mean, True) if reachable else (mean, None, None, True)
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return mean, max(-1.0, mean - half), min(1.0, mean + half), False


def word(low: float | None, high: float | None, smallest: float) -> Outcome:
    """The word an interval gives against the smallest effect `smallest`."""
    if low is None or high is None:
        return Outcome.UNDECIDED
    if -smallest < low and high < smallest:
        return Outcome.EQUIVALENT
    if low > 0:
        return Outcome.BETTER
    if high < 0:
        return Outcome.WORSE
    return Outcome.UNDECIDED


def _t_tail(threshold: float, df: int, shift: float) -> float:
    """P(T > threshold) for a noncentral t with `df` degrees of freedom and noncentrality `shift`."""
    from scipy.stats import nct

    return float(nct.sf(threshold, df, shift))


def decision_chances(s: Spread, pairs: int, level: float, smallest: float, truth: float) -> dict[Outcome, float]:
    """The chance of each word at `pairs` pairs per replicate, an interval at 1 - level, the true difference
    `truth` and the spread `s` (noncentral t: the planning approximation of the t interval)."""
    units = s.units(pairs)
    sd = s.unit_sd(pairs)
    if units < 2 or sd == 0:
        return {o: 0.0 for o in Outcome}
    se = sd / math.sqrt(units)
    df, t = units - 1, t_quantile(1 - level / 2, units - 1)
    better, worse = _t_tail(t, df, truth / se), _t_tail(t, df, -truth / se)
    equivalent = max(0.0, _t_tail(t, df, (smallest + truth) / se) + _t_tail(t, df, (smallest - truth) / se) - 1)
    return {Outcome.BETTER: better, Outcome.WORSE: worse, Outcome.EQUIVALENT: equivalent}


def pairs_needed(s: Spread, design: Design, before: int, family: int, smallest: float) -> int | None:
    """The fewest pairs (on the round grid, then past max_seeds in rounds) with POWER for the cell at the level a
    look there would have; None where no count up to MOST_PAIRS reaches it (more searches would, not more pairs).
    Vectorised over the candidates: the plan runs after every look of every simulated campaign too."""
    import numpy as np
    from scipy.special import stdtrit
    from scipy.stats import nct

    grid = [n for n in design.grid() if n > before]
    past = range(design.max_seeds + design.seeds_per_round, MOST_PAIRS + 1, design.seeds_per_round)
    pairs = np.array([*grid, *past], dtype=float)
    if not len(pairs):
        return None
    levels = design.alpha * (pairs - before) / np.maximum(pairs, design.max_seeds) / family
    if s.replicates == 1:
        units, variance = pairs, np.full_like(pairs, s.within)
    else:
        units, variance = np.full_like(pairs, s.replicates), s.between + s.within / pairs
    if units[0] < 2 or not np.all(variance > 0):
        return None
    se, df = np.sqrt(variance / units), units - 1
    t = stdtrit(df, 1 - levels / 2)
    if abs(s.mean) >= smallest / 2:  # to show a difference of `smallest`
        power = nct.sf(t, df, smallest / se)
    else:  # to show equivalence at a true difference of 0
        power = np.maximum(0.0, 2 * nct.sf(t, df, smallest / se) - 1)
    reached = np.nonzero(power >= POWER)[0]
    return int(pairs[reached[0]]) if len(reached) else None


def _decide_cell(values: Values, reference: str, method: str, metric: str, by_replicate: list[list[float]],
                 share: float, family: int, smallest: float) -> Cell:
    """The cell at a look: its differences' interval at the look's share over the family, and the word it gives."""
    pairs, replicates = len(by_replicate[0]), len(by_replicate)
    confidence = 1 - share / family
    mean, low, high, exact = interval(by_replicate, confidence)
    units = pairs if replicates == 1 else replicates
    if exact and mean == 0 and identical_runs(values, method, reference, pairs, replicates):
        return Cell(method, metric, 0.0, 0.0, 0.0, confidence, pairs, units, Outcome.EQUIVALENT,
                    "identical runs: the same result as ERM on every pair and metric", exact=True, level=share,
                    family=family, smallest=smallest)
    if exact:  # no spread: the sign-flip test can show a difference from 0, never a bound on it (equivalence)
        low, high = (None, None) if low is None or mean == 0 or abs(mean) < smallest else (low, high)
    outcome = word(low, high, smallest)
    if outcome is not Outcome.UNDECIDED:
        why = f"at {pairs} pairs" + (" (exact sign-flip test: every pair differed by the same)" if exact else "")
        return Cell(method, metric, mean, low, high, confidence, pairs, units, outcome, why, exact=exact,
                    level=share, family=family, smallest=smallest)
    return Cell(method, metric, mean, low, high, confidence, pairs, units, Outcome.UNDECIDED, exact=exact,
                level=share, family=family, smallest=smallest)


def _plan_cell(cell: Cell, by_replicate: list[list[float]], design: Design, before: int, family: int) -> Cell:
    """An undecided cell with its plan: the pairs it needs, and whether the budget can decide it at all."""
    smallest, replicates = design.smallest_effect[cell.metric], len(by_replicate)
    s = spread(by_replicate)
    if s.within == 0 and s.between == 0:  # no spread: more pairs may break the ties, or let the exact test reach
        level = design.share(design.max_seeds, before) / family
        n = math.ceil(math.log2(2 / level)) if level > 0 else None
        reach = cell.pairs < design.max_seeds and (replicates == 1 or s.mean == 0)
        if s.mean == 0:
            why = "every pair tied so far: no spread to test"
        elif abs(s.mean) < smallest:
            why = "every pair differs by the same amount, under the smallest effect: no interval to show equivalence"
        else:
            why = "every pair differs by the same: the exact test needs " + (f"{n} pairs" if replicates == 1
                                                                            else "more searches")
        return replace(cell, needed=n if replicates == 1 and s.mean != 0 else None, open=reach,
                       why=why if reach or cell.pairs < design.max_seeds
                       else f"max_seeds = {design.max_seeds} reached; {why}")
    needed = pairs_needed(s, design, before, family, smallest)
    level = design.share(design.max_seeds, before) / family
    chances = decision_chances(s, design.max_seeds, level, smallest, s.mean)
    reachable = cell.pairs < design.max_seeds and sum(chances.values()) >= FUTILE_BELOW
    if reachable:
        why = f"open: about {needed} pairs for 80% power" if needed else "open"
    elif cell.pairs >= design.max_seeds:
        why = f"max_seeds = {design.max_seeds} reached" + (f"; about {needed} pairs would decide it" if needed
                                                            else "; more searches (replicates) would decide it")
    else:
        why = (f"set aside: max_seeds = {design.max_seeds} cannot decide it (a decision there has a "
               f"{100 * sum(chances.values()):.0f}% chance at its estimated difference)"
               + (f"; about {needed} pairs would" if needed else "; more searches (replicates) would"))
    return replace(cell, needed=needed, open=reachable, why=why)


def decide(values: Values, methods: Sequence[str], design: Design, replicates: int = 1,
           run_seconds: Mapping[str, float] | None = None, secondary: Sequence[str] = ()) -> Decisions:
    """Replay the campaign's looks on `values` (ERM first in `methods`): each look's cells, the plan after it,
    until a planned look has no runs yet (the campaign's next round) or nothing is left to decide.
    `run_seconds`: each method's mean training seconds per run, for the time budget and the round's estimate;
    `secondary`: metrics shown beside the primary ones, with 95% intervals and no word."""
    reference, compared = methods[0], [m for m in methods[1:] if m in values]
    constant = constant_metrics(values, design.primary)
    metrics = [m for m in design.primary if m not in constant]
    family = [(m, metric) for m in compared for metric in metrics]
    m = max(1, len(family))
    cells: dict[tuple[str, str], Cell] = {}
    pairs = {method: 0 for method in methods}
    needing = list(compared)
    look, before = design.grid()[0], 0
    looks: list[int] = []
    decisions = Decisions(cells, {}, looks, family, constant, pairs)
    while True:
        have = min([complete_pairs(values, x, replicates) for x in [reference, *needing]], default=0)
        if have < look:
            decisions.next_pairs, decisions.needing = look, needing
            decisions.stopped = "" if looks or have else "no runs"
            break
        share = design.share(look, before)
        for method in [reference, *needing]:
            pairs[method] = look
        for method in needing:
            for metric in metrics:
                cell = cells.get((method, metric))
                if cell is None or cell.outcome is Outcome.UNDECIDED:
                    units = _units(values, method, reference, metric, look, replicates)
                    cell = _decide_cell(values, reference, method, metric, units, share, m,
                                        design.smallest_effect[metric])
                    cells[(method, metric)] = (_plan_cell(cell, units, design, look, m)
                                               if cell.outcome is Outcome.UNDECIDED else cell)
        looks.append(look)
        before = look
        open_cells = [c for c in cells.values() if c.open]
        needing = [method for method in compared if any(c.method == method for c in open_cells)]
        if not open_cells:
            decisions.stopped = "max_seeds" if look >= design.max_seeds and any(
                c.outcome is Outcome.UNDECIDED for c in cells.values()) else "decided"
            break
        need = max((c.needed or design.max_seeds) for c in open_cells)
        look = min(n for n in design.grid() if n > look and (n >= need or n == design.max_seeds))
        if design.max_seconds is not None and run_seconds:
            look = _within_time(design, run_seconds, [reference, *needing], pairs, replicates, before, look)
            if look <= before:
                decisions.stopped = "time"
                for key, cell in cells.items():
                    if cell.open:
                        cells[key] = replace(cell, open=False, why=cell.why.replace("open", "time budget spent", 1))
                break
    if decisions.next_pairs is not None:
        to_train = {x: replicates * (decisions.next_pairs - pairs[x]) for x in [reference, *decisions.needing]}
        decisions.round_runs = sum(to_train.values())
        if run_seconds:
            decisions.round_seconds = sum(run_seconds.get(x, 0.0) * runs for x, runs in to_train.items())
    for metric in secondary:
        if metric in metrics:
            continue
        for method in compared:
            n = min(pairs[method], complete_pairs(values, reference, replicates))
            if n >= 2:
                mean, low, high, exact = interval(_units(values, method, reference, metric, n, replicates), 0.95)
                decisions.secondary[(method, metric)] = Cell(method, metric, mean, low, high, 0.95, n,
                                                             n if replicates == 1 else replicates, None, exact=exact)
    for table in (cells, decisions.secondary):
        for key, cell in table.items():
            table[key] = replace(cell, improvement=_improvement(values, reference, cell, replicates))
    return decisions


def _within_time(design: Design, run_seconds: Mapping[str, float], training: list[str], pairs: Mapping[str, int],
                 replicates: int, before: int, look: int) -> int:
    """The planned look cut back to what the training-time budget still allows (before: none fits)."""
    spent = sum(run_seconds.get(x, 0.0) * replicates * pairs[x] for x in pairs)
    for n in sorted((g for g in design.grid() if before < g <= look), reverse=True):
        cost = sum(run_seconds.get(x, 0.0) * replicates * (n - pairs[x]) for x in training)
        if spent + cost <= design.max_seconds:  # type: ignore[operator]
            return n
    return before


def _improvement(values: Values, reference: str, cell: Cell, replicates: int) -> Improvement:
    keys = [(r, s) for r in range(replicates) for s in range(cell.pairs)]
    mine, theirs = values[cell.method][cell.metric], values[reference][cell.metric]
    return paired_improvement([mine[k] for k in keys], [theirs[k] for k in keys],
                              [k[0] for k in keys] if replicates > 1 else None)
