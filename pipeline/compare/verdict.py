"""The verdict of a campaign: does any method, each tuned on equal footing, beat a tuned ERM, on which
metric, and how sure is that.

Every method's tuned configuration is re-trained on the same (split, seed) pairs as ERM's (pair k: training
seed k, split seed base + k with `resplit`; the search's split for all without), so each difference is
paired: a paired t test per (method, metric), Holm's correction over the whole family of methods x metrics,
and simultaneous (Bonferroni) intervals. With several search replicates the replicate is the unit of the
test (stats.clustered_difference): the runs of one search share its luck. Beside each difference, the
probability of improvement P(method > ERM) over the same pairs, with a bootstrap interval.

Seeds may come in rounds (looks): look k spends its share of the 5% error rate (O'Brien-Fleming-type alpha
spending, pipeline/stats.look_alphas) on Holm over the whole family, a comparison is decided once its
adjusted p falls below that share, or set aside as futile once even its observed trend carried to the last
look would not cross; a method stops receiving seeds once every one of its comparisons is decided. The
union bound over looks keeps the chance of any false "better" or "worse" in the campaign at most 5%.

Reads only the tool's own tables: no torch, no Ax.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from pipeline.search.bounds import BoundFlag, bound_flags
from pipeline.compare.budget_curves import BudgetCurve, budget_note, campaign_curves, half_budget, order_at
from pipeline.spec.campaign_config import REFERENCE
from pipeline.methods import parse_method
from pipeline.compare.evaluate import COMPARE_METRICS, run_metrics
from pipeline.compare.stats import (CONFIDENCE, Improvement, PairedDifference, clustered_difference, holm, look_alphas,
                            mean_interval, paired_difference, probability_of_improvement, simultaneous_confidence,
                            t_quantile)
from pipeline.store import CampaignRecord, EvaluationRecord, Store, TrialStatus, picked_trial

METRICS = tuple(key for key, _ in COMPARE_METRICS)  # the headline metrics, each compared with ERM
METRIC_LABELS = {**dict(COMPARE_METRICS), "smallest_class_accuracy": "rare class"}  # short: the verdict fits 80 columns
READING_LABELS = {"test_accuracy": "test accuracy", "test_balanced_accuracy": "balanced accuracy",
                  "test_worst_class_accuracy": "worst-class accuracy",
                  "smallest_class_accuracy": "the rare class"}
ALPHA = 1 - CONFIDENCE
BETTER, WORSE, NO_DIFFERENCE, OPEN = "better", "worse", "no detectable difference", "open"

Key = tuple[int, int]  # (search replicate, training seed)
Values = Mapping[str, Mapping[str, Mapping[Key, float]]]  # method -> metric -> key -> value


@dataclass(frozen=True)
class Comparison:
    """One method against ERM on one metric, at the look that decided it (or the last one it had)."""

    method: str
    metric: str
    difference: PairedDifference  # method - ERM, paired on `seeds` keys
    adjusted_p: float | None  # Holm-adjusted over the whole family at that look
    level: float  # the error rate the adjusted p was held to at that look
    family: int  # comparisons in the family (methods x metrics)
    low: float | None  # the simultaneous interval of the difference, within [-1, 1] where accuracies can differ
    high: float | None
    label: str  # better | worse | no detectable difference | open
    seeds: int  # paired values the decision rests on
    how: str  # "boundary", "futility", "last look" or "open"
    improvement: Improvement | None = None  # P(method > ERM) on the same pairs (take_verdict fills it in)


def _keys(replicates: int, seeds: int) -> list[Key]:
    return [(r, s) for r in range(replicates) for s in range(seeds)]


def _has(values: Mapping[str, Mapping[Key, float]], keys: Sequence[Key]) -> bool:
    return all(key in values[metric] for metric in METRICS for key in keys)


def compare_runs(a: Mapping[Key, float], b: Mapping[Key, float], keys: Sequence[Key],
                 replicates: int = 1) -> PairedDifference:
    """The paired difference a - b on `keys`: over the pairs with one search, over the searches' mean
    differences with several (the replicate is the unit: runs of one search are not independent pairs)."""
    if replicates > 1:
        return clustered_difference([a[k] for k in keys], [b[k] for k in keys], [k[0] for k in keys])
    return paired_difference([a[k] for k in keys], [b[k] for k in keys])


def improvement(a: Mapping[Key, float], b: Mapping[Key, float], keys: Sequence[Key],
                replicates: int = 1) -> Improvement:
    """P(a > b) over the pairs `keys`, each search's share first with several searches (stats)."""
    clusters = [k[0] for k in keys] if replicates > 1 else None
    return probability_of_improvement([a[k] for k in keys], [b[k] for k in keys], clusters)


