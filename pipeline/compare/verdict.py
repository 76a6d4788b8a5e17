"""The verdict of a campaign: does any method, each tuned on equal footing, beat a tuned ERM, on which
metric, and how sure is that.

Every method's tuned configuration is re-trained on the same (split, seed) pairs as ERM's (pair k: training
seed k, split seed base + k with `resplit`; the search's split for all without), so each difference is paired.
The decisions are pipeline/compare/decision.py's: each primary (method, metric) cell ends in better, worse,
equivalent (inside plus or minus the metric's smallest effect) or undecided, read off one simultaneous interval,
with the pairs added in rounds planned for power; the other metrics are shown beside them with per-comparison
intervals and no word. Beside each difference, the probability of improvement P(method > ERM) over the same pairs
with its Clopper-Pearson interval. Warnings name what a statistician would check first: a class no run ever gets
right, a run that collapsed against its method's others, runs near chance, a primary metric on few test images,
a tuned value on a bound of its range.

Reads only the tool's own tables: no torch, no Ax.
"""
from __future__ import annotations

import statistics
from dataclasses import MISSING, dataclass, field
from typing import Any, Mapping, Sequence, cast

from pipeline.search.bounds import BoundFlag, bound_flags, searched_ranges
from pipeline.compare.budget_curves import BudgetCurve, budget_note, campaign_curves, half_budget, order_at
from pipeline.compare.decision import Axis, Cell, Decisions, Design, Outcome, decide
from pipeline.compare.luck import collapsed_runs, search_luck
from pipeline.spec.campaign_config import MAX_SEEDS, REFERENCE
from pipeline.errors import UserError
from pipeline.methods import parse_method
from pipeline.methods.declarations import FAMILIES, PARTS
from pipeline.compare.evaluate import COMPARE_METRICS, run_metrics
from pipeline.compare.stats import CONFIDENCE, PairedDifference, clustered_difference, holm, mean_interval, \
    paired_difference, t_quantile, trimmed
from pipeline.store import CampaignRecord, EvaluationRecord, Store, TrialStatus, Widening, campaign_pick

METRICS = tuple(key for key, _ in COMPARE_METRICS)  # the headline metrics, each compared with ERM
METRIC_LABELS = {**dict(COMPARE_METRICS), "smallest_class_accuracy": "rare class"}  # short: the verdict fits 80 columns
READING_LABELS = {"test_accuracy": "test accuracy", "test_balanced_accuracy": "balanced accuracy",
                  "test_worst_class_accuracy": "worst-class accuracy",
                  "smallest_class_accuracy": "the rare class"}
ALPHA = 1 - CONFIDENCE
RARE_SHARE = 0.5  # a class with at most this share of the largest class's training examples makes the data imbalanced
NEAR_CHANCE = 0.05  # a run whose balanced accuracy is within this of chance (1 / classes) learned next to nothing

Key = tuple[int, int]  # (search replicate, training seed)
Values = Mapping[str, Mapping[str, Mapping[Key, float]]]  # method -> metric -> key -> value


def compare_runs(a: Mapping[Key, float], b: Mapping[Key, float], keys: Sequence[Key],
                 replicates: int = 1) -> PairedDifference:
    """The paired difference a - b on `keys`: over the pairs with one search, over the searches' mean
    differences with several (the replicate is the unit: runs of one search are not independent pairs)."""
    if replicates > 1:
        return clustered_difference([a[k] for k in keys], [b[k] for k in keys], [k[0] for k in keys])
    return paired_difference([a[k] for k in keys], [b[k] for k in keys])


@dataclass
class MethodResult:
    """One method of a campaign: what was tuned, what it cost, how its re-trained runs did."""

    method: str
    studies: list[str]
    parameters: list[dict]  # the tuned (best trial's searched) parameters, one per search replicate
    seeds: int  # training seeds re-trained, per replicate
    means: dict[str, tuple[float, float | None]]  # metric -> mean and 95% half-width over all its runs
    trials: int  # completed trials, over replicates
    budget: int
    epochs: int  # training epochs spent searching
    search_seconds: float
    retrain_seconds: float
    missing: str | None = None  # why it has no verdict (no completed trial, no re-trained run)
    bound_flags: list[BoundFlag] = field(default_factory=list)  # tuned values on a bound of their range, all replicates
    # the ends of its ranges its searches widened (pipeline/search/bounds.py), with the study that widened each
    widenings: list[tuple[str, Widening]] = field(default_factory=list)
    searches: int = 1  # searches run (each a study), with re-trained runs
    collapsed: int = 0  # re-trained runs that collapsed (pipeline/compare/luck.py's rule), of all its runs
    runs: int = 0
    luck: dict[str, float] = field(default_factory=dict)  # metric -> its search luck's SD (two or more searches)


