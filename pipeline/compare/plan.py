"""`compare --plan` and `run --plan`: what a campaign or a study would train, and about how long that takes on this
machine, before anything is trained or stored.

The time comes from a short timing probe of each method on the data as its trials would load it (a few training
batches and one chunk of evaluation, at the middle of its searched ranges), scaled to a trial's epochs and batches
and summed over what is left to train, counted as `compare` trains it (pipeline/compare/workload.py, from what is
stored): the first look's searches (by default the pilot's 3 per method, ERM too), each its trials and its pick
re-trained on `seeds` pairs, and what later rounds may add up to `max_replicates` searches and `max_seeds` pairs
per search; stored trials and runs, where there are some, are the better measure and win. What a campaign's
smallest effects may need comes from the decisions' own planning (pipeline/compare/decision.py: `planned_pairs`
and `searches_needed` after the pilot, or `pairs_needed` with the searches fixed), on the spread the test images
alone leave a paired difference: the binomial noise of n images, twice (one run of each method), with no search
luck beyond it. A search's luck and training vary each run further, so the count is what the test set asks for,
and the ones past the campaign's cap may end undecided.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from pipeline.compare.decision import Axis, Design, Spread, pairs_needed, planned_pairs, searches_needed
from pipeline.compare.workload import CampaignWork, campaign_work
from pipeline.data import Dataset
from pipeline.params import Choice, Value, training_defaults
from pipeline.spec.campaign_config import REFERENCE, CampaignConfig
from pipeline.spec.study_config import StudyConfig
from pipeline.store import CampaignRecord, Store, trial_budget, trials_ran

PROBE_BATCHES = 2  # training batches timed per method, after one that warms up
PROBE_EVALUATED = 128  # examples whose evaluation is timed, scaled to the validation and test splits
# Seconds Ax takes to propose a trial after the Sobol start (fit the Gaussian process, optimise the acquisition):
# 0.6-4 s at the median on 2 CPU cores (docs/design/search.md); Sobol proposals take hundredths.
GP_PROPOSAL_SECONDS = 1.5


@dataclass(frozen=True)
class Probe:
    """One method's trial as the probe timed it: a training batch, an evaluation of the validation and test
    splits (as every epoch ends), the batches of an epoch and the epochs of a trial (the middle of a searched
    range), on `seeds` seeds each."""

    study: str
    method: str
    batch_seconds: float
    eval_seconds: float
    batches: int
    epochs: float
    seeds: int = 1

    @property
    def run_seconds(self) -> float:
        """One training run of the typical configuration: its epochs of batches and evaluations."""
        return self.epochs * (self.batches * self.batch_seconds + self.eval_seconds)

    @property
    def trial_seconds(self) -> float:
        """One trial: a run on each of its seeds."""
        return self.seeds * self.run_seconds


def typical_parameters(study: StudyConfig) -> dict[str, Value]:
    """The searched parameters at the middle of their ranges (geometric on a log scale; rounded for an integer
    one), a choice at its first value: a trial of typical cost."""
    middle: dict[str, Value] = {}
    for name, space in study.search.items():
        if isinstance(space, Choice):
            middle[name] = space.values[0]
            continue
        value = math.sqrt(space.low * space.high) if space.log else (space.low + space.high) / 2
        middle[name] = round(value) if isinstance(space.low, int) and isinstance(space.high, int) else value
    return middle


def probe(study: StudyConfig, dataset: Dataset, device: str = "auto", precision: str = "auto") -> Probe:
    """Time `study`'s method on `dataset` (loaded as its trials load it) through the trainer's own hot path: an
    epoch of 1 + PROBE_BATCHES batches of a cut of the training split (every class in it), the first not counted
    (first calls allocate), and one evaluation chunk, scaled to the validation and test splits. Trains a throwaway
    model; stores nothing."""
    import torch

    from pipeline.methods import parse_method
    from pipeline.training.metrics import predict
    from pipeline.training.trainer import prepare, run_epoch, torch_threads

    config = study.train_config(typical_parameters(study), study.seed, device, precision)
    params = parse_method(config.method).resolve({**training_defaults(config.weights), **config.params})
    size = int(params["batch_size"])
    train = dataset.train
    picked = torch.linspace(0, len(train) - 1, min(len(train), (PROBE_BATCHES + 1) * size)).long()
    firsts = [torch.nonzero(train.labels == label)[0].cpu() for label in train.labels.unique()]  # every class
    cut = replace(dataset, train=train.subset(torch.cat([picked, *firsts]).unique().to(train.labels.device)))
    ends: list[float] = []

    def batch_ended(batch: int) -> None:
        if run.device.type == "cuda":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())

    with torch_threads(config.threads):
        run = prepare(config, cut)
        run_epoch(run, run.train, batch_ended)
        batch_seconds = (ends[-1] - ends[0]) / max(1, len(ends) - 1) if len(ends) > 1 else 0.0
        evaluated = [s for s in (dataset.val, dataset.test) if len(s)]
        started = time.perf_counter()
        chunk = evaluated[0].subset(slice(0, PROBE_EVALUATED)) if evaluated else None
        if chunk is not None:
            predict(run.model, chunk)
        if run.device.type == "cuda":
            torch.cuda.synchronize()
        eval_seconds = (time.perf_counter() - started) * sum(len(s) for s in evaluated) / max(1, len(chunk or ()))
    return Probe(study.name, study.method, batch_seconds, eval_seconds, math.ceil(len(train) / size),
                 float(params["epochs"]), study.budget.seeds_per_trial)


def proposal_seconds(study: StudyConfig) -> float:
    """Ax's time to propose one of the study's trials, on average over its budget."""
    trials, initial = study.budget.trials, min(study.budget.initial, study.budget.trials)
    gp = study.strategy.startswith("gp")
    return GP_PROPOSAL_SECONDS * (trials - initial) / trials if gp else 0.0


@dataclass(frozen=True)
class Need:
    """What one primary metric may need: its smallest effect, the test images it rests on, and for 80% power on the
    noise those images alone leave where runs score near each of ACCURACIES, in that order: the pairs (per search,
    on the searches axis: the pilot's plan), and on the searches axis the searches of that many pairs (None: more
    than MOST_PAIRS, or MOST_SEARCHES)."""

    metric: str
    smallest: float
    images: int
    pairs: tuple[int | None, ...]
    searches: tuple[int | None, ...] | None = None  # None: the pairs axis (the searches are fixed)


# The accuracies a plan gives the pairs at: where a well-learned metric lies, and 50%, where binomial noise is largest
# (a rare class's accuracy often lies between). On the demo campaign (docs/guide/comparing-methods.md) the verdict
# of 0.13.0 asked for about 30 pairs on balanced accuracy (near 96%), the plan now says 60 or 155; on the rare digit
# (near 67%) 80, the plan 30 or 65.
ACCURACIES = (0.9, 0.5)


def test_images(metric: str, test_counts: list[int], rare: int | None, accuracy: float = 0.5) -> tuple[int, float]:
    """The test images `metric` rests on, and its binomial variance over them at `accuracy`."""
    spread = accuracy * (1 - accuracy)
    if metric == "test_accuracy":
        return sum(test_counts), spread / sum(test_counts)
    if metric == "test_balanced_accuracy":
        k = len(test_counts)
        return sum(test_counts), sum(spread / n for n in test_counts) / k ** 2
    fewest = min(test_counts) if metric == "test_worst_class_accuracy" or rare is None else rare
    return fewest, spread / fewest


def pairs_may_need(design: Design, test_counts: list[int], rare: int | None, compared: int) -> list[Need]:
    """For each primary metric, what its smallest effect needs for 80% power (showing a difference of it, or
    equivalence within it: the larger) on a paired difference that varies only as much as the test images allow
    (`test_counts`: the test images of each class; `rare`: the rare class's), among `compared` methods besides
    ERM, as the campaign's own plan counts it: on the pairs axis the pairs after the first round
    (decision.pairs_needed); on the searches axis the pairs per search the pilot plans (decision.planned_pairs,
    over every primary metric) and the searches of that many pairs after the pilot (decision.searches_needed),
    with no search luck beyond the pairs' noise."""
    family = max(1, compared * len(design.primary))
    by_accuracy = []
    for accuracy in ACCURACIES:
        found = {metric: test_images(metric, test_counts, rare, accuracy) for metric in design.primary}
        spreads = {metric: Spread(0.0, 2 * variance, 0.0, design.searches, design.trim)
                   for metric, (_, variance) in found.items()}
        per_search = planned_pairs([(spreads[m], design.smallest_effect[m]) for m in design.primary], design)
        by_accuracy.append((found, spreads, per_search))
    needs = []
    for metric in design.primary:
        smallest = design.smallest_effect[metric]
        pairs: list[int | None] = []
        searches: list[int | None] = []
        for found, spreads, per_search in by_accuracy:
            shifted = [replace(spreads[metric], mean=mean) for mean in (smallest, 0.0)]  # a difference, equivalence
            if design.axis is Axis.SEARCHES:
                counts = [searches_needed(s, design, design.searches, family, smallest, per_search) for s in shifted]
                pairs.append(per_search)
                searches.append(None if None in counts else max(c for c in counts if c))
            else:
                counts = [pairs_needed(s, design, 0, family, smallest) for s in shifted]
                pairs.append(None if None in counts else max(c for c in counts if c))
        needs.append(Need(metric, smallest, by_accuracy[0][0][metric][0], tuple(pairs),
                          tuple(searches) if design.axis is Axis.SEARCHES else None))
    return needs


@dataclass(frozen=True)
class CampaignPlan:
    """What `compare` would train for `campaign` and about how long it takes: its design (the searches and pairs
    of its first look, and how far later rounds may go), the work left (its seconds from the stored trials and
    runs, else the probes), each method's probe, what each primary metric may need, and the data of the first task
    as its trials load it."""

    name: str
    methods: tuple[str, ...]
    budget: int  # trials per method and search
    design: Design
    work: CampaignWork
    probes: list[Probe]
    needs: list[Need]
    dataset: Dataset
    rare: str | None  # the rare class of that data (its imbalance_class, else one with under half the most's images)
    tasks: int = 1

    @property
    def replicates(self) -> int:
        """The searches per method of the first look (the pilot on the searches axis)."""
        return self.design.searches

    @property
    def max_replicates(self) -> int:
        return self.design.max_searches

    @property
    def seeds(self) -> int:
        """The pairs each search is re-trained on first."""
        return self.design.seeds

    @property
    def max_seeds(self) -> int:
        return self.design.max_seeds


def probe_studies(studies: list[StudyConfig], device: str = "auto", precision: str = "auto") -> list[Probe]:
    """A probe of each study on its data as its trials load it (each data set loaded once per process)."""
    probes = []
    for study in studies:
        probes.append(probe(study, trials_data(study, device, precision), device, precision))
    return probes


def trials_data(study: StudyConfig, device: str, precision: str) -> Dataset:
    """The study's data set as its trials in this process load it (the same cached tensors)."""
    from pipeline.config import resolve_device
    from pipeline.search.trial import dataset_for

    return dataset_for(study.train_config({}, study.seed, device, precision).data, str(resolve_device(device)))


def guesses(campaign: CampaignConfig, probes: list[Probe]) -> dict[str, float]:
    """Each study's (every search's, up to max_replicates) estimated seconds of a trial, proposal included, from its
    method's probe."""
    by_name = {p.study: p for p in probes}
    found = {}
    for _, config in campaign.task_campaigns():
        for method in config.methods:
            first = config.study(method)
            for r in range(campaign.most_searches):
                found[config.study(method, r).name] = by_name[first.name].trial_seconds + proposal_seconds(first)
    return found


def unsaved_record(campaign: CampaignConfig) -> CampaignRecord:
    """The settled campaign's first task as `compare` will store it, not stored: what verdict.design_of reads."""
    config = campaign.task_campaigns()[0][1]
    return CampaignRecord(0, config.name, config.methods, config.evaluation, max(1, config.replicates),
                          config.budget, config.to_dict())


def campaign_probes(campaign: CampaignConfig, device: str = "auto", precision: str = "auto") -> list[Probe]:
    """A probe of each method of each task (search replicate 0: the others train the same)."""
    return probe_studies([config.study(m) for _, config in campaign.task_campaigns() for m in config.methods],
                         device, precision)


def plan_campaign(campaign: CampaignConfig, store: Store | None, workers: int, device: str = "auto",
                  precision: str = "auto") -> CampaignPlan:
    """The plan of `campaign` (settled as `compare` settles it) against what `store` holds (None: nothing yet),
    on `workers` places at once. Trains the probes only; writes nothing."""
    from pipeline.compare.verdict import RareClass, design_of

    probes = campaign_probes(campaign, device, precision)
    work = campaign_work(store, campaign, workers, guesses(campaign, probes))
    reference = campaign.studies[REFERENCE]
    dataset = trials_data(reference, device, precision)
    counts = dataset.split_counts()
    rare_name = dataset.rare_class(reference.data.imbalance_class)
    rare = None
    if rare_name is not None:
        i = dataset.class_names.index(rare_name)
        rare = RareClass(rare_name, (counts["train"][i],) * 2, (counts["val"][i],) * 2, (counts["test"][i],) * 2,
                         min(counts["test"]), max(counts["train"]))
    design = design_of(unsaved_record(campaign), rare)
    needs = pairs_may_need(design, counts["test"], None if rare is None else counts["test"][
        dataset.class_names.index(rare.name)], len(campaign.methods) - 1)
    return CampaignPlan(campaign.name, campaign.methods, reference.budget.trials, design, work, probes, needs,
                        dataset, rare_name, max(1, len(campaign.tasks)))


@dataclass(frozen=True)
class StudyPlan:
    """What `run` would train for a study: `trials` left of `budget` (`ran` stored), each about `trial_seconds`
    (from its stored trials where there are some, else the probe), on `workers` places at once."""

    name: str
    budget: int
    ran: int
    trials: int
    trial_seconds: float
    measured: int  # the stored trials the time comes from (0: the probe)
    workers: int
    probe: Probe
    dataset: Dataset

    @property
    def seconds(self) -> float:
        return self.trials * self.trial_seconds / max(1, self.workers)


def plan_study(study: StudyConfig, store: Store | None, workers: int, trials: int | None = None,
               device: str = "auto", precision: str = "auto") -> StudyPlan:
    """The plan of `study` (settled as `run` settles it) up to `trials` trials (None: its budget) against what
    `store` holds, on `workers` places. Trains the probe only; writes nothing."""
    (found,) = probe_studies([study], device, precision)
    record = None if store is None else store.study(study.name)
    stored = [] if record is None else store.trials(record.id)  # type: ignore[union-attr]  # record: store is set
    widened = record is not None and bool(store.widenings(record.id))  # type: ignore[union-attr]
    budget = trials or trial_budget(study, widened)
    ran = trials_ran(stored)
    times = [(t.train_seconds or 0.0) + (t.proposal_seconds or 0.0) for t in stored if t.ran and t.train_seconds]
    seconds = sum(times) / len(times) if times else found.trial_seconds + proposal_seconds(study)
    dataset = trials_data(study, device, precision)
    return StudyPlan(study.name, budget, ran, max(0, budget - ran), seconds, len(times), max(1, workers), found,
                     dataset)
