"""Re-train a study's best configuration over seeds, against baselines, or with one parameter moved.

A study's best trial is one seed on one split, chosen by the numbers it reports; `evaluate` trains it
again on seeds 0..N-1 next to baselines trained at the same settings (the GI-LS paper's Table 4 rule:
a baseline inherits every setting it shares with the best trial), and `--vary` moves one parameter
(Table 8). A baseline may carry values of its own (`cb:cb_power=0.5`), which make it a variant named by
them. A run is stored in rt_evaluations when it ends, keyed by (study, variant, seed): a killed evaluate
loses only the runs in progress, a repeated one runs only what is missing, and a run stored before with
the same planned settings and seed (another study's ERM) is copied instead of trained again. Runs train
on a TrialRunner: in this process, or on Dask workers like a study's trials.

Torch is imported only by `run_evaluation`: planning and reading (`best`, `report`) stay light.
"""
from __future__ import annotations

import json
import math
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pipeline.config import DEFAULT_THREADS, TrainConfig, check_threads, resolve_device
from pipeline.errors import TrainingFailed, UserError
from pipeline.faults import kill_point
from pipeline.methods import parse_method
from pipeline.params import Value
from pipeline.spec.study_config import DATA_ADDED_LATER, DEFAULT_PICK, PICKS
from pipeline.store import (EvaluationRecord, Store, StudyLock, StudyRecord, TrialRecord, TrialStatus, best_trial,
                            picked_trial)
from pipeline.store.records import pareto_set

if TYPE_CHECKING:
    from pipeline.search.trial import Outcome, TrialJob, TrialRunner
    from pipeline.training.result import RunResult

TUNED = "tuned"  # the variant name of the best configuration itself
VARIANT_NAME_LIMIT = 200  # rt_evaluations.variant's length


# The metrics every comparison of re-trained runs reports (the evaluation tables, the verdict, its picture), with
# their short names, and those the evaluation table shows as differences to the reference.
COMPARE_METRICS = (("test_accuracy", "test acc"), ("test_balanced_accuracy", "balanced"),
                   ("test_worst_class_accuracy", "worst class"), ("smallest_class_accuracy", "smallest class"))
COMPARE_DIFFERENCES = ("test_accuracy", "test_balanced_accuracy", "smallest_class_accuracy")


def run_metrics(run: EvaluationRecord) -> dict[str, float]:
    """A run's compared metrics, with the test accuracy of its smallest training class."""
    smallest = min(run.train_class_counts, key=lambda name: run.train_class_counts[name])
    return {**run.metrics, "smallest_class_accuracy": run.per_class["test"].get(smallest, math.nan)}


@dataclass(frozen=True)
class Variant:
    """One thing to re-train over the seeds: the tuned configuration, a baseline, or a moved parameter."""

    name: str
    method: str
    params: dict[str, Value]  # every parameter of `method`, resolved
    own: dict[str, Value] = field(default_factory=dict)  # a named baseline's own values (METHOD:name=value)


@dataclass(frozen=True)
class Plan:
    """What an evaluate runs: each variant on each seed, all derived from one trial of one study."""

    study: StudyRecord
    trial_index: int
    base: TrainConfig  # the best trial's configuration
    variants: list[Variant]
    seeds: list[int]
    resplit: bool
    split_base: int  # with `resplit`, seed k trains on split seed split_base + k (see plan_evaluation)

    def config(self, variant: Variant, seed: int, device: str = "auto", precision: str = "auto") -> TrainConfig:
        """The TrainConfig of one run; with `resplit` the split is drawn again with the seed (split seed
        split_base + seed, counted from the study's own split seed)."""
        data = replace(self.base.data, split_seed=self.split_base + seed) if self.resplit else self.base.data
        return replace(self.base, data=data, method=variant.method, params=variant.params, seed=seed, device=device,
                       precision=precision)