@dataclass(frozen=True)
class RareClass:
    """The class with the fewest training examples, and how many images its accuracies rest on: the range over
    ERM's re-trained runs (splits may differ between pairs); val and test are None for runs stored before 0.7.0."""

    name: str
    train: tuple[int, int]
    val: tuple[int, int] | None
    test: tuple[int, int] | None
    fewest_test: int | None  # the fewest test images of any class in any run: what the worst class may rest on
    largest_train: int = 0  # the most training examples of any class (in ERM's first run)

    @property
    def imbalanced(self) -> bool:
        """Whether the rare class is rare: at most RARE_SHARE of the largest class in training."""
        return self.train[1] <= RARE_SHARE * self.largest_train


FEW_TEST_IMAGES = 10  # a class's test accuracy resting on fewer images than this is marked, its interval not exact


@dataclass(frozen=True)
class VerdictWarning:
    """Something a statistician would check before trusting the verdict: its kind, the sentence, and what it
    names (a method, a run's pair, a class, a score)."""

    kind: str  # class_never_right | collapsed_run | near_chance | few_test_images | on_bound | constant_metric
    text: str
    method: str | None = None
    pair: int | None = None  # the run's training seed (with several searches: within `replicate`)
    replicate: int | None = None
    class_name: str | None = None
    score: float | None = None


def shown(json: str | None, mlflow: str | None = None, mlflow_none: str | None = None, default: Any = MISSING) -> Any:
    """A record field's name in each format that renders it: its JSON key, and its MLflow name (a metric for a
    number, a tag for a word; None: not exported; `mlflow_none`: the tag it takes when the field is None), and its
    default where it has one. The renderers walk these (dataclasses.fields), so a new field is shown everywhere it
    declares."""
    return field(default=default, metadata={"json": json, "mlflow": mlflow, "mlflow_none": mlflow_none})


@dataclass(frozen=True)
class ImprovementRecord:
    """P(method > ERM) on the cell's pairs with its Clopper-Pearson interval, as every format shows it (the MLflow
    names are suffixes of the cell field's: p_improvement, p_improvement_low, p_improvement_high)."""

    probability: float = shown("probability", mlflow="")
    low: float = shown("low", mlflow="low")
    high: float = shown("high", mlflow="high")
    units: int = shown("units")
    confidence: float = shown("confidence")


@dataclass(frozen=True)
class VerdictCell:
    """One method against tuned ERM on one metric, as the verdict shows it: the terminal table and the page (its
    row), `report --verdict --format json` (its `vs_erm` entry) and MLflow (METHOD.METRIC.NAME) all render this
    record by its fields' declared names (`shown`); method and metric place it."""

    method: str = shown(None)
    metric: str = shown(None)
    difference: float = shown("difference", mlflow="difference")  # method - ERM, mean over the units
    low: float | None = shown("low", mlflow="low")  # the interval (simultaneous for a primary cell); None: none
    high: float | None = shown("high", mlflow="high")
    confidence: float = shown("confidence")
    primary: bool = shown("primary")  # decided on: the cell has a word
    outcome: Outcome | None = shown("verdict", mlflow="verdict", mlflow_none="secondary")
    open: bool = shown("open")  # undecided only for now: the next planned round may decide it
    why: str | None = shown("why")  # how it was decided, or why it is not
    needed_pairs: int | None = shown("needed_pairs")  # pairs an undecided cell would need for 80% power
    pairs: int = shown("pairs")  # pairs per replicate
    units: int = shown("units")  # units of the test: the pairs, or the searches with several replicates
    exact: bool = shown("exact")  # the sign-flip test's, not a t interval: the differences had no spread
    smallest_effect: float | None = shown("smallest_effect")  # a primary cell's smallest effect that matters
    level: float = shown("level")  # the error rate spent at the look that gave it
    family: int = shown("family")  # primary cells
    p_improvement: ImprovementRecord | None = shown("p_improvement", mlflow="p_improvement")
    same_as_erm: bool = shown("same_as_erm")  # the method's runs equal ERM's: it is ERM here
    # the two one-sided tests' interval equivalence is read off (1 - 2 level / family); None where none
    equivalence_low: float | None = shown("equivalence_low", default=None)
    equivalence_high: float | None = shown("equivalence_high", default=None)
    searches: int = shown("searches", default=1)  # the searches the cell rests on
    # "methods" (several searches each), or "configurations" (one search per method)
    about: str = shown("about", default="methods")
    needed_unit: str = shown("needed_unit", default="pairs")  # what needed_pairs counts: pairs, or searches


