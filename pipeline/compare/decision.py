"""Decisions by design: every primary (method, metric) cell of a campaign ends in better, worse, equivalent or
undecided, read off one simultaneous interval, with confirmation runs, and searches, added in rounds planned for power.

The family is the primary cells: every method but ERM on each primary metric, less the metrics on which every run
of every method scored the same (nothing to compare: said once, left out). A look spends a share of the error rate
alpha (a spending function of what it adds: however the looks fall, their shares add up to at most alpha) and
draws each cell's interval at confidence 1 - share / m (Bonferroni over the m cells). The word is read off that
interval and the metric's smallest effect d:

    equivalent  two one-sided tests at the cell's level (Schuirmann 1987): the 1 - 2 share / m interval lies
                inside (-d, +d)
    better      the interval lies above 0 (and the difference is not shown smaller than d)
    worse       the interval lies below 0 (likewise)
    undecided   anything else: why, and about how many pairs or searches would decide it

A wrong word needs one side of an interval to miss the true difference, so each cell errs with chance at most its
level and the campaign at most alpha over all looks (the union bound). Differences without spread (every unit the
same) have no t interval: identical runs are ERM itself (equivalent), a constant non-zero difference goes through
the exact sign test.

Two axes for the looks (`Design.axis`):

- searches (a new campaign's default): every method's search is repeated, each search (its own search seed and
  block of splits) re-trained on a few pairs, and the search is the unit of the test, so the verdict is about the
  method, not about the configurations one search happened to find. A pilot of `searches` searches per method,
  `seeds` pairs each, spends nothing and plans: the pairs per search from the split of the variance into the
  searches' luck and the pairs' noise (the classic two-stage optimum sqrt(noise / luck x a search's cost in runs)),
  and the searches for 80% power. Later looks add searches; each spends alpha x (searches added) / (max_searches -
  searches).
- pairs (every campaign stored before 0.14.0, and `replicates` fixed in the file): the searches are fixed (one, or
  R), and each look adds pairs: alpha x (pairs added) / max_seeds.

The unit is robust to a run that collapsed (`Design.trim`): with one search, Yuen's trimmed mean of the pairs and
its interval; with several, each search's trimmed mean over its pairs, then Student's t over the searches. At trim
0 (a campaign stored before 0.14.0) these are the mean and the t interval.

After each look, every cell still open plans the next one from its own spread: the units it needs for 80% power at
the level that look would have, to show a difference of d where its estimate is at least d/2 from 0 and
equivalence within +-d otherwise (so the plan reads the estimate's size, not only its variance; `bench verdict`
measures the whole procedure with it). The next look is the first round that reaches the largest need, up to the
cap (and within the training-time budget, when one is set). Futility sets a cell aside only when the budget cannot
decide it: its chance of any decision at the cap, at its estimated difference, is under FUTILE_BELOW. A method gets
the next round while one of its cells is open; a cell is tested at a look only when its method got that look's
runs, so replaying the stored runs gives the decisions the campaign took. Pure Python and scipy: no torch.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping, Sequence

from pipeline.compare.stats import Improvement, paired_improvement, rounded, t_quantile, trimmed

Key = tuple[int, int]  # (search replicate, pair)
Values = Mapping[str, Mapping[str, Mapping[Key, float]]]  # method -> metric -> key -> value in [0, 1]

POWER = 0.8  # the power each round is planned for
FUTILE_BELOW = 0.1  # a cell whose chance of any decision by the cap is under this is set aside
MOST_PAIRS = 1000  # how far the plan looks when it says how many pairs a cell would need
MOST_SEARCHES = 200  # and how many searches
PILOT = "pilot"  # the why of a cell at the searches axis' first look, which only plans


class Outcome(str, Enum):
    """The word a primary cell ends in."""

    BETTER = "better"
    WORSE = "worse"
    EQUIVALENT = "equivalent"
    UNDECIDED = "undecided"


class Axis(str, Enum):
    """What a campaign's rounds add: pairs to fixed searches, or searches of a fixed number of pairs each."""

    PAIRS = "pairs"
    SEARCHES = "searches"