def study_and_trial(store: Store, name: str, trial: int | None = None,
                    pick: str = DEFAULT_PICK) -> tuple[StudyRecord, TrialRecord]:
    """A stored study and the trial it recommends (`pick`: the best observed or the model's pick), or trial
    `trial`; UserError naming what is missing."""
    study = store.require_study(name)
    trials = store.trials(study.id)
    if trial is None:
        if pick not in PICKS:
            raise UserError(f"--pick must be one of {', '.join(PICKS)}, got {pick!r}")
        chosen = picked_trial(study, trials, pick)
        if chosen is None and best_trial(study, trials) is None:
            raise UserError(f"study {name} has no completed trial yet; run it first")
        if chosen is None:
            raise UserError(f"study {name} has no model's pick: its Gaussian process is fitted when a run of the "
                            "study ends with three or more completed trials (`robust-tune run` with --trials to add "
                            "one), or take the best observed trial (--pick observed)")
        return study, chosen
    chosen = next((t for t in trials if t.trial_index == trial), None)
    if chosen is None or chosen.status != TrialStatus.COMPLETED:
        done = ", ".join(str(t.trial_index) for t in trials if t.status == TrialStatus.COMPLETED) or "none"
        raise UserError(f"study {name} has no completed trial {trial}; completed: {done}")
    return study, chosen


def pareto_note(store: Store, study: StudyRecord, chosen: int) -> str | None:
    """For a study with several objectives whose best trial was taken (no --trial): that it is one trade-off of the
    Pareto set, the one best on the first objective, and which others there are; None for one objective."""
    config = study.study
    if not config.multi_objective:
        return None
    others = [t.trial_index for t in pareto_set(study, store.trials(study.id)) if t.trial_index != chosen]
    return (f"study {study.name} has several objectives ({', '.join(config.objectives)}): trial {chosen} "
            f"is the one of its Pareto set best on {config.objective}"
            + (f"; the set's other trade-offs are trial(s) {', '.join(map(str, others))} (--trial K takes one)"
               if others else ", the set's only trial"))


def trial_config(study: StudyRecord, trial: TrialRecord) -> TrainConfig:
    """The full configuration a trial trained with: the study's data and network, its fixed parameters
    and the trial's proposed ones, every parameter resolved (defaults filled in), at the study's seed and
    the thread count the trial recorded (the study's, or the default, where it recorded none)."""
    config = study.study
    method = parse_method(config.method)
    params = method.resolve({**config.fixed, **trial.parameters})
    recorded = trial.settings.threads if trial.settings is not None else None
    return TrainConfig(data=config.data, backbone=config.backbone, weights=config.weights,
                       method=method.name, params=params, seed=config.seed,
                       threads=recorded or config.threads or DEFAULT_THREADS)


def inherited(method_name: str, best: dict[str, Value], given: dict[str, Value | str]) -> dict[str, Value]:
    """A baseline's parameters: each one it shares with the best configuration at the best value,
    `given` (from --param) over them, the rest at the method's defaults."""
    method = parse_method(method_name)
    taken = {p.name for p in method.params}
    return method.resolve({**{k: v for k, v in best.items() if k in taken},
                           **{k: v for k, v in given.items() if k in taken}})


def value_text(value: Value) -> str:
    """A parameter value as the same short text every time: a variant's name says its values with it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def variant_name(method_name: str, own: dict[str, Value]) -> str:
    """`METHOD:name=value:...`, the own values in the method's declaration order; the method alone without."""
    order = [p.name for p in parse_method(method_name).params]
    return "".join([method_name] + [f":{name}={value_text(own[name])}" for name in order if name in own])