def verdict_cell(c: Cell, same_as_erm: bool = False, about: str = "methods") -> VerdictCell:
    """The record of a decision's (or a secondary) cell, as every format shows it."""
    i = c.improvement
    return VerdictCell(c.method, c.metric, c.mean, c.low, c.high, c.confidence, c.outcome is not None, c.outcome,
                       c.open, c.why or None, c.needed, c.pairs, c.units, c.exact,
                       c.smallest if c.outcome is not None else None, c.level, c.family,
                       None if i is None else ImprovementRecord(i.probability, i.low, i.high, i.units, CONFIDENCE),
                       same_as_erm, None if c.equivalence is None else c.equivalence[0],
                       None if c.equivalence is None else c.equivalence[1], c.searches, about, c.needed_unit)


@dataclass
class Verdict:
    campaign: str
    design: Design
    replicates: int
    methods: list[MethodResult]
    decisions: Decisions
    pairs: list[dict] = field(default_factory=list)  # the pairwise ranking, per metric
    reading: str = ""
    varies: str = ""  # what varies between the paired runs, so what the intervals contain (in words)
    same_as_erm: dict[str, str] = field(default_factory=dict)  # method -> why it is ERM here, in words
    rare: RareClass | None = None  # the rare class and its image counts, from ERM's runs
    curves: list[BudgetCurve] = field(default_factory=list)  # each method's expected best after n trials
    budget_note: str = ""  # whether the order by expected best changes between half and the full budget, in words
    warnings: list[VerdictWarning] = field(default_factory=list)
    # every method but ERM against ERM on every metric, primary cells first: what each format renders
    records: dict[tuple[str, str], VerdictCell] = field(default_factory=dict)
    # what the words are about: "methods" (two or more searches each, their luck counted), or "configurations" (one
    # search per method: the configurations those searches found)
    about: str = "methods"

    @property
    def cells(self) -> dict[tuple[str, str], Cell]:
        """The primary cells: the decisions."""
        return self.decisions.cells

    @property
    def secondary(self) -> dict[tuple[str, str], Cell]:
        """The other metrics' differences: 95% intervals, no word."""
        return self.decisions.secondary

    def cell(self, method: str, metric: str) -> Cell | None:
        """The method's cell on `metric`, primary or secondary."""
        return self.cells.get((method, metric)) or self.secondary.get((method, metric))


def campaign_runs(store: Store, campaign: CampaignRecord) -> dict[str, dict[Key, EvaluationRecord]]:
    """The re-trained runs of each method's tuned configuration, keyed by (replicate, pair): pair k of replicate r
    trained on the same seed and split for every method (CampaignRecord.pair reads it from the training seed)."""
    runs: dict[str, dict[Key, EvaluationRecord]] = {}
    for method in campaign.methods:
        runs[method] = {}
        for replicate, name in enumerate(campaign.study_names(method)):
            study = store.study(name)
            if study is None:
                continue
            for run in store.evaluations(study.id):
                if run.variant == "tuned" and (pair := campaign.pair(replicate, run.seed)) is not None:
                    runs[method][(replicate, pair)] = run
    return runs


def run_values(runs: dict[str, dict[Key, EvaluationRecord]]) -> dict[str, dict[str, dict[Key, float]]]:
    """Each method's headline metrics per (replicate, seed), as the comparisons read them."""
    values: dict[str, dict[str, dict[Key, float]]] = {}
    for method, by_key in runs.items():
        values[method] = {metric: {} for metric in METRICS}
        for key, run in by_key.items():
            measured = run_metrics(run)
            for metric in METRICS:
                values[method][metric][key] = measured[metric]
    return values


def _method_result(store: Store, campaign: CampaignRecord, method: str, runs: dict[Key, EvaluationRecord],
                   trim: float) -> MethodResult:
    parameters, trials, epochs, seconds, missing, studies = [], 0, 0, 0.0, None, []
    flags: list[BoundFlag] = []
    widened: list[tuple[str, Widening]] = []
    budget = 0
    for replicate, name in enumerate(campaign.study_names(method)):
        study = store.study(name)
        if study is None:  # a later round's search not run (or not needed): only the first one must be there
            missing = f"study {name} is not stored" if replicate == 0 else missing
            continue
        studies.append(name)
        stored = store.trials(study.id)
        best = campaign_pick(study, stored, campaign.evaluation.pick)
        parameters.append({} if best is None else best.parameters)
        moved = store.widenings(study.id)
        widened += [(name, w) for w in moved]
        budget += study.study.budget.trials + (study.study.budget.widen_trials if moved else 0)
        searched = searched_ranges(study.study.search, moved)
        flags += [] if best is None else [f for f in bound_flags(searched, best.parameters)
                                          if (f.parameter, f.bound) not in {(g.parameter, g.bound) for g in flags}]
        for t in stored:
            if t.ran:  # trained: an epoch prefix cost nothing more, an early-stopped trial its epochs run
                trials += t.status != TrialStatus.FAILED
                seconds += t.train_seconds or 0.0
                epochs += len(t.epochs) if t.status == TrialStatus.EARLY_STOPPED else int(
                    t.parameters.get("epochs", study.study.fixed.get("epochs", 0)))
        if best is None:
            missing = f"study {name} has no completed trial"
    searches = sorted({r for r, _ in runs})
    per_replicate = [sum(1 for (r, _) in runs if r == replicate) for replicate in searches] or [0]
    if not runs and missing is None:
        missing = "no re-trained run yet"
    means, luck, collapsed = {}, {}, 0
    if runs:
        measured = {key: run_metrics(run) for key, run in runs.items()}
        by_metric = {metric: {key: m[metric] for key, m in measured.items()} for metric in METRICS}
        means = {metric: method_mean(values, len(searches), trim) for metric, values in by_metric.items()}
        luck = {metric: found[method] for metric, values in by_metric.items()
                if (found := search_luck({method: values}, trim)) and method in found}
        collapsed = len(collapsed_runs({method: by_metric["test_balanced_accuracy"]})[method])
    return MethodResult(method, studies or campaign.study_names(method)[:1], parameters, min(per_replicate), means,
                        trials, budget or campaign.budget.get("trials", 0), epochs, seconds,
                        sum(run.train_seconds for run in runs.values()), missing, flags, widened, max(1, len(searches)),
                        collapsed, len(runs), luck)