@dataclass(frozen=True)
class Design:
    """What a campaign decides on and how it may spend its runs: the primary metrics, the smallest effect that
    matters on each (a fraction: 0.01 is one point), the rounds, the error rate and the unit's trimming."""

    primary: tuple[str, ...]
    smallest_effect: Mapping[str, float]
    seeds: int = 5  # pairs: the first round's pairs; searches: each search's pairs before the pilot plans them
    seeds_per_round: int = 5
    max_seeds: int = 30  # pairs: the most pairs; searches: the most pairs per search the plan may choose
    alpha: float = 0.05
    max_seconds: float | None = None  # the rounds' training time (re-training, and searching), None: no limit
    searches: int = 1  # searches per method at the first look (the pilot on the searches axis)
    searches_per_round: int = 2
    max_searches: int = 1  # more than `searches`: the searches axis
    trim: float = 0.0  # the share cut from each end for the robust unit (0: means and t)
    search_cost: float = 8.0  # a search's cost in re-training runs (its trials), for planning the pairs per search

    @property
    def axis(self) -> Axis:
        return Axis.SEARCHES if self.max_searches > self.searches else Axis.PAIRS

    def grid(self) -> list[int]:
        """The pair counts a look may fall at: the first round, each later round, and max_seeds."""
        return sorted(set(range(self.seeds, self.max_seeds, self.seeds_per_round)) | {self.max_seeds})

    def search_grid(self) -> list[int]:
        """The search counts a look may fall at on the searches axis: the pilot, each later round, the cap."""
        return sorted(set(range(self.searches, self.max_searches, self.searches_per_round)) | {self.max_searches})

    def share(self, pairs: int, before: int) -> float:
        """The error rate a look at `pairs` spends after a look at `before` (linear spending over pairs)."""
        return self.alpha * (min(pairs, self.max_seeds) - before) / self.max_seeds

    def search_share(self, searches: int, before: int) -> float:
        """The error rate a look at `searches` spends after one at `before` (searches axis): nothing at the pilot,
        then linear over the searches added past it."""
        span = self.max_searches - self.searches
        return self.alpha * (min(searches, self.max_searches) - max(before, self.searches)) / span if span else 0.0


@dataclass(frozen=True)
class Cell:
    """One method against ERM on one metric: the difference, its interval and, for a primary cell, the word."""

    method: str
    metric: str
    mean: float  # the difference method - ERM over the units (trimmed where the design trims)
    low: float | None  # the interval (simultaneous for a primary cell, 95% for a secondary one); None: none to give
    high: float | None
    confidence: float  # the interval's confidence
    pairs: int  # pairs per search the cell rests on
    units: int  # units of the test: the pairs, or the searches with several
    outcome: Outcome | None  # None: a secondary cell, not a decision
    why: str = ""  # how it was decided, or why it is not
    needed: int | None = None  # pairs (or searches) an undecided cell would need for 80% power; None: unknown
    exact: bool = False  # the sign test's, not a t interval: the differences had no spread
    open: bool = False  # undecided only for now: the next planned round may decide it
    level: float = 0.0  # the error rate spent at the look that gave it
    family: int = 0  # primary cells
    smallest: float = 0.0  # the smallest effect that matters on the metric (a primary cell's)
    improvement: Improvement | None = None  # P(method > ERM) on the same pairs
    searches: int = 1  # searches the cell rests on
    equivalence: tuple[float, float] | None = None  # the two one-sided tests' interval (1 - 2 level / family)
    needed_unit: str = "pairs"  # what `needed` counts: pairs, or searches


@dataclass
class Decisions:
    """The replay of a campaign's looks on its stored runs: every cell as it stands, and what the campaign does
    next (`next_searches` searches of `next_pairs` pairs each for `needing`; next_pairs None: it is done)."""

    cells: dict[tuple[str, str], Cell]  # the primary cells
    secondary: dict[tuple[str, str], Cell]
    looks: list[int]  # the pairs (pairs axis) or searches (searches axis) each look fell at
    family: list[tuple[str, str]]
    constant: list[str]  # metrics left out: every run of every method scored the same
    pairs: dict[str, int]  # pairs per search each method was compared on
    next_pairs: int | None = None
    needing: list[str] = field(default_factory=list)  # the methods the next round trains (ERM besides)
    round_runs: int = 0  # the runs the next round trains (every search, every method)
    round_seconds: float | None = None  # the next round's estimated training time (every method)
    stopped: str = ""  # why no next round: "decided", "max_seeds", "max_searches", "time", "no runs"
    searches: dict[str, int] = field(default_factory=dict)  # searches each method was compared on
    next_searches: int = 1  # the searches per method the next round needs (ERM's and each needing method's)
    round_searches: int = 0  # the searches the next round runs (every method)
    axis: Axis = Axis.PAIRS
    planned_pairs: int | None = None  # searches axis: the pairs per search the pilot chose