def _futile(difference: PairedDifference, final_pairs: int, level: float, family: int) -> bool:
    """Whether even the observed mean difference and spread, carried to `final_pairs` pairs, would stay
    inside the last look's Bonferroni boundary: then more seeds are very unlikely to decide it. Stopping
    there never adds a rejection, so the error rate stays bounded whatever this rule says."""
    if difference.standard_error is None or difference.standard_error == 0:
        return difference.mean == 0
    spread = difference.standard_error * math.sqrt(difference.n)
    projected = abs(difference.mean) / (spread / math.sqrt(final_pairs))
    return projected < t_quantile(1 - level / (2 * family), final_pairs - 1)


def sequential_comparisons(values: Values, methods: Sequence[str], looks: Sequence[int], replicates: int = 1,
                           metrics: Sequence[str] = METRICS, alpha: float = ALPHA) -> dict[tuple[str, str], Comparison]:
    """Replay the looks on the stored values: each (method, metric) against REFERENCE, decided at the
    first look whose Holm-adjusted p is below that look's share of alpha. Holm runs over the whole family
    at every look, a comparison without runs at that look (its method stopped, or has not run) counting
    as p = 1: raising a p-value never adds a rejection, so each look's error rate stays within its share
    however the comparisons still open were chosen. A comparison is reported as it stood at the last look
    it was tested at: decided, futile (its method may have stopped there), or open."""
    shares = look_alphas(list(looks), alpha)
    reference = values[REFERENCE]
    family = [(m, metric) for m in methods if m != REFERENCE for metric in metrics]
    decided: dict[tuple[str, str], Comparison] = {}
    for look, (seeds, share) in enumerate(zip(looks, shares)):
        keys = _keys(replicates, seeds)
        # every comparison not yet decided at a boundary is tested again when its method got the seeds (one
        # set aside as futile too: futility only spares a method seeds, it never ends a comparison that has data)
        open_ = [c for c in family if c not in decided or decided[c].label not in (BETTER, WORSE)]
        tested = [c for c in open_ if _has(reference, keys) and _has(values[c[0]], keys)]
        if not tested:
            break
        differences = {c: compare_runs(values[c[0]][c[1]], reference[c[1]], keys, replicates) for c in tested}
        p_values = [1.0 if c not in differences or differences[c].p_value is None else differences[c].p_value
                    for c in family]
        adjusted = dict(zip(family, holm(p_values)))
        half_confidence = simultaneous_confidence(len(family), share)
        last = look == len(looks) - 1
        for c in tested:
            difference, p = differences[c], adjusted[c]
            half = difference.half_width(half_confidence)
            if p < share:
                label, how = (BETTER if difference.mean > 0 else WORSE), "boundary"
            elif last:
                label, how = NO_DIFFERENCE, "last look"
            elif _futile(difference, replicates if replicates > 1 else looks[-1], shares[-1], len(family)):
                label, how = NO_DIFFERENCE, "futility"
            else:
                label, how = OPEN, "open"
            low, high = (None, None) if half is None else (max(-1.0, difference.mean - half),
                                                           min(1.0, difference.mean + half))
            decided[c] = Comparison(c[0], c[1], difference, p, share, len(family), low, high, label, len(keys), how)
    return decided