def method_mean(values: Mapping[Key, float], replicates: int, trim: float = 0.0) -> tuple[float, float | None]:
    """A method's mean over its runs and the half-width of its 95% interval, as the design's unit takes it: with
    one search, Yuen's trimmed mean of the runs (the mean and Student's t at trim 0); with several, Student's t over
    the searches' trimmed means (the runs of one search share its luck: pooled as independent, the interval covered
    85-90% in `bench verdict`'s simulations with search luck)."""
    if replicates > 1:
        by_search: dict[int, list[float]] = {}
        for (replicate, _), value in values.items():
            by_search.setdefault(replicate, []).append(value)
        return mean_interval([trimmed(v, trim)[0] for v in by_search.values()])
    runs = list(values.values())
    mean, se, df = trimmed(runs, trim)
    if len(runs) < 2 or not se > 0:  # one run, or no spread in the trimmed middle: the plain interval
        return mean_interval(runs)
    return mean, t_quantile(0.5 + CONFIDENCE / 2, df) * se


def accuracy_bounds(mean: float, half: float | None) -> tuple[float, float] | None:
    """A mean accuracy's interval kept inside [0, 1], as the verdict prints it; None without a half-width."""
    return None if half is None else (max(0.0, mean - half), min(1.0, mean + half))


def objective_of(campaign: CampaignRecord) -> str:
    """The objective the campaign's studies were tuned on (ERM's study's)."""
    return str(campaign.config.get("studies", {}).get(REFERENCE, {}).get("objective", "val_accuracy"))


def default_primary(objective: str, rare: RareClass | None) -> tuple[str, ...]:
    """The metrics a campaign decides on when its file does not say: the test counterpart of the objective
    (balanced accuracy when it has none), and the rare class where the data has one (RareClass.imbalanced)."""
    counterpart = objective.replace("val_", "test_", 1)
    primary = [counterpart if counterpart in METRICS else "test_balanced_accuracy"]
    if rare is not None and rare.imbalanced and "smallest_class_accuracy" not in primary:
        primary.append("smallest_class_accuracy")
    return tuple(primary)


def design_of(campaign: CampaignRecord, rare: RareClass | None) -> Design:
    """What the campaign decides on and how it may spend its runs: its [evaluate] table, its objective and the rare
    class its runs show, its searches (fixed, or rounds of them up to max_replicates) and its trials per search."""
    evaluation = campaign.evaluation
    return Design(evaluation.primary or default_primary(objective_of(campaign), rare), evaluation.effects(),
                  evaluation.seeds, evaluation.seeds_per_round,
                  evaluation.max_seeds or max(evaluation.seeds, MAX_SEEDS), ALPHA,
                  None if evaluation.max_minutes is None else 60 * evaluation.max_minutes,
                  campaign.replicates, int(campaign.config.get("replicates_per_round") or 2), campaign.max_replicates,
                  evaluation.trim or 0.0, float(campaign.budget.get("trials") or 8))


def run_seconds(runs: Mapping[str, Mapping[Key, EvaluationRecord]]) -> dict[str, float]:
    """Each method's mean training seconds per re-training run (what a round's estimate and the time budget use)."""
    return {method: statistics.fmean(r.train_seconds for r in by_key.values())
            for method, by_key in runs.items() if by_key}


def search_seconds(store: Store, campaign: CampaignRecord) -> dict[str, float]:
    """Each method's mean training seconds per search (its stored trials' together), for a round's estimate."""
    found = {}
    for method in campaign.methods:
        totals = []
        for name in campaign.study_names(method):
            if (study := store.study(name)) is not None:
                trials = [t.train_seconds or 0.0 for t in store.trials(study.id) if t.ran]
                if trials and len(trials) >= study.study.budget.trials:
                    totals.append(sum(trials))
        if totals:
            found[method] = statistics.fmean(totals)
    return found