def complete_pairs(values: Values, method: str, replicates: int) -> int:
    """How many pairs 0, 1, ... the method has stored for every replicate and metric."""
    metrics = values.get(method, {})
    if not metrics or replicates < 1:
        return 0
    n = 0
    while all((r, n) in by_key for by_key in metrics.values() for r in range(replicates)):
        n += 1
    return n


def complete_searches(values: Values, method: str, pairs: int) -> int:
    """How many searches 0, 1, ... the method has stored with pairs 0..pairs-1 on every metric."""
    metrics = values.get(method, {})
    if not metrics or pairs < 1:
        return 0
    r = 0
    while all((r, s) in by_key for by_key in metrics.values() for s in range(pairs)):
        r += 1
    return r


def constant_metrics(values: Values, metrics: Sequence[str]) -> list[str]:
    """The metrics on which every stored run of every method has the same value (e.g. a class no run gets right)."""
    constant = []
    for metric in metrics:
        seen = {v for by_metric in values.values() for v in by_metric.get(metric, {}).values()}
        if len(seen) == 1:
            constant.append(metric)
    return constant


def _units(values: Values, method: str, reference: str, metric: str, pairs: int, replicates: int) -> list[list[float]]:
    """The differences method - reference on pairs 0..pairs-1, one list per search, rounded (stats.DIGITS)."""
    mine, theirs = values[method][metric], values[reference][metric]
    return [[rounded(mine[(r, s)] - theirs[(r, s)]) for s in range(pairs)] for r in range(replicates)]


def identical_runs(values: Values, method: str, reference: str, pairs: int, replicates: int) -> bool:
    """Whether the method's runs equal the reference's on every metric and pair: then it is the reference here
    (label smoothing tuned to alpha = 0), not a metric on which two methods happened to tie."""
    return all(values[method][metric][(r, s)] == values[reference][metric][(r, s)]
               for metric in values[method] for r in range(replicates) for s in range(pairs))


def unit_values(by_search: list[list[float]], trim: float) -> list[float]:
    """The units of the test: the pairs with one search; each search's (trimmed) mean over its pairs with several."""
    if len(by_search) == 1:
        return list(by_search[0])
    return [trimmed(rep, trim)[0] for rep in by_search]


def _trim_across(by_search: list[list[float]], trim: float) -> float:
    """The trimming across the units: Yuen's over the pairs with one search; none over the searches (each search's
    unit is trimmed already)."""
    return trim if len(by_search) == 1 else 0.0


@dataclass(frozen=True)
class Spread:
    """The variance of a cell's differences, split for planning: the pairs' noise and the searches' luck."""

    mean: float
    within: float  # the variance of one pair's difference around its search's mean (as the trimmed unit sees it)
    between: float  # the variance of the searches' luck (0 with one search)
    replicates: int
    trim: float = 0.0

    def unit_sd(self, pairs: int) -> float:
        """The standard deviation of one unit at `pairs` pairs per search: a pair, or a search's mean."""
        if self.replicates == 1:
            return math.sqrt(self.within)
        return math.sqrt(self.between + self.within / pairs)

    def units(self, pairs: int) -> int:
        return pairs if self.replicates == 1 else self.replicates


def _trimmed_variance(values: list[float], trim: float) -> float:
    """n times the squared standard error of the trimmed mean: the variance one value adds to it."""
    mean, se, _ = trimmed(values, trim)
    return 0.0 if math.isnan(se) else se * se * len(values)


def spread(by_replicate: list[list[float]], trim: float = 0.0) -> Spread:
    """The mean difference and its variance components (one-way ANOVA, the between part floored at 0), each as the
    design's unit sees it (a trimmed unit's variance from the winsorized one)."""
    replicates, pairs = len(by_replicate), len(by_replicate[0])
    if replicates == 1:
        units = by_replicate[0]
        mean = trimmed(units, trim)[0]
        return Spread(mean, _trimmed_variance(units, trim) if len(units) > 1 else 0.0, 0.0, 1, trim)
    means = unit_values(by_replicate, trim)
    mean = rounded(math.fsum(means) / replicates)
    within = statistics.fmean([_trimmed_variance(rep, trim) for rep in by_replicate]) if pairs > 1 else 0.0
    between = max(0.0, statistics.variance(means) - within / pairs)
    return Spread(mean, within, between, replicates, trim)