def parse_variant(text: str, best: dict[str, Value], given: dict[str, str]) -> Variant:
    """`METHOD[:name=value[:name=value...]]` -> a baseline named by its own values, each checked against the
    method's declaration; the parameters it shares with the best configuration come from it, then --param's
    values, then its own over both."""
    method_text, *assignments = (part.strip() for part in text.split(":"))
    method = parse_method(method_text)
    declared = method.declared
    own: dict[str, Value] = {}
    for assignment in assignments:
        name, sep, raw = (part.strip() for part in assignment.partition("="))
        if not sep or not name or not raw:
            raise UserError(f"malformed --against {text!r}: expected METHOD[:name=value...], e.g. cb:cb_power=0.5")
        if name not in declared:
            raise UserError(f"--against {text}: {method.name} takes no parameter {name}; known: {', '.join(declared)}")
        try:
            own[name] = declared[name].coerce(raw)
        except UserError as error:
            raise UserError(f"--against {text}: {error}") from None
    taken = {k: v for k, v in given.items() if k in declared}
    name = variant_name(method.name, own)
    if len(name) > VARIANT_NAME_LIMIT:
        raise UserError(f"--against {text}: the variant's name {name!r} is longer than the database's "
                        f"{VARIANT_NAME_LIMIT} characters")
    return Variant(name, method.name, inherited(method.name, best, {**taken, **own}), own)


MAX_SEEDS = 1000  # as a campaign's evaluate.max_seeds


def parse_vary(text: str, method_name: str) -> tuple[str, list[Value]]:
    """`NAME=V1,V2,...` -> the parameter and its values, each checked against the method's declaration."""
    name, sep, values = text.partition("=")
    name = name.strip()
    declared = parse_method(method_name).declared
    if not sep or not values.strip():
        raise UserError(f"malformed --vary {text!r}: expected NAME=V1,V2,..., e.g. gamma=0.000999,0.001001")
    if name not in declared:
        raise UserError(f"--vary {name}: {method_name} takes no parameter {name}; known: {', '.join(declared)}")
    coerced = [declared[name].coerce(v.strip()) for v in values.split(",") if v.strip()]
    repeated = next((v for k, v in enumerate(coerced) if v in coerced[:k]), None)
    if repeated is not None:  # the same run trained twice would only take time
        raise UserError(f"--vary {name}: the value {repeated} is listed twice; list each value once")
    return name, coerced