def campaign_decisions(store: Store, campaign: CampaignRecord, set_aside: Sequence[str] = ()) -> Decisions:
    """The campaign's decisions replayed on what is stored (the methods in `set_aside` left out): the cells, and
    the next round it plans."""
    runs = campaign_runs(store, campaign)
    methods = [m for m in campaign.methods if m not in set_aside]
    return decide(run_values(runs), methods, stored_design(campaign, rare_class(list(runs[REFERENCE].values()))),
                  run_seconds(runs), METRICS, search_seconds(store, campaign))


def stored_design(campaign: CampaignRecord, rare: RareClass | None) -> Design:
    """A stored campaign's design: its [evaluate] table, its searches, its objective and the rare class its runs
    show."""
    return design_of(campaign, rare)


def take_verdict(store: Store, campaign: CampaignRecord) -> Verdict:
    """The verdict from what is stored: every method's results and cost, its decisions against ERM, the
    pairwise ranking, the warnings and the reading in words."""
    runs = campaign_runs(store, campaign)
    rare = rare_class(list(runs[REFERENCE].values()))
    design = stored_design(campaign, rare)
    results = [_method_result(store, campaign, m, runs[m], design.trim) for m in campaign.methods]
    verdict = verdict_of(campaign.name, design, run_values(runs), results, variation(campaign), rare,
                         run_seconds(runs), run_warnings(runs, design), search_seconds(store, campaign))
    verdict.curves = campaign_curves(store, campaign)
    verdict.budget_note = budget_note(verdict.curves)
    if verdict.curves and order_at(verdict.curves, verdict.curves[0].budget) != order_at(
            verdict.curves, half_budget(verdict.curves[0].budget)):
        verdict.reading += f" T{verdict.budget_note[1:]}."  # "the order ... changes with the budget: ..."
    return verdict


def verdict_of(name: str, design: Design, values: Values, results: list[MethodResult],
               varies: str = "", rare: RareClass | None = None,
               seconds: Mapping[str, float] | None = None, warnings: Sequence[VerdictWarning] = (),
               per_search: Mapping[str, float] | None = None) -> Verdict:
    """The verdict from the runs' values (method -> metric -> (replicate, seed) -> value) and each method's
    result (`results`, ERM first): its decisions against ERM, the ranking, the warnings (the design's, and
    `warnings`: the runs' own) and the reading."""
    compared = [r.method for r in results if r.method == REFERENCE or not r.missing]
    decisions = decide(values, compared, design, seconds, METRICS, per_search)
    replicates = max(1, decisions.searches.get(REFERENCE, 0), design.searches if design.axis is Axis.PAIRS else 1)
    verdict = Verdict(name, design, replicates, results, decisions, varies=varies, rare=rare,
                      about="methods" if design.max_searches > 1 else "configurations")
    verdict.same_as_erm = {r.method: said for r in results
                           if r.method != REFERENCE and (said := _same_as_erm(r, values))}
    verdict.records = {key: verdict_cell(c, c.method in verdict.same_as_erm, verdict.about)
                       for key, c in [*decisions.cells.items(), *decisions.secondary.items()] if c.method != REFERENCE}
    verdict.pairs = pairwise_ranking(values, [r.method for r in results if r.seeds > 0])
    verdict.warnings = design_warnings(verdict) + list(warnings)
    verdict.reading = reading(verdict)
    return verdict


def rare_class(runs: Sequence[EvaluationRecord]) -> RareClass | None:
    """The class with the fewest training examples in `runs` (as run_metrics takes it) and its image counts."""
    if not runs:
        return None
    name = min(runs[0].train_class_counts, key=lambda c: runs[0].train_class_counts[c])

    def spread(counts: list[int]) -> tuple[int, int] | None:
        return (min(counts), max(counts)) if counts else None

    # per_class["counts"] holds images per class and split ({"val": {class: n}, "test": {...}}), not accuracies
    stored = [cast(Mapping[str, Mapping[str, int]], c) for run in runs if (c := run.per_class.get("counts"))]
    train = [run.train_class_counts[name] for run in runs]
    return RareClass(name, (min(train), max(train)),
                     spread([c["val"].get(name, 0) for c in stored]), spread([c["test"].get(name, 0) for c in stored]),
                     min((min(c["test"].values()) for c in stored), default=None),
                     max(runs[0].train_class_counts.values()))


FIXED_TEST_SETS = ("idx",)  # data sets whose test split is their own: resplit draws the validation carve again
FIXED_SPLITS = ("medmnist",)  # data sets whose three splits are their own: only a drawn rare class can vary