def interval(by_replicate: list[list[float]], confidence: float,
             trim: float = 0.0) -> tuple[float, float | None, float | None, bool]:
    """The difference and its two-sided interval at `confidence` over the units (the pairs, or the searches'
    means), trimmed as the design says (Yuen's interval; Student's t at trim 0); without spread, the exact sign
    test's (a point where its level can be reached, else none). Returns the estimate, the interval's ends and
    whether it is the exact test's."""
    units = unit_values(by_replicate, trim)
    n = len(units)
    across = _trim_across(by_replicate, trim)
    mean, se, df = trimmed(units, across)
    if n < 2:
        return mean, None, None, False
    if len(set(units)) == 1:  # every unit the same: the sign test rejects any other shift at level 2 / 2^n
        reachable = 2 * 0.5 ** n <= 1 - confidence
        return (mean, mean, mean, True) if reachable else (mean, None, None, True)
    if not se > 0:  # the trimmed middle has no spread, its ends do: the untrimmed t interval
        mean, se, df = trimmed(units, 0.0)
    half = t_quantile(0.5 + confidence / 2, df) * se
    return mean, max(-1.0, mean - half), min(1.0, mean + half), False


def word(low: float | None, high: float | None, smallest: float,
         equivalence: tuple[float, float] | None = None) -> Outcome:
    """The word an interval gives against the smallest effect `smallest`; `equivalence`: the two one-sided tests'
    interval (default: the interval itself, which is stricter)."""
    inner = equivalence if equivalence is not None else (low, high)
    if inner[0] is not None and inner[1] is not None and -smallest < inner[0] and inner[1] < smallest:
        return Outcome.EQUIVALENT
    if low is None or high is None:
        return Outcome.UNDECIDED
    if low > 0:
        return Outcome.BETTER
    if high < 0:
        return Outcome.WORSE
    return Outcome.UNDECIDED


def _t_tail(threshold: float, df: int, shift: float) -> float:
    """P(T > threshold) for a noncentral t with `df` degrees of freedom and noncentrality `shift`."""
    from scipy.stats import nct

    return float(nct.sf(threshold, df, shift))


def _degrees(s: Spread, units: int) -> int:
    """The test's degrees of freedom at `units` units: Yuen's n - 2g - 1 with one search, else units - 1."""
    if s.replicates == 1:
        return units - 2 * int(math.floor(s.trim * units + 1e-9)) - 1
    return units - 1


def decision_chances(s: Spread, pairs: int, level: float, smallest: float, truth: float,
                     searches: int | None = None) -> dict[Outcome, float]:
    """The chance of each word at `pairs` pairs per search (and `searches` searches; default: the spread's), an
    interval at 1 - level, the true difference `truth` and the spread `s` (noncentral t: the planning's
    approximation; equivalence by two one-sided tests at `level`)."""
    s = s if searches is None else replace(s, replicates=searches)
    units = s.units(pairs)
    sd = s.unit_sd(pairs)
    df = _degrees(s, units)
    if units < 2 or sd == 0 or df < 1:
        return {o: 0.0 for o in Outcome}
    se = sd / math.sqrt(units)
    t = t_quantile(1 - level / 2, df)
    better, worse = _t_tail(t, df, truth / se), _t_tail(t, df, -truth / se)
    t_one = t_quantile(1 - level, df)
    equivalent = max(0.0, _t_tail(t_one, df, (smallest + truth) / se) + _t_tail(t_one, df, (smallest - truth) / se) - 1)
    return {Outcome.BETTER: better, Outcome.WORSE: worse, Outcome.EQUIVALENT: equivalent}


def _first_powered(s: Spread, counts: Any, levels: Any, units: Any, variance: Any, smallest: float) -> int | None:
    """The first of `counts` whose look (at `levels`, with `units` units of `variance` each) has POWER for the cell:
    to show a difference of `smallest` where its estimate is at least half of it from 0, equivalence within it
    otherwise (two one-sided tests). Vectorised: the plan runs after every look of every simulated campaign too."""
    import numpy as np
    from scipy.special import stdtrit
    from scipy.stats import nct

    n, level, var = np.asarray(units, dtype=float), np.asarray(levels, dtype=float), np.asarray(variance, dtype=float)
    if not len(n):
        return None
    df = np.array([_degrees(s, int(u)) for u in n], dtype=float)
    if not np.all(var > 0) or not np.all(df >= 1):
        ok = (var > 0) & (df >= 1)
        if not ok.any():
            return None
        counts, n, level, var, df = np.asarray(counts)[ok], n[ok], level[ok], var[ok], df[ok]
    se = np.sqrt(var / n)
    if abs(s.mean) >= smallest / 2:  # to show a difference of `smallest`
        power = nct.sf(stdtrit(df, 1 - level / 2), df, smallest / se)
    else:  # to show equivalence at a true difference of 0
        power = np.maximum(0.0, 2 * nct.sf(stdtrit(df, 1 - level), df, smallest / se) - 1)
    reached = np.nonzero(power >= POWER)[0]
    return int(np.asarray(counts)[reached[0]]) if len(reached) else None