def methods_needing_seeds(comparisons: Mapping[tuple[str, str], Comparison], methods: Sequence[str]) -> list[str]:
    """The methods with a comparison still open (or never taken): they get the next round of seeds."""
    return [m for m in methods if m != REFERENCE
            and any(comparisons.get((m, metric)) is None or comparisons[(m, metric)].label == OPEN
                    for metric in METRICS)]


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


@dataclass(frozen=True)
class RareClass:
    """The class with the fewest training examples, and how many images its accuracies rest on: the range over
    ERM's re-trained runs (splits may differ between pairs); val and test are None for runs stored before 0.7.0."""

    name: str
    train: tuple[int, int]
    val: tuple[int, int] | None
    test: tuple[int, int] | None
    fewest_test: int | None  # the fewest test images of any class in any run: what the worst class may rest on


FEW_TEST_IMAGES = 10  # a class's test accuracy resting on fewer images than this is marked, its interval not exact


@dataclass
class Verdict:
    campaign: str
    looks: list[int]
    replicates: int
    methods: list[MethodResult]
    comparisons: dict[tuple[str, str], Comparison]
    pairs: list[dict] = field(default_factory=list)  # the pairwise ranking, per metric
    reading: str = ""
    varies: str = ""  # what varies between the paired runs, so what the intervals contain (in words)
    same_as_erm: dict[str, str] = field(default_factory=dict)  # method -> why it is ERM here, in words
    rare: RareClass | None = None  # the rare class and its image counts, from ERM's runs
    curves: list[BudgetCurve] = field(default_factory=list)  # each method's expected best after n trials
    budget_note: str = ""  # whether the order by expected best changes between half and the full budget, in words


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


def _method_result(store: Store, campaign: CampaignRecord, method: str,
                   runs: dict[Key, EvaluationRecord]) -> MethodResult:
    parameters, trials, epochs, seconds, missing = [], 0, 0, 0.0, None
    flags: list[BoundFlag] = []
    budget = campaign.budget.get("trials", 0) * campaign.replicates
    for name in campaign.study_names(method):
        study = store.study(name)
        if study is None:
            missing = f"study {name} is not stored"
            continue
        stored = store.trials(study.id)
        best = picked_trial(study, stored, campaign.evaluation.pick)
        parameters.append({} if best is None else best.parameters)
        flags += [] if best is None else [f for f in bound_flags(study.study.search, best.parameters)
                                          if (f.parameter, f.bound) not in {(g.parameter, g.bound) for g in flags}]
        for t in stored:
            if t.ran:  # trained: an epoch prefix cost nothing more, an early-stopped trial its epochs run
                trials += t.status != TrialStatus.FAILED
                seconds += t.train_seconds or 0.0
                epochs += len(t.epochs) if t.status == TrialStatus.EARLY_STOPPED else int(
                    t.parameters.get("epochs", study.study.fixed.get("epochs", 0)))
        if best is None:
            missing = f"study {name} has no completed trial"
    per_replicate = [sum(1 for (r, _) in runs if r == replicate) for replicate in range(campaign.replicates)]
    if not runs and missing is None:
        missing = "no re-trained run yet"
    means = {}
    if runs:
        measured = [run_metrics(run) for run in runs.values()]
        means = {metric: mean_interval([m[metric] for m in measured]) for metric in METRICS}
    return MethodResult(method, campaign.study_names(method), parameters, min(per_replicate), means, trials, budget,
                        epochs, seconds, sum(run.train_seconds for run in runs.values()), missing, flags)


def take_verdict(store: Store, campaign: CampaignRecord) -> Verdict:
    """The verdict from what is stored: every method's results and cost, its comparisons with ERM, the
    pairwise ranking and the reading in words."""
    runs = campaign_runs(store, campaign)
    verdict = verdict_of(campaign.name, campaign.evaluation.looks(), campaign.replicates, run_values(runs),
                         [_method_result(store, campaign, m, runs[m]) for m in campaign.methods], variation(campaign),
                         rare_class(list(runs[REFERENCE].values())))
    verdict.curves = campaign_curves(store, campaign)
    verdict.budget_note = budget_note(verdict.curves)
    if verdict.curves and order_at(verdict.curves, verdict.curves[0].budget) != order_at(
            verdict.curves, half_budget(verdict.curves[0].budget)):
        verdict.reading += f" T{verdict.budget_note[1:]}."  # "the order ... changes with the budget: ..."
    return verdict