def variation(campaign: CampaignRecord) -> str:
    """What varies between a campaign's paired runs, so what its intervals contain, in words."""
    data = campaign.config.get("studies", {}).get(REFERENCE, {}).get("data", {})
    name, resplit = data.get("name"), campaign.evaluation.resplit
    fixed_test = name in FIXED_TEST_SETS or data.get("manifest") is not None
    rare = data.get("imbalance_class") is not None
    drawn = rare and data.get("rare_kept") == "drawn"  # a study's identity leaves out "first", as stored before it
    drawn_again = "the rare-class examples kept in training, drawn again per pair"
    pairs = "pair k trains on seed k and split seed base + k"
    if name in FIXED_SPLITS and not (resplit and drawn):
        kept = ", and so are the rare-class examples kept in training" if resplit and rare else ""
        varies = f"the training seed only (MedMNIST's splits are its own and fixed{kept})"
    elif not resplit:
        varies = "the training seed only (every run uses the search's split, resplit = false)"
    elif name in FIXED_SPLITS:
        varies = f"the training seed and {drawn_again} (MedMNIST's splits are its own and fixed): {pairs}"
    elif fixed_test and drawn:
        varies = (f"the training seed, the validation carve (the test set is the data set's own) and {drawn_again}: "
                  f"{pairs}")
    elif fixed_test:
        first = "; training keeps the first rare-class examples the carve leaves" if rare else ""
        varies = f"the training seed and the validation carve (the test set is the data set's own{first}): {pairs}"
    else:
        varies = f"the training seed and the whole split: {pairs}"
    pilot = max(1, campaign.replicates)
    if campaign.max_replicates > pilot:
        varies += (f"; and the search's luck: {pilot} searches per method, then rounds of more up to "
                   f"{campaign.max_replicates}, " + ("each on a split of its own, " if campaign.evaluation.resplit
                                                     else "") + "the search the unit of the test")
    elif campaign.replicates > 1:
        varies += (f"; and the search's luck: {campaign.replicates} searches per method, "
                   + ("each on a split of its own, " if campaign.evaluation.resplit else "")
                   + "the search the unit of the test")
    else:
        varies += ("; not the search's luck (one search per method): the verdict is about these configurations, not "
                   "the methods (2 or more searches count it)")
    return varies


def _same_as_erm(result: MethodResult, values: Values) -> str:
    """Why `result`'s method is ERM here when its re-trained runs equal ERM's exactly on every pair and metric
    (ls tuned to alpha = 0, say); empty otherwise."""
    mine, reference = values.get(result.method), values.get(REFERENCE)
    if not mine or not reference:
        return ""
    keys = [k for k in mine[METRICS[0]] if all(k in reference[m] for m in METRICS)]
    if len(keys) < 2 or any(mine[m][k] != reference[m][k] for m in METRICS for k in keys):
        return ""
    shared = {p.name for p in parse_method(REFERENCE).params}  # lr_head and the like: ERM takes them too
    own = [f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
           for p in result.parameters[:1] for k, v in p.items() if k not in shared]
    return (f"{result.method} tuned to {', '.join(own) or 'its tuned values'}: it is ERM here (its re-trained runs "
            f"equal ERM's on all {len(keys)} pairs)")


def pairwise_ranking(values: Values, methods: Sequence[str], alpha: float = ALPHA) -> list[dict]:
    """Per metric, the methods by mean on the pairs all of them ran, and every pair's paired difference (over the
    searches' means where those pairs come from several searches) with Holm's correction over all pairs and metrics
    (a family of its own)."""
    if len(methods) < 2:
        return []
    common = [k for k in values[methods[0]][METRICS[0]]
              if all(k in values[m][metric] for m in methods for metric in METRICS)]
    if len(common) < 2:
        return []
    replicates = len({k[0] for k in common})
    pairs = [(a, b, metric) for metric in METRICS for i, a in enumerate(methods) for b in methods[i + 1:]]
    differences = [compare_runs(values[a][metric], values[b][metric], common, replicates) for a, b, metric in pairs]
    adjusted = holm([1.0 if d.p_value is None else d.p_value for d in differences])
    ranking = []
    for metric in METRICS:
        means = {m: sum(values[m][metric][k] for k in common) / len(common) for m in methods}
        order = sorted(methods, key=lambda m: -means[m])
        found = {frozenset((a, b)): (d, p) for (a, b, mm), d, p in zip(pairs, differences, adjusted) if mm == metric}
        steps = []
        for a, b in zip(order, order[1:]):
            d, p = found[frozenset((a, b))]
            steps.append({"leader": a, "follower": b, "lead": abs(d.mean), "adjusted_p": p, "detectable": p < alpha})
        ranking.append({"metric": metric, "order": order, "means": means, "seeds": len(common), "steps": steps,
                        "pairs": [{"a": a, "b": b, "difference": d.mean, "adjusted_p": p}
                                  for (a, b, mm), d, p in zip(pairs, differences, adjusted) if mm == metric]})
    return ranking