def pairs_needed(s: Spread, design: Design, before: int, family: int, smallest: float) -> int | None:
    """The fewest pairs (on the round grid, then past max_seeds in rounds) with POWER for the cell at the level a
    look there would have; None where no count up to MOST_PAIRS reaches it (more searches would, not more pairs)."""
    import numpy as np

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
    return _first_powered(s, pairs, levels, units, variance, smallest)


def searches_needed(s: Spread, design: Design, before: int, family: int, smallest: float,
                    pairs: int) -> int | None:
    """The fewest searches (on the search grid, then past max_searches in rounds) of `pairs` pairs each with POWER
    for the cell at the level a look there would have; None where no count up to MOST_SEARCHES reaches it."""
    import numpy as np

    grid = [n for n in design.search_grid() if n > before]
    step = max(1, design.searches_per_round)
    past = range(design.max_searches + step, MOST_SEARCHES + 1, step)
    searches = np.array([*grid, *past], dtype=float)
    if not len(searches):
        return None
    span = design.max_searches - design.searches
    levels = design.alpha * (searches - max(before, design.searches)) / np.maximum(searches - design.searches,
                                                                                   span) / family
    variance = np.full_like(searches, s.between + s.within / pairs)
    return _first_powered(replace(s, replicates=2), searches, levels, searches, variance, smallest)


def planned_pairs(spreads: Sequence[tuple[Spread, float]], design: Design) -> int:
    """The pairs per search after the pilot: the two-stage optimum sqrt(noise / luck x a search's cost in runs)
    (Cochran 1977, 10.6), the cells' components pooled in units of each one's smallest effect, within [seeds,
    max_seeds]; max_seeds where the searches showed no luck beyond their pairs' noise."""
    within = statistics.fmean([s.within / d ** 2 for s, d in spreads]) if spreads else 0.0
    between = statistics.fmean([s.between / d ** 2 for s, d in spreads]) if spreads else 0.0
    if between <= 0:
        best = design.max_seeds if within > 0 else design.seeds
    else:
        best = round(math.sqrt(within / between * design.search_cost))
    return max(design.seeds, min(design.max_seeds, best))


def _decide_cell(values: Values, reference: str, method: str, metric: str, by_replicate: list[list[float]],
                 share: float, family: int, smallest: float, trim: float) -> Cell:
    """The cell at a look: its differences' interval at the look's share over the family, the two one-sided tests'
    at the same level, and the word they give."""
    pairs, replicates = len(by_replicate[0]), len(by_replicate)
    confidence = 1 - share / family
    mean, low, high, exact = interval(by_replicate, confidence, trim)
    units = pairs if replicates == 1 else replicates

    def cell(mean: float, low: float | None, high: float | None, outcome: Outcome, why: str = "",
             equivalence: tuple[float, float] | None = None) -> Cell:
        return Cell(method, metric, mean, low, high, confidence, pairs, units, outcome, why, exact=exact, level=share,
                    family=family, smallest=smallest, searches=replicates, equivalence=equivalence)

    if exact and mean == 0 and identical_runs(values, method, reference, pairs, replicates):
        return cell(0.0, 0.0, 0.0, Outcome.EQUIVALENT,
                    "identical runs: the same result as ERM on every pair and metric")
    equivalence = None
    if exact:  # no spread: the sign test can show a difference from 0, never a bound on it (equivalence)
        low, high = (None, None) if low is None or mean == 0 or abs(mean) < smallest else (low, high)
    else:
        _, inner_low, inner_high, _ = interval(by_replicate, 1 - 2 * share / family, trim)
        equivalence = None if inner_low is None or inner_high is None else (inner_low, inner_high)
    outcome = word(low, high, smallest, equivalence) if not exact else word(low, high, smallest)
    at = f"at {pairs} pairs" if replicates == 1 else f"at {replicates} searches of {pairs} pairs"
    if outcome is not Outcome.UNDECIDED:
        return cell(mean, low, high, outcome, at + (" (exact sign test: every unit differed by the same)" if exact
                                                    else ""), equivalence)
    return cell(mean, low, high, Outcome.UNDECIDED, equivalence=equivalence)