def verdict_of(name: str, looks: list[int], replicates: int, values: Values, results: list[MethodResult],
               varies: str = "", rare: RareClass | None = None) -> Verdict:
    """The verdict from the runs' values (method -> metric -> (replicate, seed) -> value) and each method's
    result (`results`, ERM first): its comparisons with ERM and their P(better), the ranking and the reading."""
    comparisons = sequential_comparisons(values, [r.method for r in results], looks, replicates)
    for key, c in comparisons.items():
        keys = _keys(replicates, c.seeds // replicates)
        comparisons[key] = replace(c, improvement=improvement(values[c.method][c.metric], values[REFERENCE][c.metric],
                                                              keys, replicates))
    verdict = Verdict(name, looks, replicates, results, comparisons, varies=varies, rare=rare)
    verdict.same_as_erm = {r.method: said for r in results
                           if r.method != REFERENCE and (said := _same_as_erm(r, values))}
    verdict.pairs = pairwise_ranking(values, [r.method for r in results if r.seeds > 0], replicates)
    verdict.reading = reading(verdict)
    return verdict


def rare_class(runs: Sequence[EvaluationRecord]) -> RareClass | None:
    """The class with the fewest training examples in `runs` (as run_metrics takes it) and its image counts."""
    if not runs:
        return None
    name = min(runs[0].train_class_counts, key=lambda c: runs[0].train_class_counts[c])

    def spread(counts: list[int]) -> tuple[int, int] | None:
        return (min(counts), max(counts)) if counts else None

    stored = [run.per_class.get("counts") for run in runs if run.per_class.get("counts")]
    return RareClass(name, spread([run.train_class_counts[name] for run in runs]),
                     spread([c["val"].get(name, 0) for c in stored]), spread([c["test"].get(name, 0) for c in stored]),
                     min((min(c["test"].values()) for c in stored), default=None))


FIXED_TEST_SETS = ("idx",)  # data sets whose test split is their own: resplit draws the validation carve again
FIXED_SPLITS = ("medmnist",)  # data sets whose three splits are their own: nothing to draw again


def variation(campaign: CampaignRecord) -> str:
    """What varies between a campaign's paired runs, so what its intervals contain, in words."""
    data = campaign.config.get("studies", {}).get(REFERENCE, {}).get("data", {})
    fixed_test = data.get("name") in FIXED_TEST_SETS or data.get("manifest") is not None
    if not campaign.evaluation.resplit or data.get("name") in FIXED_SPLITS:
        why = ("MedMNIST's splits are its own and fixed" if data.get("name") in FIXED_SPLITS
               else "every run uses the search's split, resplit = false")
        varies = f"the training seed only ({why})"
    else:
        part = "the validation carve (the test set is the data set's own)" if fixed_test else "the whole split"
        varies = f"the training seed and {part}: pair k trains on seed k and split seed base + k"
    if campaign.replicates > 1:
        varies += (f"; and the search's luck: {campaign.replicates} searches per method, "
                   + ("each on a split of its own, " if campaign.evaluation.resplit else "")
                   + "the search the unit of the test")
    else:
        varies += "; not the search's luck (one search per method; replicates = 2 or more counts it)"
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


def pairwise_ranking(values: Values, methods: Sequence[str], replicates: int = 1,
                     alpha: float = ALPHA) -> list[dict]:
    """Per metric, the methods by mean on the seeds all of them ran, and every pair's paired difference
    with Holm's correction over all pairs and metrics (a family of its own)."""
    if len(methods) < 2:
        return []
    common = [k for k in values[methods[0]][METRICS[0]]
              if all(k in values[m][metric] for m in methods for metric in METRICS)]
    if len(common) < 2:
        return []
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


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def reading(verdict: Verdict) -> str:
    """The verdict in words, one sentence per method that differs, generated from the numbers."""
    if any(m.method == REFERENCE and m.missing for m in verdict.methods):
        return "No verdict yet: tuned ERM has no re-trained runs to compare with."
    sentences = []
    for m in verdict.methods:
        mine = [verdict.comparisons[(m.method, metric)] for metric in METRICS
                if (m.method, metric) in verdict.comparisons]
        better = [_stated(c) for c in mine if c.label == BETTER]
        worse = [_stated(c) for c in mine if c.label == WORSE]
        if better and worse:
            sentences.append(f"{m.method} beats ERM on {_join(better)} but falls behind it on {_join(worse)}")
        elif better or worse:
            sentences.append(f"{m.method} {'beats ERM' if better else 'falls behind ERM'} on {_join(better or worse)}")
    unbeaten = [READING_LABELS[metric] for metric in METRICS
                if not any(c.metric == metric and c.label == BETTER for c in verdict.comparisons.values())]
    if unbeaten and verdict.comparisons:
        sentences.append(f"no method beats ERM on {_join(unbeaten, 'or')}")
    sentences += list(verdict.same_as_erm.values())
    same = [m.method for m in verdict.methods if m.method != REFERENCE and not m.missing
            and m.method not in verdict.same_as_erm
            and all(verdict.comparisons.get((m.method, k)) is not None
                    and verdict.comparisons[(m.method, k)].label == NO_DIFFERENCE for k in METRICS)]
    if same:
        sentences.append(f"{_join(same)} {'differs' if len(same) == 1 else 'differ'} from ERM by nothing these runs "
                         "can detect (the intervals say how large a difference they could have missed)")
    behind = [m for m in CONTAINS_ERM if any(c.method == m and c.label == WORSE for c in verdict.comparisons.values())]
    if behind:
        sentences.append(f"{_join(behind)} {'contains' if len(behind) == 1 else 'contain'} ERM "
                         f"({'; '.join(f'{m} at {CONTAINS_ERM[m]}' for m in behind)}), so behind ERM after tuning "
                         "means its search chose badly, not that the method hurts: widen its range or repeat the "
                         "search (replicates)")
    bounded = [f"{m.method}'s {', '.join(f.short for f in m.bound_flags)}" for m in verdict.methods if m.bound_flags]
    if bounded:
        sentences.append(f"Tuned onto a bound of its range: {_join(bounded)}; the search may have been cut short "
                         "there, so widen the range before trusting a comparison that involves it")
    text = "".join(f"{s}. " for s in sentences)
    if verdict.comparisons and not any(c.label in (BETTER, WORSE, OPEN) for c in verdict.comparisons.values()):
        few = verdict.rare is not None and verdict.rare.test is not None and verdict.rare.test[1] < FEW_TEST_IMAGES
        text += ("Nothing is decided at this level; what would narrow the intervals: more confirmation seeds "
                 "(max_seeds), more searches per method (replicates)"
                 + (f", and more test images of the rare class ({verdict.rare.name} has {verdict.rare.test[1]})"
                    if few else "") + ". ")
    still_open = sorted({c.method for c in verdict.comparisons.values() if c.label == OPEN})
    if still_open:
        text += f"Still open (more seeds would decide): {', '.join(still_open)}. "
    missing = [m for m in verdict.methods if m.missing and m.method != REFERENCE]
    if missing:
        text += "Without a verdict: " + "; ".join(f"{m.method} ({m.missing})" for m in missing) + ". "
    return text.strip()


# Methods that are ERM at one value of their own parameter: tuned honestly, they cannot be truly worse than ERM.
CONTAINS_ERM = {"ls": "alpha = 0", "hws": "beta near 0"}


def _stated(c: Comparison) -> str:
    """A decided difference in words: the metric, the difference and its interval in points."""
    interval = "" if c.low is None else f" [{_points(c.low)}, {_points(c.high)}]"
    return f"{READING_LABELS[c.metric]} ({_points(c.difference.mean)} points{interval})"


def _join(items: list[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]