def design_warnings(verdict: Verdict) -> list[VerdictWarning]:
    """What the design itself warns of: a metric every run scored the same on, a primary metric resting on so
    few test images that one image moves it by more than half its smallest effect, tuned values on a bound."""
    found = [VerdictWarning("constant_metric", f"every run of every method scored the same on "
                                               f"{READING_LABELS[metric]}: nothing to compare, left out of the "
                                               "decisions", class_name=None)
             for metric in verdict.decisions.constant]
    rare = verdict.rare
    images = {"smallest_class_accuracy": None if rare is None or rare.test is None else rare.test[0],
              "test_worst_class_accuracy": None if rare is None else rare.fewest_test}
    for metric in verdict.design.primary:
        count = None if metric in verdict.decisions.constant else images.get(metric)
        smallest = verdict.design.smallest_effect[metric]
        if count is not None and count > 0 and 1 / count > smallest / 2:
            what = f"the rare class ({rare.name!r})" if metric == "smallest_class_accuracy" and rare else \
                READING_LABELS[metric]
            found.append(VerdictWarning(
                "few_test_images", f"{what} rests on {count} test images: one image "
                f"moves it by {100 / count:.1f} points, more than half the smallest effect ({100 * smallest:g})",
                class_name=rare.name if metric == "smallest_class_accuracy" and rare else None))
    for m in verdict.methods:
        for flag in m.bound_flags:
            found.append(VerdictWarning("on_bound", flag.text(m.method), method=m.method))
    return found


def run_warnings(runs: Mapping[str, Mapping[Key, EvaluationRecord]], design: Design) -> list[VerdictWarning]:
    """What the runs warn of: a class no run of any method ever gets right, a run far below its method's others
    (training collapsed), runs near chance."""
    found: list[VerdictWarning] = []
    every = [run for by_key in runs.values() for run in by_key.values()]
    if not every:
        return found
    classes = sorted({c for run in every for c in run.per_class.get("test", {})})
    for name in classes:
        if all(run.per_class.get("test", {}).get(name, 0.0) == 0.0 for run in every):
            found.append(VerdictWarning("class_never_right", f"class {name!r}: no run of any method got one of its "
                                                             "test images right", class_name=name))
    metric = next((m for m in design.primary if m != "smallest_class_accuracy"), "test_balanced_accuracy")
    scores = {method: {key: run_metrics(run)[metric] for key, run in by_key.items()} for method, by_key in runs.items()}
    fallen = collapsed_runs(scores)
    for method, by_key in runs.items():
        mine = scores[method]
        for replicate, pair in sorted(fallen[method]):
            middle = statistics.median(mine.values())
            score = mine[(replicate, pair)]
            found.append(VerdictWarning(
                "collapsed_run", f"{method}'s run on pair {pair}" + (f" of search {replicate}" if replicate else "")
                + f" scored {100 * score:.1f} on {READING_LABELS[metric]} against a median of {100 * middle:.1f} "
                "for its other runs: its training may have collapsed", method=method, pair=pair,
                replicate=replicate, score=score))
        chance = [key for key, run in by_key.items()
                  if run.per_class.get("test") and run.metrics.get("test_balanced_accuracy", 1.0)
                  <= 1 / len(run.per_class["test"]) + NEAR_CHANCE]
        if chance:
            found.append(VerdictWarning("near_chance", f"{method}: {len(chance)} of {len(by_key)} runs score within "
                                                       f"{100 * NEAR_CHANCE:.0f} points of chance on balanced accuracy",
                                        method=method))
    return found


def signed_points(value: float) -> str:
    """A difference of fractions in signed percentage points, one decimal: +2.2."""
    return f"{100 * value:+.1f}"