def _plan_cell(cell: Cell, by_replicate: list[list[float]], design: Design, before: int, family: int) -> Cell:
    """An undecided cell on the pairs axis with its plan: the pairs it needs, and whether the budget can decide it."""
    smallest, replicates = design.smallest_effect[cell.metric], len(by_replicate)
    s = spread(by_replicate, design.trim)
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


def _plan_search_cell(cell: Cell, by_replicate: list[list[float]], design: Design, before: int, family: int,
                      pairs: int, pilot: bool) -> Cell:
    """An undecided cell on the searches axis with its plan: the searches it needs at `pairs` pairs each, and
    whether max_searches can decide it (after the pilot, whose few searches estimate a spread too roughly to set
    anything aside, every cell stays open)."""
    smallest, searches = design.smallest_effect[cell.metric], len(by_replicate)
    s = spread(by_replicate, design.trim)
    cap = design.max_searches
    if s.within == 0 and s.between == 0:
        open_ = searches < cap
        why = "every search tied so far: no spread to test" if s.mean == 0 else \
            "every search differs by the same: more searches let the exact test reach"
        return replace(cell, open=open_, needed_unit="searches",
                       why=why if open_ else f"max_searches = {cap} reached; {why}")
    needed = searches_needed(s, design, before, family, smallest, pairs)
    level = design.search_share(cap, before) / family
    chances = decision_chances(s, pairs, level, smallest, s.mean, searches=cap)
    reachable = searches < cap and (pilot or sum(chances.values()) >= FUTILE_BELOW)
    about = f"about {needed} searches" if needed else ""
    if reachable:
        why = f"open: {about} for 80% power" if needed else "open"
    elif searches >= cap:
        why = f"max_searches = {cap} reached" + (f"; {about} would decide it" if needed else "")
    else:
        why = (f"set aside: max_searches = {cap} cannot decide it (a decision there has a "
               f"{100 * sum(chances.values()):.0f}% chance at its estimated difference)"
               + (f"; {about} would" if needed else ""))
    return replace(cell, needed=needed, needed_unit="searches", open=reachable, why=why)


def decide(values: Values, methods: Sequence[str], design: Design,
           run_seconds: Mapping[str, float] | None = None, secondary: Sequence[str] = (),
           search_seconds: Mapping[str, float] | None = None) -> Decisions:
    """Replay the campaign's looks on `values` (ERM first in `methods`): each look's cells, the plan after it,
    until a planned look has no runs yet (the campaign's next round) or nothing is left to decide.
    `run_seconds`: each method's mean training seconds per run, and `search_seconds` per search, for the time
    budget and the round's estimate; `secondary`: metrics shown beside the primary ones, with 95% intervals and no
    word."""
    reference, compared = methods[0], [m for m in methods[1:] if m in values]
    constant = constant_metrics(values, design.primary)
    metrics = [m for m in design.primary if m not in constant]
    family = [(m, metric) for m in compared for metric in metrics]
    decisions = Decisions({}, {}, [], family, constant, {method: 0 for method in methods}, axis=design.axis,
                          searches={method: 0 for method in methods})
    if design.axis is Axis.SEARCHES:
        _search_looks(values, reference, compared, metrics, design, decisions, run_seconds, search_seconds)
    else:
        _pair_looks(values, reference, compared, metrics, design, decisions, run_seconds)
    replicates = design.searches if design.axis is Axis.PAIRS else None
    for metric in secondary:
        if metric in metrics:
            continue
        for method in compared:
            r = replicates or decisions.searches[method]
            n = min(decisions.pairs[method], complete_pairs(values, reference, r)) if r else 0
            if n >= 2 or (r >= 2 and n >= 1):
                units = _units(values, method, reference, metric, n, r)
                mean, low, high, exact = interval(units, 0.95, design.trim)
                decisions.secondary[(method, metric)] = Cell(method, metric, mean, low, high, 0.95, n,
                                                             n if r == 1 else r, None, exact=exact, searches=r)
    for table in (decisions.cells, decisions.secondary):
        for key, cell in table.items():
            table[key] = replace(cell, improvement=_improvement(values, reference, cell))
    return decisions


