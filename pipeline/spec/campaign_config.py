"""Campaign files (TOML) -> a validated CampaignConfig: several methods, each tuned on equal footing
against ERM, then re-trained over seeds and compared.

A campaign file is a study file with `methods` instead of `[method]`:

    name = "digits-rare3"
    objective = "val_balanced_accuracy"
    methods = ["erm", "ls", "hws", "cb"]     # ERM is always in, listed or not
    [data]    ...                          # as a study's
    [model]   ...
    [params]  lr_head = { low = 0.01, high = 0.2, log = true }   # shared: every method that takes it
              epochs = 20
    [budget]  trials = 8; initial = 4      # each method's, the same for all
    [method_params.hws]  beta = { low = 0.1, high = 1000, log = true }  # a method's own ranges (default: the papers')
    [evaluate]     seeds = 5; max_seeds = 30; seeds_per_round = 5; resplit = true
                   primary = ["test_balanced_accuracy", "smallest_class_accuracy"]   # default: see Evaluation
                   smallest_effect = { test_balanced_accuracy = 1, smallest_class_accuracy = 5 }   # points
    [tasks.rare8.data]   imbalance_class = "8"  # optional: several tasks, each overriding [data] / [model] fields
    [tasks.rare8.model]  backbone = "resnet18"

Each method becomes an ordinary study named `<campaign>.<method>` (`.r<k>` appended for the k-th extra
search replicate), built by the study file's own parser, so every study rule holds for each of them. With
tasks, every method is tuned on each task with the same budget in a study named `<campaign>.<task>.<method>`,
and each task gets its confirmation runs and its verdict as a one-task campaign would
(`CampaignConfig.task_campaigns`); a file without [tasks] is one task, stored and fingerprinted as before.

With `resplit` (the default for a new campaign) the verdict is about the method, not about one split:
confirmation pair k trains on training seed k and split seed `split_seed + k`, the same pairs for every
method. Without it (`resplit = false`, and every campaign stored before 0.7.0) all runs use the search's one
split, as before.

Search replicates (`replicates = R >= 2`) are the unit of the verdict's test, so no two may share a split or a
training seed: each takes a block of seeds of its own, SEED_STRIDE (1000) wide (`replicate_seeds = "apart"`,
every new campaign). Replicate r searches with search seed `search_seed + r` (DomainBed's trial seed), its trials
train on seed `seed + 1000 r` and, with resplit, on split seed `split_seed + 1000 r`; its confirmation pair k
trains on training seed `1000 r + k` and split seed `split_seed + 1000 r + k`. Every method of replicate r trains
on those same pairs as ERM's replicate r, and the verdict pairs them as (r, k). Replicate 0 is as with one search.
A campaign stored without `replicate_seeds` (by 0.9.0 or before) keeps the layout it ran with
(`replicate_seeds = "shared"`): replicate r searched on split seed `split_seed + r`, and its pair k trained on
seed k and split seed `split_seed + r + k`, so pair (r, k) shared its split with pair (r + 1, k - 1) and its
training seed with every replicate's pair k (CampaignConfig.settle_replicate_seeds). Each split seed also draws
which rare-class examples stay in training (data.rare_kept = "drawn", a new campaign's default; one stored before
the choice existed keeps the first ones).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pipeline.config import DataConfig
from pipeline.errors import FieldError, UserError, did_you_mean
from pipeline.methods import parse_method
from pipeline.spec.study_config import (ADDED_LATER, DATA_ADDED_LATER, EARLIER_PICK, PICKS, StudyConfig,
                                        apply_overrides, naming_overrides, parse_study, read_toml)

REFERENCE = "erm"  # the method every other one is compared with
# Campaign fields that may change without making it another campaign: more seeds, replicates, a budget. Two
# with a rule of their own are put back where on (identity): evaluation's resplit and replicate_seeds.
NOT_IDENTITY = ("evaluation", "replicates", "max_replicates", "replicates_per_round", "description", "budget",
                "replicate_seeds")

# How search replicates take their seeds (see the module's docstring): each a block of its own, or (stored by 0.9.0
# or before) shifted by one split seed and sharing the training seeds.
APART, SHARED = "apart", "shared"
# The width of a replicate's block of split and training seeds: more than its pairs (evaluate.max_seeds is at most
# 1000, so pairs 0-999), so that no two replicates' blocks overlap.
SEED_STRIDE = 1000


def replicate_offsets(replicate: int, layout: str | None) -> tuple[int, int]:
    """What replicate `replicate` adds to the base split seed and to each training seed (its search's and its
    pairs') under `layout`; None (not settled) is the layout stored before it had a name."""
    if layout == APART:
        return replicate * SEED_STRIDE, replicate * SEED_STRIDE
    return replicate, 0


def pair_of(replicate: int, seed: int, layout: str | None) -> int | None:
    """Which confirmation pair of replicate `replicate` a run trained on training seed `seed` is (the seed less
    the replicate's offset); None for a seed outside the replicate's block (a run re-trained by hand)."""
    pair = seed - replicate_offsets(replicate, layout)[1]
    return pair if 0 <= pair < SEED_STRIDE else None


# The metrics a campaign may decide on (the verdict's, pipeline/compare/evaluate.py COMPARE_METRICS), and the smallest
# effect that matters on each by default, in points: a point of an accuracy over every class, five on one class.
DECISION_METRICS = ("test_accuracy", "test_balanced_accuracy", "test_worst_class_accuracy", "smallest_class_accuracy")
SMALLEST_EFFECT = {"test_accuracy": 1.0, "test_balanced_accuracy": 1.0, "test_worst_class_accuracy": 5.0,
                   "smallest_class_accuracy": 5.0}
MAX_SEEDS = 30  # confirmation pairs at most by default: rounds stop earlier once every primary cell is decided
# A new campaign's design (pipeline/compare/decision.py, the searches axis): a pilot of `replicates` searches per
# method, `seeds` pairs each, plans the pairs per search (up to `max_seeds`) and the searches; rounds of
# `replicates_per_round` more, up to `max_replicates`. `bench verdict` simulates it (docs/guide/comparing-methods.md).
NEW_DESIGN = {"replicates": 3, "replicates_per_round": 2, "max_replicates": 10, "seeds": 5, "seeds_per_round": 5,
              "max_seeds": 8}
# A new campaign's unit: 30% trimmed means (Yuen), robust to two runs of a search that collapsed (a search of 7 pairs
# drops its 2 lowest and 2 highest differences). With one run in 30 collapsing, `bench verdict` decided 84% of the
# cells at twice the smallest effect at 20%, 88% at 30% (docs/guide/comparing-methods.md).
TRIM = 0.3
# A new campaign re-trains each search's model pick (the tried configuration its Gaussian process predicts best): of
# the pick rules `bench search` compares, the one with the least search luck at no loss in median true value
# (docs/design/search.md, "The search's luck"). A stored campaign keeps its pick (settle_pick).
NEW_PICK = "model"


@dataclass(frozen=True)
class Evaluation:
    """How the tuned configurations are re-trained and what the verdict decides on: `seeds` pairs first, then
    rounds of `seeds_per_round` planned for power, up to `max_seeds` (and `max_minutes` of re-training, when set),
    until every primary cell is decided. `primary`: the metrics decided on (None: the test counterpart of the
    objective, and the rare class where the data has one); `smallest_effect`: points per metric, over
    SMALLEST_EFFECT."""

    seeds: int = 5
    max_seeds: int | None = MAX_SEEDS  # None: the file does not say (settle_max_seeds decides)
    seeds_per_round: int = 5
    # Which trial of each study is re-trained (PICKS). None: the file does not say; a new campaign then takes
    # NEW_PICK and a stored one keeps the pick it was stored with (settle_pick).
    pick: str | None = None
    # Confirmation runs and search replicates draw the split again (see the module's docstring). None: the file
    # does not say; a new campaign then resplits and a stored one keeps what it was stored with (settle_resplit).
    resplit: bool | None = False
    primary: tuple[str, ...] | None = None
    smallest_effect: dict[str, float] = field(default_factory=dict)
    max_minutes: float | None = None
    # The share cut from each end for the verdict's robust unit (decision.Design.trim). None: the file does not say;
    # a new campaign then trims TRIM and a stored one keeps what it was stored with (settle_design; 0 before 0.14.0).
    trim: float | None = 0.0

    def effects(self) -> dict[str, float]:
        """The smallest effect that matters on each metric, as a fraction (0.01: one point)."""
        return {metric: points / 100 for metric, points in {**SMALLEST_EFFECT, **self.smallest_effect}.items()}


@dataclass(frozen=True)
class CampaignConfig:
    """A validated campaign: the methods (ERM first) and the study each one is tuned in."""

    name: str
    methods: tuple[str, ...]
    studies: dict[str, StudyConfig]  # method -> its study (search replicate 0)
    evaluation: Evaluation = field(default_factory=Evaluation)
    # Whole searches per method, with search seeds search_seed + 0, 1, ...: `replicates` at the first look, then
    # rounds of `replicates_per_round` up to `max_replicates` (the searches axis; max_replicates = replicates: fixed).
    # 0: the file does not say (settle_design decides).
    replicates: int = 0
    max_replicates: int = 0
    replicates_per_round: int = 0
    budget: dict[str, int] = field(default_factory=dict)  # as in each study
    description: str = ""
    # Several tasks: task -> method -> its study (search replicate 0); `studies` is then the first task's. Empty: the
    # campaign is one task, `studies` its studies, stored and fingerprinted as before tasks existed.
    tasks: dict[str, dict[str, StudyConfig]] = field(default_factory=dict)
    # How search replicates take their seeds: APART or SHARED. None: not settled yet (settle_replicate_seeds); it
    # reads as SHARED, as the identity of a campaign stored before it existed does.
    replicate_seeds: str | None = None

    def task_campaigns(self) -> list[tuple[str | None, CampaignConfig]]:
        """Each task as a one-task campaign named `<campaign>.<task>` (its studies `<campaign>.<task>.<method>`),
        in the file's order; a campaign without tasks is its own one task (None)."""
        if not self.tasks:
            return [(None, self)]
        return [(task, dataclasses.replace(self, name=f"{self.name}.{task}", studies=studies, tasks={}))
                for task, studies in self.tasks.items()]

    def all_studies(self) -> list[StudyConfig]:
        """Every study of every task, method and search replicate the campaign may run (up to max_replicates)."""
        return [c.study(m, r) for _, c in self.task_campaigns() for r in range(self.most_searches)
                for m in c.methods]

    @property
    def most_searches(self) -> int:
        """The most searches per method the campaign may run."""
        return max(1, self.replicates, self.max_replicates)

    def settle_design(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with its searches and its unit decided where its file does not say: as the stored campaign
        (`stored`, its config as stored: one stored before 0.14.0 ran a fixed number of searches and untrimmed
        means), else (None: not stored) a new campaign's design, NEW_DESIGN and TRIM. A file that gives `replicates`
        alone fixes the searches at that many (rounds add pairs)."""
        first, most, step = self.replicates, self.max_replicates, self.replicates_per_round
        trim = self.evaluation.trim
        if stored is not None:
            first = first or int(stored.get("replicates") or 1)
            most = most or int(stored.get("max_replicates") or first)
            step = step or int(stored.get("replicates_per_round") or NEW_DESIGN["replicates_per_round"])
            trim = trim if trim is not None else float((stored.get("evaluation") or {}).get("trim") or 0.0)
        else:
            if not first and not most:
                first, most = NEW_DESIGN["replicates"], NEW_DESIGN["max_replicates"]
            first = first or min(NEW_DESIGN["replicates"], most)
            most = max(most or first, first)
            step = step or NEW_DESIGN["replicates_per_round"]
            trim = TRIM if trim is None else trim
        return dataclasses.replace(self, replicates=first, max_replicates=most, replicates_per_round=step,
                                   evaluation=dataclasses.replace(self.evaluation, trim=trim))

    def study(self, method: str, replicate: int = 0) -> StudyConfig:
        """The study that tunes `method` in search replicate `replicate` (its own search seed and name)."""
        base = self.studies[method]
        if replicate == 0:
            return base
        split, seed = replicate_offsets(replicate, self.replicate_seeds)
        data = (dataclasses.replace(base.data, split_seed=base.data.split_seed + split) if self.evaluation.resplit
                else base.data)
        return dataclasses.replace(base, name=f"{base.name}.r{replicate}", search_seed=base.search_seed + replicate,
                                   seed=base.seed + seed, data=data)

    def seed_offset(self, replicate: int) -> int:
        """What replicate `replicate` adds to each confirmation pair's training seed (pair k: offset + k)."""
        return replicate_offsets(replicate, self.replicate_seeds)[1]

    def settle_replicate_seeds(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with its replicates' seed layout decided: as the stored campaign (`stored`, its config as
        stored; one stored without it shared its replicates' seeds), else (None: not stored) APART."""
        layout = APART if stored is None else stored.get("replicate_seeds") or SHARED
        return dataclasses.replace(self, replicate_seeds=layout)

    def settle_resplit(self, stored: bool | None) -> CampaignConfig:
        """The campaign with `resplit` decided where its file does not say: as stored (`stored`, the stored
        campaign's; one stored before 0.7.0 did not resplit), else (None: not stored) on for a new campaign."""
        if self.evaluation.resplit is not None:
            return self
        resplit = stored if stored is not None else True
        return dataclasses.replace(self, evaluation=dataclasses.replace(self.evaluation, resplit=resplit))

    def settle_pick(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with `pick` decided where its file does not say: as the stored campaign (`stored`, its config
        as stored; one stored before the pick was recorded re-trained the best observed, EARLIER_PICK), else (None:
        not stored) NEW_PICK."""
        if self.evaluation.pick is not None:
            return self
        pick = NEW_PICK if stored is None else (stored.get("evaluation") or {}).get("pick") or EARLIER_PICK
        return dataclasses.replace(self, evaluation=dataclasses.replace(self.evaluation, pick=pick))

    def settle_max_seeds(self, stored: int | None) -> CampaignConfig:
        """The campaign with `max_seeds` decided where its file does not say: as stored (`stored`, the stored
        campaign's: one stored before the rounds were planned for power keeps its end), else for a new campaign
        MAX_SEEDS pairs (at least `seeds`), or with rounds of searches (settle_design first) NEW_DESIGN's most pairs
        per search."""
        if self.evaluation.max_seeds is not None:
            return self
        most = NEW_DESIGN["max_seeds"] if self.max_replicates > self.replicates else MAX_SEEDS
        max_seeds = stored if stored is not None else max(self.evaluation.seeds, most)
        return dataclasses.replace(self, evaluation=dataclasses.replace(self.evaluation, max_seeds=max_seeds))

    def settle_image_size(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with each method's image size decided where its file does not say: as the stored campaign
        (`stored`, its config as stored) has that method's study, else the backbone's default
        (StudyConfig.settle_image_size)."""
        return self._settle_each(stored, lambda study, kept: study.settle_image_size(
            (kept or {}).get("data", {}).get("image_size")))

    def settle_rare_kept(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with the rare-class examples each study keeps decided where its file does not say: as the
        stored campaign (`stored`, its config as stored) has that method's study (its identity leaves out
        DATA_ADDED_LATER's "first"), else drawn (StudyConfig.settle_rare_kept)."""
        return self._settle_each(stored, lambda study, kept: study.settle_rare_kept(
            None if kept is None else kept.get("data", {}).get("rare_kept", DATA_ADDED_LATER["rare_kept"])))

    def _settle_each(self, stored: dict[str, Any] | None,
                     settle: Callable[[StudyConfig, dict[str, Any] | None], StudyConfig]) -> CampaignConfig:
        """The campaign with `settle(study, its stored identity, or None where not stored)` for every method's study
        of every task (`stored`: the stored campaign's config; None: not stored)."""
        def each(studies: dict[str, StudyConfig], kept: dict[str, Any]) -> dict[str, StudyConfig]:
            return {m: settle(s, kept.get(m)) for m, s in studies.items()}

        stored = stored or {}
        tasks = {t: each(studies, ((stored.get("tasks") or {}).get(t) or {}).get("studies") or {})
                 for t, studies in self.tasks.items()}
        studies = next(iter(tasks.values())) if tasks else each(self.studies, stored.get("studies") or {})
        return dataclasses.replace(self, studies=studies, tasks=tasks)

    def with_threads(self, threads: int) -> CampaignConfig:
        """The campaign with every study of every task training on `threads` CPU threads."""
        def each(studies: dict[str, StudyConfig]) -> dict[str, StudyConfig]:
            return {m: dataclasses.replace(s, threads=threads) for m, s in studies.items()}

        return dataclasses.replace(self, studies=each(self.studies), tasks={t: each(s) for t, s in self.tasks.items()})

    def settle_strategy(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with each method's search strategy decided where its file does not say: as the stored
        campaign (`stored`, its config as stored) has that method's study (its identity leaves out the strategy
        at ADDED_LATER's "gp") where that was a default then, else DEFAULT_STRATEGY (StudyConfig.settle_strategy)."""
        if stored is None:
            return self
        kept = stored.get("studies") or {}
        studies = {m: s.settle_strategy((kept.get(m) or {}).get("strategy", ADDED_LATER["strategy"]) if m in kept
                                        else None) for m, s in self.studies.items()}
        return dataclasses.replace(self, studies=studies)

    def settle_widen(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with whether each study's ranges widen where its file does not say: as the stored campaign's
        study (its identity leaves widen out at ADDED_LATER's False: stored before widening existed), else on
        (StudyConfig.settle_widen)."""
        return self._settle_each(stored, lambda study, kept: study.settle_widen(
            None if kept is None else kept.get("widen", ADDED_LATER["widen"])))

    def settle_defaults(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with each study's parameters left to a default that has changed since at the value the stored
        campaign's study fixed, where that was the earlier default (StudyConfig.settle_defaults)."""
        return self._settle_each(stored, lambda study, kept: study.settle_defaults(
            None if kept is None else kept.get("fixed", {})))

    def settled(self, stored: dict[str, Any] | None) -> CampaignConfig:
        """The campaign with every setting its file leaves open decided, in one place: as the stored campaign
        (`stored`, its config as stored) was, else as a new campaign's (None: not stored). Each settle_* says its
        rule."""
        evaluation = None if stored is None else Evaluation(**{"resplit": False, **(stored.get("evaluation") or {})})
        return (self.settle_image_size(stored).settle_strategy(stored)
                .settle_resplit(None if evaluation is None else evaluation.resplit)
                .settle_design(stored).settle_pick(stored)
                .settle_max_seeds(None if evaluation is None else evaluation.max_seeds)
                .settle_rare_kept(stored).settle_widen(stored).settle_defaults(stored).settle_replicate_seeds(stored))

    def to_dict(self) -> dict[str, Any]:
        """What is stored: enough for `report --verdict` to find every study and re-take the verdict."""
        return {"name": self.name, "methods": list(self.methods), "description": self.description,
                "evaluation": dataclasses.asdict(self.evaluation), "replicates": max(1, self.replicates),
                "max_replicates": self.most_searches,
                "replicates_per_round": self.replicates_per_round or NEW_DESIGN["replicates_per_round"],
                "budget": self.budget, "replicate_seeds": self.replicate_seeds,
                **({"tasks": {t: {"studies": {m: studies[m].identity() for m in self.methods}}
                              for t, studies in self.tasks.items()}} if self.tasks
                   else {"studies": {m: self.studies[m].identity() for m in self.methods}})}

    def identity(self) -> dict[str, Any]:
        """What the campaign is: its methods and their studies' identities, not what may grow (NOT_IDENTITY), and
        `resplit` and `replicate_seeds` where on (so a campaign stored before either keeps its fingerprint)."""
        identity = {k: v for k, v in self.to_dict().items() if k not in NOT_IDENTITY}
        identity |= {"resplit": True} if self.evaluation.resplit else {}
        return identity | ({"replicate_seeds": APART} if self.replicate_seeds == APART else {})

    def fingerprint(self) -> str:
        """A short hash of `identity`, stored beside the campaign."""
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def task_changes(self, stored: dict[str, Any]) -> TaskChanges | None:
        """How this campaign of tasks differs from the stored one (`stored`: its config as stored) when it shares
        everything but its tasks (TaskChanges); None when both are not campaigns of tasks or what they share
        differs. The identity rule for tasks: a task is its studies' identities, a campaign what its tasks share
        (identity less its tasks) and its tasks; so a stored campaign may gain tasks, never lose or change one."""
        identity = self.identity()
        kept = {k: v for k, v in stored.items() if k not in NOT_IDENTITY}
        kept |= {"resplit": True} if (stored.get("evaluation") or {}).get("resplit") else {}
        kept |= {"replicate_seeds": APART} if stored.get("replicate_seeds") == APART else {}
        if not self.tasks or not stored.get("tasks") or \
                {k: v for k, v in identity.items() if k != "tasks"} != {k: v for k, v in kept.items() if k != "tasks"}:
            return None
        new, old = identity["tasks"], kept["tasks"]
        changed = {task: sorted({path.split(".", 2)[-1] for path in _json_differences(new[task], old[task])})
                   for task in old if task in new and new[task] != old[task]}
        return TaskChanges([t for t in new if t not in old], [t for t in old if t not in new], changed)


@dataclass(frozen=True)
class TaskChanges:
    """A campaign of tasks against the stored one that shares everything else: the tasks it adds (stored studies,
    runs and verdicts of the others are kept, only the new ones run), and the stored ones it lacks or changes
    (task -> the study fields that differ, e.g. data.imbalance_class), which make it another campaign."""

    added: list[str]
    removed: list[str]
    changed: dict[str, list[str]]


def _json_differences(new: Any, old: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON-like values differ (a task's `studies.METHOD.data.imbalance_class`)."""
    if isinstance(new, dict) and isinstance(old, dict):
        return [d for key in sorted(set(new) | set(old))
                for d in _json_differences(new.get(key), old.get(key), f"{path}.{key}" if path else key)]
    return [] if new == old else [path]


EVALUATE_FIELDS = ("seeds", "max_seeds", "seeds_per_round", "pick", "resplit", "primary", "smallest_effect",
                   "max_minutes", "trim")


def _fail(source: str, key: str, problem: str) -> FieldError:
    return FieldError(source, key, problem)


def _int(source: str, table: dict[str, Any], key: str, default: int, section: str, low: int = 1,
         high: int = 1000) -> int:
    """An integer field between `low` and `high`, the reason for the bound in its error."""
    value = table.pop(key, default)
    where = f"{section}.{key}" if section else key
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(source, where, f"must be an integer, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise _fail(source, where, f"must be between {low} and {high}, got {value}")
    return value


def _evaluation(source: str, raw: Any) -> Evaluation:
    if not isinstance(raw, dict):
        raise _fail(source, "evaluate", "must be a table")
    table = dict(raw)
    seeds = _int(source, table, "seeds", 5, "evaluate", 2)  # one seed gives no interval
    max_seeds = None if "max_seeds" not in table else _int(source, table, "max_seeds", seeds, "evaluate", seeds)
    per_round = _int(source, table, "seeds_per_round", seeds, "evaluate", 1)
    pick = table.pop("pick", None)
    if pick is not None and pick not in PICKS:
        raise _fail(source, "evaluate.pick", f"must be one of {', '.join(PICKS)}, got {pick!r}")
    resplit = table.pop("resplit", None)
    if resplit is not None and not isinstance(resplit, bool):
        raise _fail(source, "evaluate.resplit", f"must be true or false, got {resplit!r}")
    primary = _primary(source, table.pop("primary", None))
    effects = _smallest_effect(source, table.pop("smallest_effect", {}))
    max_minutes = table.pop("max_minutes", None)
    if max_minutes is not None and (isinstance(max_minutes, bool) or not isinstance(max_minutes, (int, float))
                                    or not max_minutes > 0):
        raise _fail(source, "evaluate.max_minutes", f"must be a positive number of minutes, got {max_minutes!r}")
    trim = table.pop("trim", None)
    if trim is not None and (isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0 <= trim <= 0.4):
        raise _fail(source, "evaluate.trim", f"must be a share between 0 and 0.4 cut from each end (0.2: a 20% "
                                             f"trimmed mean; 0: plain means), got {trim!r}")
    if table:
        key, known = sorted(table)[0], EVALUATE_FIELDS
        raise _fail(source, f"evaluate.{key}", f"unknown field{did_you_mean(key, known)}; known: {', '.join(known)}")
    return Evaluation(seeds, max_seeds, per_round, pick, resplit, primary, effects,
                      None if max_minutes is None else float(max_minutes), None if trim is None else float(trim))


def _primary(source: str, raw: Any) -> tuple[str, ...] | None:
    """`evaluate.primary`: the metrics the verdict decides on, each once, from DECISION_METRICS."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) for m in raw):
        raise _fail(source, "evaluate.primary", f"must be a list of metrics, e.g. [\"test_balanced_accuracy\"]; "
                                                f"known: {', '.join(DECISION_METRICS)}")
    for metric in raw:
        if metric not in DECISION_METRICS:
            raise _fail(source, "evaluate.primary", f"unknown metric {metric!r}"
                                                    f"{did_you_mean(metric, DECISION_METRICS)}; known: "
                                                    f"{', '.join(DECISION_METRICS)}")
    if len(set(raw)) != len(raw):
        raise _fail(source, "evaluate.primary", "a metric is listed twice")
    return tuple(raw)


def _smallest_effect(source: str, raw: Any) -> dict[str, float]:
    """`evaluate.smallest_effect`: points per metric (0 < points <= 50), e.g. { smallest_class_accuracy = 10 }."""
    if not isinstance(raw, dict):
        raise _fail(source, "evaluate.smallest_effect", "must be a table of points per metric, e.g. "
                                                        "{ test_balanced_accuracy = 1, smallest_class_accuracy = 5 }")
    for metric, points in raw.items():
        if metric not in DECISION_METRICS:
            raise _fail(source, f"evaluate.smallest_effect.{metric}", f"unknown metric"
                                                                      f"{did_you_mean(metric, DECISION_METRICS)}; "
                                                                      f"known: {', '.join(DECISION_METRICS)}")
        if isinstance(points, bool) or not isinstance(points, (int, float)) or not 0 < points <= 50:
            raise _fail(source, f"evaluate.smallest_effect.{metric}", f"must be a number of points in (0, 50], "
                                                                      f"got {points!r}")
    return {metric: float(points) for metric, points in raw.items()}


def _method_list(source: str, raw: Any) -> tuple[str, ...]:
    """The campaign's methods by their canonical names, ERM first; a method listed twice is refused."""
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) for m in raw):
        raise _fail(source, "methods", 'must be a list of method names, e.g. ["erm", "ls", "hws"]')
    names: list[str] = []
    for text in raw:
        try:
            name = parse_method(text).name
        except UserError as error:
            raise _fail(source, "methods", str(error)) from None
        if name in names:
            raise _fail(source, "methods", f"{name} is listed twice")
        names.append(name)
    return (REFERENCE, *[n for n in names if n != REFERENCE])


def parse_campaign(raw: dict[str, Any], source: str, replicates: int | None = None) -> CampaignConfig:
    """Validate a parsed campaign document; `source` names the file in errors. `replicates` (from
    --replicates) overrides the file's."""
    raw = json.loads(json.dumps(raw))
    if "method" in raw:
        raise _fail(source, "method", "a campaign lists its methods in `methods = [...]`; a file with [method] "
                                      "is a study: run it with `robust-tune run`")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
        raise _fail(source, "name", f"must be letters, digits, '_' or '-' (a campaign's studies are named "
                                    f"NAME.METHOD), got {name!r}")
    methods = _method_list(source, raw.pop("methods", None))
    own = _own_params(source, raw.pop("method_params", {}), methods)
    evaluation = _evaluation(source, raw.pop("evaluate", {}))
    file_replicates = _int(source, raw, "replicates", 0, "", 1, 20) if "replicates" in raw else 0
    replicates = file_replicates if replicates is None else replicates
    if replicates and not 1 <= replicates <= 20:
        raise UserError(f"--replicates must be between 1 and 20 (each one is a whole search per method), "
                        f"got {replicates}")
    most = _int(source, raw, "max_replicates", 0, "", 2, 50) if "max_replicates" in raw else 0
    if most and replicates and most < replicates:
        raise _fail(source, "max_replicates", f"must be at least replicates ({replicates}), the first look's "
                                              f"searches; got {most}")
    step = _int(source, raw, "replicates_per_round", 0, "", 1, 50) if "replicates_per_round" in raw else 0
    shared = raw.pop("params", {})
    if not isinstance(shared, dict):
        raise _fail(source, "params", "must be a table")
    for param in shared:
        if not any(param in _declared(m) for m in methods):
            raise _fail(source, f"params.{param}", f"no method of the campaign takes it ({', '.join(methods)})")
    overrides = _tasks(source, raw.pop("tasks", None), raw)

    def studies_of(study_name: str, task: str | None) -> dict[str, StudyConfig]:
        changed = {} if task is None else overrides[task]
        document = {**raw, **{table: {**raw.get(table, {}), **changed[table]} for table in changed}}
        return {m: _method_study({**document, "name": f"{study_name}.{m}", "method": {"name": m},
                                  "params": {**{k: v for k, v in shared.items() if k in _declared(m)},
                                             **own.get(m, {})}}, source, m, task) for m in methods}

    tasks = {task: studies_of(f"{name}.{task}", task) for task in overrides}
    _check_tasks_differ(source, tasks)
    studies = next(iter(tasks.values())) if tasks else studies_of(name, None)
    reference = studies[REFERENCE]
    return CampaignConfig(name=name, methods=methods, studies=studies, evaluation=evaluation, replicates=replicates,
                          max_replicates=most, replicates_per_round=step,
                          budget=dataclasses.asdict(reference.budget), description=reference.description, tasks=tasks)


TASK_TABLES = ("data", "model")  # what a task may override
MODEL_FIELDS = ("backbone", "weights")


def _tasks(source: str, raw: Any, document: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """The [tasks.<task>.data] and [tasks.<task>.model] tables, checked: task names as campaign names (no two the
    same but for case), only those two tables, and only fields that [data] and [model] have. None: no tasks."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise _fail(source, "tasks", "must hold one table per task, e.g. [tasks.wood-r50.data] root = \"data/wood\"")
    for table in TASK_TABLES:
        if not isinstance(document.get(table, {}), dict):
            raise _fail(source, table, "must be a table")
    known = {"data": [f.name for f in dataclasses.fields(DataConfig)], "model": list(MODEL_FIELDS)}
    seen: dict[str, str] = {}
    for task, tables in raw.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", task):
            raise _fail(source, f"tasks.{task}", "a task's name must be letters, digits, '_' or '-' (its studies are "
                                                 "named CAMPAIGN.TASK.METHOD)")
        if task.lower() in seen:
            raise _fail(source, f"tasks.{task}", f"two tasks named {seen[task.lower()]!r} and {task!r}: task names "
                                                 "must differ in more than case")
        seen[task.lower()] = task
        if not isinstance(tables, dict) or not tables:
            raise _fail(source, f"tasks.{task}", "must override [data] or [model] fields, e.g. "
                                                 f"[tasks.{task}.data] imbalance_class = \"8\"")
        for table, fields in tables.items():
            if table not in TASK_TABLES:
                raise _fail(source, f"tasks.{task}.{table}", "a task overrides only [data] and [model] fields "
                                                            f"([tasks.{task}.data], [tasks.{task}.model])")
            if not isinstance(fields, dict):
                raise _fail(source, f"tasks.{task}.{table}", "must be a table")
            for key in fields:
                if key not in known[table]:
                    raise _fail(source, f"tasks.{task}.{table}.{key}",
                                f"unknown field{did_you_mean(key, known[table])}; known: {', '.join(known[table])}")
    return raw


def _check_tasks_differ(source: str, tasks: dict[str, dict[str, StudyConfig]]) -> None:
    """Two tasks with the same data and model would be one task counted twice in the ranking: refused."""
    seen: dict[str, str] = {}
    for task, studies in tasks.items():
        study = studies[REFERENCE].identity()
        key = json.dumps([study.get("data"), study.get("backbone"), study.get("weights")], sort_keys=True, default=str)
        if key in seen:
            raise _fail(source, f"tasks.{task}", f"the same data and model as tasks.{seen[key]}: one task counted "
                                                 "twice; change a [data] or [model] field, or drop one")
        seen[key] = task


def _declared(method: str) -> set[str]:
    return {p.name for p in parse_method(method).params}


def _own_params(source: str, raw: Any, methods: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The [method_params.<method>] tables, by canonical method name; each must name a method of the
    campaign and only parameters that method takes."""
    if not isinstance(raw, dict):
        raise _fail(source, "method_params", "must hold one table per method, e.g. [method_params.hws]")
    own = {}
    for key, table in raw.items():
        try:
            method = parse_method(key).name
        except UserError as error:
            raise _fail(source, f"method_params.{key}", str(error)) from None
        if method not in methods:
            raise _fail(source, f"method_params.{key}", f"{method} is not in methods = [{', '.join(methods)}]")
        if method in own:
            raise _fail(source, f"method_params.{key}", f"{method} has two tables")
        if not isinstance(table, dict):
            raise _fail(source, f"method_params.{key}", "must be a table of the method's parameters")
        for param in table:
            if param not in _declared(method):
                raise _fail(source, f"method_params.{key}.{param}",
                            f"{method} takes no parameter {param}{did_you_mean(param, _declared(method))}; known: "
                            f"{', '.join(sorted(_declared(method)))}")
        own[method] = table
    return own


def _method_study(raw: dict[str, Any], source: str, method: str, task: str | None = None) -> StudyConfig:
    """A method's study through the study parser; its errors name the method (and the task), and a method left
    nothing to search is told how to give it something (ERM is tuned over the shared searched parameters)."""
    try:
        return parse_study(raw, f"{source} ({'' if task is None else f'task {task}, '}method {method})")
    except UserError as error:
        if "nothing to search" in str(error):
            raise UserError(f"{source}: method {method} has nothing to search: every parameter it takes is fixed; "
                            "search a shared one in [params], e.g. lr_head = { low = 0.01, high = 0.2, "
                            "log = true }" + ("" if method == REFERENCE else f", or one of its own in "
                                              f"[method_params.{method}]")) from None
        raise


def load_campaign(path: str | Path, replicates: int | None = None, overrides: Sequence[str] = ()) -> CampaignConfig:
    """Read and validate a campaign file, with `--set section.key=value` overrides applied as `run` applies
    them to a study file; any problem is a one-line UserError."""
    path = Path(path)
    with naming_overrides(list(overrides)):
        return parse_campaign(apply_overrides(read_toml(path, "campaign"), list(overrides)), str(path), replicates)