def plan_evaluation(store: Store, name: str, seeds: int = 5, against: Sequence[str] = (),
                    vary: str | None = None, params: dict[str, str] | None = None,
                    resplit: bool = False, threads: int | None = None, pick: str = DEFAULT_PICK,
                    trial: int | None = None, split_base: int | None = None) -> Plan:
    """Which runs an evaluate of study `name` needs; every bad option is a UserError before any work.
    A baseline is `METHOD` or `METHOD:name=value:...` (named by its own values, see parse_variant). The tuned
    configuration is the best trial's, or trial `trial`'s (another of a Pareto set, say). Every run trains with
    that trial's thread count, or `threads` when given. With `resplit`, seed k trains on split seed
    `split_base + k`, by default the study's own split seed + k, as a campaign pairs them (a search replicate with
    seeds of its own gives its split seed less its seed offset)."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise UserError(f"--seeds must be between 1 and {MAX_SEEDS}, got {seeds} (each seed trains every "
                        "variant once; a few seeds to a few dozen give the interval)")
    if threads is not None:
        check_threads(threads)
    study, chosen = study_and_trial(store, name, trial, pick)
    base = trial_config(study, chosen)
    base = base if threads is None else replace(base, threads=threads)
    params = params or {}
    variants = [Variant(TUNED, base.method, base.params)]
    named: dict[str, Variant] = {}
    for text in against:
        if text.strip():
            variant = parse_variant(text, base.params, params)
            named.setdefault(variant.name, variant)  # a variant named twice runs once
    variants += named.values()
    unused = [k for k in params if not any(k in {p.name for p in parse_method(v.method).params}
                                           for v in variants[1:])]
    if unused:
        raise UserError(f"--baseline-param {unused[0]}: no --against method takes it")
    if vary:
        moved, values = parse_vary(vary, base.method)
        variants += [Variant(f"{moved}={v:g}" if isinstance(v, float) else f"{moved}={v}", base.method,
                             parse_method(base.method).resolve({**base.params, moved: v})) for v in values]
    own = study.study.data.split_seed
    return Plan(study, chosen.trial_index, base, variants, list(range(seeds)), resplit,
                own if split_base is None else split_base)


def _planned(config: TrainConfig) -> dict[str, Any]:
    """A run's identity as stored: the configuration less seed, device, precision and thread count (how it
    computes: the thread count is checked against the run's recorded settings, see same_threads), as JSON
    gives it back."""
    planned = json.loads(json.dumps({k: v for k, v in config.to_dict().items()
                                     if k not in ("seed", "device", "precision", "threads")}))
    for key, default in DATA_ADDED_LATER.items():  # a field added later, at its default: as runs stored before
        if planned["data"].get(key, default) == default:
            planned["data"].pop(key, None)
    return planned


def same_threads(run: EvaluationRecord, threads: int) -> bool:
    """Whether a stored run trained with `threads` torch threads, or was stored before the count was recorded."""
    return run.settings.threads in (None, threads)


@dataclass(frozen=True)
class EvaluationStarted:
    study: str
    trial_index: int
    runs: int  # variants x seeds
    stored: int  # of those already stored, which do not run again
    shared: int = 0  # of those missing, stored before for another study or variant: copied, not trained


@dataclass(frozen=True)
class RunStarted:
    variant: str
    seed: int
    number: int  # 1-based among the runs this call makes
    total: int
    epochs: int
    study: str = ""  # the run's study (a campaign re-trains several at once on workers)


@dataclass(frozen=True)
class RunEnded:
    variant: str
    seed: int
    number: int
    total: int
    test_accuracy: float
    seconds: float
    shared_with: str | None = None  # the study whose stored run was copied instead of training it again
    study: str = ""


@dataclass(frozen=True)
class RunLost:
    """A run whose worker died before it ended: it runs again."""

    variant: str
    seed: int
    reason: str
    study: str = ""


LOST_LIMIT = 3  # a run lost this many times stops the evaluate (its worker keeps dying: out of memory)


def missing_runs(store: Store, plan: Plan) -> list[tuple[Variant, int]]:
    """The (variant, seed) pairs not stored yet; a stored run planned with other settings is a UserError
    (its rows are never replaced)."""
    stored = {(e.variant, e.seed): e for e in store.evaluations(plan.study.id)}
    missing = []
    for variant in plan.variants:
        for seed in plan.seeds:
            row = stored.get((variant.name, seed))
            if row is None:
                missing.append((variant, seed))
            elif row.config != (planned := _planned(plan.config(variant, seed))) or row.trial_index != plan.trial_index:
                raise UserError(_stored_otherwise(plan, variant, seed, row, planned))
            elif not same_threads(row, plan.base.threads):
                raise UserError(f"study {plan.study.name}: variant {variant.name} seed {seed} is stored trained with "
                                f"{row.settings.threads} torch thread(s) and this evaluate trains with "
                                f"{plan.base.threads} (--threads, else the best trial's): its runs would mix numbers "
                                f"summed in another order; give --threads {row.settings.threads}, or drop the stored "
                                f"runs first with --drop {variant.name}")
    return missing


def _stored_otherwise(plan: Plan, variant: Variant, seed: int, row: EvaluationRecord, planned: dict[str, Any]) -> str:
    """Why a stored run is not the one planned, and the two ways on: another variant name, or --drop."""
    changed = sorted(k for k in planned if row.config.get(k) != planned[k])
    data, stored_data = planned.get("data") or {}, row.config.get("data") or {}
    moved_data = {k for k in {*data, *stored_data} if data.get(k) != stored_data.get(k)}
    if changed == ["data"] and moved_data == {"split_seed"}:  # the run's split alone differs
        own = plan.study.study.data.split_seed
        why = (f" (with --resplit each seed's split seed counts from the study's own, {own}; an evaluate before "
               "this version counted from 0)" if plan.resplit else " (the study's own split, without --resplit)")
        return (f"study {plan.study.name}: variant {variant.name} seed {seed} is stored trained on split seed "
                f"{stored_data.get('split_seed')}, and this evaluate trains it on split seed {data.get('split_seed')}"
                f"{why}; nothing was changed, and stored runs are never replaced: drop them first with "
                f"--drop {variant.name}")
    stored_params, params = row.config.get("params") or {}, planned.get("params") or {}
    moved = {k: v for k, v in params.items() if stored_params.get(k) != v}
    differs = ", ".join(f"params: {', '.join(moved)}" if k == "params" and moved else k for k in changed)
    ways = f"drop the stored runs first with --drop {variant.name}"
    if variant.name != TUNED and variant.name.split(":")[0] == variant.method and moved:  # a baseline
        renamed = variant_name(variant.method, {**variant.own, **moved})
        ways = f"name the variant by its values, e.g. --against {renamed}, or {ways}"
    return (f"study {plan.study.name}: variant {variant.name} seed {seed} is stored from trial {row.trial_index} "
            f"with other settings (differs in: {differs or 'the trial'}); nothing was changed, and stored runs "
            f"are never replaced: {ways}")


def shared_runs(store: Store, plan: Plan,
                missing: list[tuple[Variant, int]]) -> dict[tuple[str, int], tuple[str, EvaluationRecord]]:
    """The missing runs stored before, planned alike on the same seed, for another study (or another variant
    name): (variant name, seed) -> (that study's name, its run). They are copied, not trained again."""
    found = {}
    for variant, seed in missing:
        match = store.matching_evaluation(_planned(plan.config(variant, seed)), seed, plan.study.id, variant.name,
                                          lambda run: same_threads(run, plan.base.threads))
        if match is not None:
            found[(variant.name, seed)] = match
    return found


def evaluation_job(plan: Plan, variant: Variant, seed: int, number: int, device: str = "auto",
                   precision: str = "auto") -> TrialJob:
    """One run as a trial job a runner trains: the study with the variant's method and every parameter fixed,
    on the run's data, so that the job trains exactly `plan.config(variant, seed)`."""
    from pipeline.search.trial import TrialJob

    config = plan.config(variant, seed)
    study = replace(plan.study.study, method=variant.method, fixed=dict(variant.params), search={}, data=config.data,
                    threads=config.threads)
    return TrialJob(study, number, {}, seed, device, precision)


def drop_variant(store: Store, name: str, variant: str) -> int:
    """Remove one variant's stored runs of study `name`, holding the study's lock; how many were removed."""
    study = store.require_study(name)
    with store.reporting_loss(f"delete runs of study {name}"), store.lock_study(study) as lock:
        lock.check()
        return store.delete_evaluations(study.id, variant)


def run_evaluation(store: Store, plan: Plan, device: str = "auto",
                   on_event: Callable[[Any], None] = lambda event: None, precision: str = "auto",
                   runner: TrialRunner | None = None) -> int:
    """Store every missing run of `plan`, each as it ends; returns how many were stored.

    A run stored before for another study (or variant) planned alike on the same seed is copied, not
    trained again; the others train on `runner` (default: in this process, one at a time; Dask workers
    train several at once). Holds the study's lock, so an evaluate and a `run` of the same study (or two
    evaluates) never write at once: each run is stored only while the lock is held, and a lost lock stops
    a run in training. A server lost mid-run (the database's, the Dask scheduler) stops it with ServerLost."""
    return run_evaluations(store, [plan], device, on_event, precision, runner)


def run_evaluations(store: Store, plans: list[Plan], device: str = "auto",
                    on_event: Callable[[Any], None] = lambda event: None, precision: str = "auto",
                    runner: TrialRunner | None = None) -> int:
    """`run_evaluation` of several plans (each of its own study) at once: every plan's study locked, its copies
    stored, then every plan's runs to train sharing `runner`, each stored by its plan as it ends. Returns how
    many runs were stored."""
    resolve_device(device)  # no GPU for --device cuda: refused before anything is stored
    doing = f"evaluate study {plans[0].study.name}" if len(plans) == 1 else f"evaluate {len(plans)} studies"
    missing_count, trainings = 0, []
    # a lost database server, or one another process keeps locked: one line
    with store.reporting_loss(doing), ExitStack() as stack:
        for plan in plans:
            lock = stack.enter_context(store.lock_study(plan.study))
            training, missing = _copies_stored(store, plan, lock, device, on_event)
            missing_count += missing
            if training is not None:
                trainings.append(training)
        if trainings:
            _train_together(trainings, precision, runner, on_event)
    return missing_count


def _copies_stored(store: Store, plan: Plan, lock: StudyLock, device: str,
                   on_event: Callable[[Any], None]) -> tuple[_Training | None, int]:
    """Store `plan`'s missing runs stored before for another study (copies); returns what is left to train (None:
    nothing) and how many runs were missing."""
    def progress(event: Any) -> None:
        lock.stop_if_lost()
        on_event(event)

    missing = missing_runs(store, plan)
    shared = shared_runs(store, plan, missing)
    on_event(EvaluationStarted(plan.study.name, plan.trial_index, len(plan.variants) * len(plan.seeds),
                               len(plan.variants) * len(plan.seeds) - len(missing), len(shared)))
    copies = [(v, s) for v, s in missing if (v.name, s) in shared]  # first: they take no time
    for number, (variant, seed) in enumerate(copies, start=1):
        study_name, run = shared[(variant.name, seed)]
        lock.check()
        store.copy_evaluation(plan.study.id, variant.name, plan.trial_index, run, lock=lock)
        kill_point(f"after-evaluation-{number}")
        on_event(RunEnded(variant.name, seed, number, len(missing), run.metrics["test_accuracy"], 0.0, study_name,
                          plan.study.name))
    to_train = [(number, variant, seed) for number, (variant, seed)
                in enumerate([m for m in missing if m not in copies], start=len(copies) + 1)]
    if not to_train:
        return None, len(missing)
    training = _Training(store, plan, lock, len(missing), len(copies), device, progress)
    training.plan_runs(to_train)
    return training, len(missing)


def _train_together(trainings: list[_Training], precision: str, runner: TrialRunner | None,
                    on_event: Callable[[Any], None]) -> None:
    """Train every run of `trainings` on one runner, up to its capacity at once (one plan's in its order, several
    plans' seed by seed); each outcome goes back to its plan (by its job's study), which stores it or, its worker
    dead, has it run again first."""
    from pipeline.search.trial import InProcessRunner

    by_study = {training.plan.study.study.name: training for training in trainings}
    waiting = [(training, job) for training in trainings for job in training.jobs(precision)]
    if len(trainings) > 1:  # seed by seed across the plans: the runs of one seed share a split, loaded once
        waiting.sort(key=lambda pair: pair[1].seed)
    running: dict[tuple[str, int], Any] = {}

    def progress(event: Any) -> None:
        training = by_study.get(getattr(event, "study", ""))
        (training.on_event if training is not None else trainings[0].on_event)(event)

    with runner or InProcessRunner() as active:
        while waiting or running:
            while waiting and len(running) < active.capacity + active.ahead:
                training, job = waiting.pop(0)
                active.submit(job)
                running[(job.study.name, job.trial_index)] = job
                training.started(job.trial_index)
            for outcome in active.wait(progress):
                name = outcome.study or next(iter(by_study))  # a runner that does not name it runs one plan's
                job = running.pop((name, outcome.trial_index))
                training = by_study[name]
                if not training.ended(outcome):
                    waiting.insert(0, (training, job))


class _Training:
    """An evaluate's runs on a runner: submitted up to its capacity, each stored as it ends; a run whose
    worker died runs again, a run that failed stops the evaluate (the runs stored so far are kept)."""

    def __init__(self, store: Store, plan: Plan, lock: StudyLock, total: int, stored: int, device: str,
                 on_event: Callable[[Any], None]) -> None:
        self.store, self.plan, self.lock, self.total, self.stored = store, plan, lock, total, stored
        self.requested, self.device, self.on_event = device, str(resolve_device(device)), on_event
        self.lost: dict[int, int] = {}  # run number -> times its worker died

    def plan_runs(self, runs: list[tuple[int, Variant, int]]) -> None:
        """The (number, variant, seed) runs to train; a weights file that does not fit the data is refused here."""
        self.runs = {number: (variant, seed) for number, variant, seed in runs}
        self.check_weights(runs[0][1], runs[0][2])

    def jobs(self, precision: str) -> list[TrialJob]:
        """A job for each run to train; a job's trial_index is its run's number."""
        return [evaluation_job(self.plan, variant, seed, number, self.requested, precision)
                for number, (variant, seed) in self.runs.items()]

    def started(self, number: int) -> None:
        variant, seed = self.runs[number]
        self.on_event(RunStarted(variant.name, seed, number, self.total, int(variant.params["epochs"]),
                                 self.plan.study.name))

    def check_weights(self, variant: Variant, seed: int) -> None:
        """A weights file that does not fit the data is refused before any run trains."""
        from pipeline.training.models import check_weights
        from pipeline.search.trial import dataset_for

        config = self.plan.config(variant, seed)
        check_weights(config.backbone, config.weights, dataset_for(config.data, self.device).in_channels)

    def ended(self, outcome: Outcome) -> bool:
        """Store a run that ended; False when its worker died and it must run again."""
        variant, seed = self.runs[outcome.trial_index]
        where = f"study {self.plan.study.name}: variant {variant.name} seed {seed}"
        if outcome.lost is not None:
            self.lost[outcome.trial_index] = self.lost.get(outcome.trial_index, 0) + 1
            if self.lost[outcome.trial_index] >= LOST_LIMIT:
                raise TrainingFailed(f"{where} was lost {LOST_LIMIT} times ({outcome.lost}); "
                                     "the runs stored so far are kept")
            self.on_event(RunLost(variant.name, seed, outcome.lost, self.plan.study.name))
            return False
        if outcome.error is not None:
            raise TrainingFailed(f"{where} failed: {outcome.error}; the runs stored so far are kept")
        result = outcome.result
        assert result is not None  # an outcome neither lost nor failed carries its run
        self.lock.check()
        self.store_run(variant, seed, result)
        self.stored += 1
        kill_point(f"after-evaluation-{self.stored}")
        accuracy = math.nan if result.test.accuracy is None else result.test.accuracy  # a test split always has one
        self.on_event(RunEnded(variant.name, seed, outcome.trial_index, self.total, accuracy, result.train_seconds,
                               study=self.plan.study.name))
        return True

    def store_run(self, variant: Variant, seed: int, result: RunResult) -> None:
        """Store one trained run with its planned identity and its data set's training counts per class."""
        from pipeline.search.trial import dataset_for

        config = self.plan.config(variant, seed)
        dataset = dataset_for(config.data, self.device)  # loaded here already, or once more to count its classes
        counts = {split: dict(zip(dataset.class_names, per_class))
                  for split, per_class in dataset.split_counts().items()}
        self.store.add_evaluation(self.plan.study.id, variant.name, seed, self.plan.trial_index, _planned(config),
                                  result, counts["train"], lock=self.lock,
                                  split_counts={"val": counts["val"], "test": counts["test"]})