def _pair_looks(values: Values, reference: str, compared: list[str], metrics: list[str], design: Design,
                decisions: Decisions, run_seconds: Mapping[str, float] | None) -> None:
    """The looks of a campaign whose rounds add pairs to a fixed number of searches."""
    replicates, cells, pairs, looks = design.searches, decisions.cells, decisions.pairs, decisions.looks
    m = max(1, len(decisions.family))
    needing = list(compared)
    look, before = design.grid()[0], 0
    decisions.next_searches = replicates
    while True:
        have = min([complete_pairs(values, x, replicates) for x in [reference, *needing]], default=0)
        if have < look:
            decisions.next_pairs, decisions.needing = look, needing
            decisions.stopped = "" if looks or have else "no runs"
            break
        share = design.share(look, before)
        for method in [reference, *needing]:
            pairs[method] = look
            decisions.searches[method] = replicates
        for method in needing:
            for metric in metrics:
                cell = cells.get((method, metric))
                if cell is None or cell.outcome is Outcome.UNDECIDED:
                    units = _units(values, method, reference, metric, look, replicates)
                    cell = _decide_cell(values, reference, method, metric, units, share, m,
                                        design.smallest_effect[metric], design.trim)
                    cells[(method, metric)] = (_plan_cell(cell, units, design, look, m)
                                               if cell.outcome is Outcome.UNDECIDED else cell)
        looks.append(look)
        before = look
        needing, after = _next_look(cells, compared, look, design.max_seeds, design.grid())
        if after is None:
            decisions.stopped = "max_seeds" if _capped(cells, look, design.max_seeds) else "decided"
            break
        look = after
        if design.max_seconds is not None and run_seconds:
            look = _within_time(design, run_seconds, [reference, *needing], pairs, replicates, before, look)
            if look <= before:
                decisions.stopped = "time"
                _close_for_time(cells)
                break
    if decisions.next_pairs is not None:
        to_train = {x: replicates * (decisions.next_pairs - pairs[x]) for x in [reference, *decisions.needing]}
        decisions.round_runs = sum(to_train.values())
        if run_seconds:
            decisions.round_seconds = sum(run_seconds.get(x, 0.0) * runs for x, runs in to_train.items())


def _search_looks(values: Values, reference: str, compared: list[str], metrics: list[str], design: Design,
                  decisions: Decisions, run_seconds: Mapping[str, float] | None,
                  search_seconds: Mapping[str, float] | None) -> None:
    """The looks of a campaign whose rounds add searches: the pilot (it plans the pairs per search and the next
    look, and decides nothing), then looks at more searches, each search re-trained on the planned pairs."""
    cells, looks = decisions.cells, decisions.looks
    m = max(1, len(decisions.family))
    needing = list(compared)
    look, before, pairs = design.searches, 0, design.seeds
    while True:
        have = min([complete_searches(values, x, pairs) for x in [reference, *needing]], default=0)
        if have < look:
            decisions.next_searches, decisions.next_pairs, decisions.needing = look, pairs, needing
            decisions.stopped = "" if looks or have else "no runs"
            break
        share = design.search_share(look, before)
        for method in [reference, *needing]:
            decisions.pairs[method], decisions.searches[method] = pairs, look
        spreads = []
        for method in needing:
            for metric in metrics:
                cell = cells.get((method, metric))
                if cell is not None and cell.outcome is not Outcome.UNDECIDED:
                    continue
                units = _units(values, method, reference, metric, pairs, look)
                smallest = design.smallest_effect[metric]
                if share == 0:  # the pilot: no decision, a plan
                    mean = interval(units, 0.95, design.trim)[0]
                    cell = Cell(method, metric, mean, None, None, 1.0, pairs, look, Outcome.UNDECIDED,
                                f"{PILOT}: {look} searches plan the design", open=True, family=m, smallest=smallest,
                                searches=look, needed_unit="searches")
                    spreads.append((spread(units, design.trim), smallest))
                else:
                    cell = _decide_cell(values, reference, method, metric, units, share, m, smallest, design.trim)
                cells[(method, metric)] = cell
        if share == 0:
            pairs = decisions.planned_pairs = planned_pairs(spreads, design)
        for key, cell in cells.items():
            if cell.outcome is Outcome.UNDECIDED and (cell.open or share > 0) and key[0] in needing:
                units = _units(values, key[0], reference, key[1], min(pairs, decisions.pairs[key[0]]), look)
                cells[key] = _plan_search_cell(cell, units, design, look, m, pairs, share == 0)
        if share > 0:
            decisions.planned_pairs = pairs
        looks.append(look)
        before = look
        needing, after = _next_look(cells, compared, look, design.max_searches, design.search_grid())
        if after is None:
            decisions.stopped = "max_searches" if _capped(cells, look, design.max_searches) else "decided"
            break
        look = after
        if design.max_seconds is not None and (run_seconds or search_seconds):
            look = _searches_within_time(design, run_seconds or {}, search_seconds or {}, [reference, *needing],
                                         decisions, before, look, pairs)
            if look <= before:
                decisions.stopped = "time"
                _close_for_time(cells)
                break
    if decisions.next_pairs is not None:
        training = [reference, *decisions.needing]
        new_searches = {x: max(0, decisions.next_searches - decisions.searches[x]) for x in training}
        runs = {x: decisions.next_searches * decisions.next_pairs - decisions.searches[x] * decisions.pairs[x]
                for x in training}
        decisions.round_searches = sum(new_searches.values())
        decisions.round_runs = sum(runs.values())
        if run_seconds or search_seconds:
            decisions.round_seconds = sum((run_seconds or {}).get(x, 0.0) * runs[x]
                                          + (search_seconds or {}).get(x, 0.0) * new_searches[x] for x in training)