def reading(verdict: Verdict) -> str:
    """The verdict in words, generated from the decisions: what is better, worse or equivalent, what is not
    decided and why, then what the campaign does next."""
    if any(m.method == REFERENCE and m.missing for m in verdict.methods):
        return "No verdict yet: tuned ERM has no re-trained runs to compare with."
    cells = verdict.cells
    sentences = []
    for m in verdict.methods:
        if m.method == REFERENCE or m.method in verdict.same_as_erm:
            continue
        mine = [c for c in cells.values() if c.method == m.method]
        better = [_stated(c) for c in mine if c.outcome is Outcome.BETTER]
        worse = [_stated(c) for c in mine if c.outcome is Outcome.WORSE]
        same = [_stated(c, equivalence=True) for c in mine if c.outcome is Outcome.EQUIVALENT]
        parts = ([f"beats ERM on {_join(better)}"] if better else []) + (
            [f"falls behind ERM on {_join(worse)}"] if worse else []) + (
            [f"is equivalent to ERM on {_join(same)}"] if same else [])
        if parts:
            sentences.append(f"{m.method} {_join(parts)}")
    sentences += list(verdict.same_as_erm.values())
    undecided = [c for c in cells.values() if c.outcome is Outcome.UNDECIDED and not c.open
                 and c.method not in verdict.same_as_erm]
    if undecided:
        sentences.append("Undecided: " + "; ".join(f"{c.method} on {READING_LABELS[c.metric]} ({c.why})"
                                                   for c in undecided))
    losing = {c.method for c in cells.values() if c.outcome is Outcome.WORSE}
    behind = {m: at for m in sorted(losing, key=_declared_order) if (at := contains_erm_at(m))}
    if behind:
        sentences.append(f"{_join(list(behind))} {'contains' if len(behind) == 1 else 'contain'} ERM "
                         f"({'; '.join(f'{m} at {at}' for m, at in behind.items())}), so behind ERM after tuning "
                         "means its search chose badly, not that the method hurts: widen its range or repeat the "
                         "search (replicates)")
    widened = [f"{m.method}'s {', '.join(sorted({w.parameter for _, w in m.widenings}))}" for m in verdict.methods
               if m.widenings]
    if widened:
        sentences.append(f"Widened where the search's best sat on a bound: {_join(widened)} (the cost table says "
                         "from what to what)")
    bounded = [f"{m.method}'s {', '.join(f.short for f in m.bound_flags)}" for m in verdict.methods if m.bound_flags]
    if bounded:
        sentences.append(f"Tuned onto a bound of its range: {_join(bounded)}; the search may have been cut short "
                         "there, so widen the range before trusting a comparison that involves it")
    checks = [_check(w) for w in verdict.warnings if w.kind in CHECKS]
    if checks:
        sentences.append(f"Check before trusting it: {_join(sorted(set(checks)))} (the warnings above)")
    text = "".join(f"{s}. " for s in sentences)
    if verdict.about == "configurations" and text:
        text = ("About the configurations one search per method found, not the methods (another search finds others; "
                "2 or more searches count that): " + text)
    decisions = verdict.decisions
    if decisions.next_pairs is not None and decisions.needing:
        if decisions.axis is Axis.SEARCHES:
            text += (f"Still open: the next round searches {_join(decisions.needing)} and ERM up to "
                     f"{decisions.next_searches} times, each search re-trained on {decisions.next_pairs} pairs "
                     "(compare resumes it). ")
        else:
            text += (f"Still open: the next round re-trains {_join(decisions.needing)} and ERM up to "
                     f"{decisions.next_pairs} pairs (compare resumes it). ")
    missing = [m for m in verdict.methods if m.missing and m.method != REFERENCE]
    if missing:
        text += "Without a verdict: " + "; ".join(f"{m.method} ({m.missing})" for m in missing) + ". "
    return text.strip()


CHECKS = ("class_never_right", "collapsed_run", "near_chance", "few_test_images")  # the warnings the reading names


def _check(w: VerdictWarning) -> str:
    """A warning in a few words for the reading."""
    if w.kind == "class_never_right":
        return f"class {w.class_name!r} is never right"
    if w.kind == "collapsed_run":
        return f"{w.method}'s run on pair {w.pair} collapsed"
    if w.kind == "near_chance":
        return f"{w.method} has runs near chance"
    return "a decision rests on few test images"


def contains_erm_at(method: str) -> str | None:
    """Where `method` is ERM at values of its own parameters ("alpha = 0"), from its parts' declarations: tuned
    honestly, it cannot be truly worse than ERM. None when a part it names declares no such value."""
    try:
        parts = [PARTS[name] for name in parse_method(method).parts]
    except UserError:  # a method no longer declared: nothing to say
        return None
    named = [p for p in parts if p is not FAMILIES[p.family].default]  # erm, uniform: ERM already
    if not named or any(p.contains_erm_at is None for p in named):
        return None
    return " and ".join(p.contains_erm_at for p in named if p.contains_erm_at)


def _declared_order(method: str) -> tuple[int, ...]:
    """Where a method's parts stand in the declarations (ls before hws), so that the reading names them in a
    fixed order."""
    order = list(PARTS)
    return tuple(sorted(order.index(p) for p in method.split("+") if p in order))


def _stated(c: Cell, equivalence: bool = False) -> str:
    """A decided cell in words: the metric, the difference and its interval in points."""
    interval = "" if c.low is None or c.high is None else f" [{signed_points(c.low)}, {signed_points(c.high)}]"
    if equivalence:
        return f"{READING_LABELS[c.metric]} (within ±{100 * c.smallest:g} points:{interval or ' identical runs'})"
    return f"{READING_LABELS[c.metric]} ({signed_points(c.mean)} points{interval})"


def _join(items: list[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]