def _next_look(cells: dict[tuple[str, str], Cell], compared: list[str], look: int, cap: int,
               grid: Sequence[int]) -> tuple[list[str], int | None]:
    """After a look on either axis: the methods with an open cell, and the next look on `grid` (pairs or searches)
    that the neediest open cell asks for, at most `cap`; None where no cell is open."""
    open_cells = [c for c in cells.values() if c.open]
    needing = [method for method in compared if any(c.method == method for c in open_cells)]
    if not open_cells:
        return needing, None
    need = max((c.needed or cap) for c in open_cells)
    return needing, min(n for n in grid if n > look and (n >= need or n == cap))


def _capped(cells: dict[tuple[str, str], Cell], look: int, cap: int) -> bool:
    """Whether the rounds stopped at their cap with a cell still undecided (else every cell was decided)."""
    return look >= cap and any(c.outcome is Outcome.UNDECIDED for c in cells.values())


def _close_for_time(cells: dict[tuple[str, str], Cell]) -> None:
    """Every open cell closed: the time budget is spent."""
    for key, cell in cells.items():
        if cell.open:
            cells[key] = replace(cell, open=False, why=cell.why.replace("open", "time budget spent", 1))


def _within_time(design: Design, run_seconds: Mapping[str, float], training: list[str], pairs: Mapping[str, int],
                 replicates: int, before: int, look: int) -> int:
    """The planned look cut back to what the training-time budget still allows (before: none fits)."""
    spent = sum(run_seconds.get(x, 0.0) * replicates * pairs[x] for x in pairs)
    for n in sorted((g for g in design.grid() if before < g <= look), reverse=True):
        cost = sum(run_seconds.get(x, 0.0) * replicates * (n - pairs[x]) for x in training)
        if spent + cost <= design.max_seconds:  # type: ignore[operator]
            return n
    return before


def _searches_within_time(design: Design, run_seconds: Mapping[str, float], search_seconds: Mapping[str, float],
                          training: list[str], decisions: Decisions, before: int, look: int, pairs: int) -> int:
    """The planned look (in searches) cut back to what the training-time budget still allows (before: none fits)."""
    def cost(x: str, searches: int, per_search: int) -> float:
        return searches * (search_seconds.get(x, 0.0) + per_search * run_seconds.get(x, 0.0))

    spent = sum(cost(x, decisions.searches[x], decisions.pairs[x]) for x in decisions.searches)
    for n in sorted((g for g in design.search_grid() if before < g <= look), reverse=True):
        more = sum(cost(x, n, pairs) - cost(x, decisions.searches[x], decisions.pairs[x]) for x in training)
        if spent + more <= design.max_seconds:  # type: ignore[operator]
            return n
    return before


def _improvement(values: Values, reference: str, cell: Cell) -> Improvement:
    keys = [(r, s) for r in range(cell.searches) for s in range(cell.pairs)]
    mine, theirs = values[cell.method][cell.metric], values[reference][cell.metric]
    return paired_improvement([mine[k] for k in keys], [theirs[k] for k in keys],
                              [k[0] for k in keys] if cell.searches > 1 else None)
