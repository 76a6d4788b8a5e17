"""Re-train a study's best configuration over seeds, against baselines, or with one parameter moved.

A study's best trial is one seed on one split, chosen by the numbers it reports; `evaluate` trains it
again on seeds 0..N-1 next to baselines trained at the same settings (the GI-LS paper's Table 4 rule:
a baseline inherits every setting it shares with the best trial), and `--vary` moves one parameter
(Table 8). A run is stored in rt_evaluations when it ends, keyed by (study, variant, seed): a killed
evaluate loses only the run in progress, a repeated one runs only what is missing.

Torch is imported only by `run_evaluation`: planning and reading (`best`, `report`) stay light.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from pipeline.config import TrainConfig
from pipeline.errors import UserError
from pipeline.methods import parse_method
from pipeline.params import Value
from pipeline.store import Store, StudyRecord, TrialRecord, best_trial

TUNED = "tuned"  # the variant name of the best configuration itself


@dataclass(frozen=True)
class Variant:
    """One thing to re-train over the seeds: the tuned configuration, a baseline, or a moved parameter."""

    name: str
    method: str
    params: dict[str, Value]  # every parameter of `method`, resolved


@dataclass(frozen=True)
class Plan:
    """What an evaluate runs: each variant on each seed, all derived from one trial of one study."""

    study: StudyRecord
    trial_index: int
    base: TrainConfig  # the best trial's configuration
    variants: list[Variant]
    seeds: list[int]
    resplit: bool

    def config(self, variant: Variant, seed: int, device: str = "auto", precision: str = "auto") -> TrainConfig:
        """The TrainConfig of one run; with `resplit` the split is drawn again with the seed."""
        data = replace(self.base.data, split_seed=seed) if self.resplit else self.base.data
        return replace(self.base, data=data, method=variant.method, params=variant.params, seed=seed, device=device,
                       precision=precision)


def study_and_trial(store: Store, name: str, trial: int | None = None) -> tuple[StudyRecord, TrialRecord]:
    """A stored study and its best completed trial (or trial `trial`); UserError naming what is missing."""
    study = store.require_study(name)
    trials = store.trials(study.id)
    if trial is None:
        chosen = best_trial(study, trials)
        if chosen is None:
            raise UserError(f"study {name} has no completed trial yet; run it first")
        return study, chosen
    chosen = next((t for t in trials if t.trial_index == trial), None)
    if chosen is None or chosen.status != "completed":
        done = ", ".join(str(t.trial_index) for t in trials if t.status == "completed") or "none"
        raise UserError(f"study {name} has no completed trial {trial}; completed: {done}")
    return study, chosen


def trial_config(study: StudyRecord, trial: TrialRecord) -> TrainConfig:
    """The full configuration a trial trained with: the study's data and network, its fixed parameters
    and the trial's proposed ones, every parameter resolved (defaults filled in), at the study's seed."""
    config = study.study
    method = parse_method(config.method)
    params = method.resolve({**config.fixed, **trial.parameters})
    return TrainConfig(data=config.data, backbone=config.backbone, weights=config.weights,
                       method=method.name, params=params, seed=config.seed)


def inherited(method_name: str, best: dict[str, Value], given: dict[str, str]) -> dict[str, Value]:
    """A baseline's parameters: each one it shares with the best configuration at the best value,
    `given` (from --param) over them, the rest at the method's defaults."""
    method = parse_method(method_name)
    taken = {p.name for p in method.params}
    return method.resolve({**{k: v for k, v in best.items() if k in taken},
                           **{k: v for k, v in given.items() if k in taken}})


def parse_vary(text: str, method_name: str) -> tuple[str, list[Value]]:
    """`NAME=V1,V2,...` -> the parameter and its values, each checked against the method's declaration."""
    name, sep, values = text.partition("=")
    name = name.strip()
    declared = {p.name: p for p in parse_method(method_name).params}
    if not sep or not values.strip():
        raise UserError(f"malformed --vary {text!r}: expected NAME=V1,V2,..., e.g. gamma=0.000999,0.001001")
    if name not in declared:
        raise UserError(f"--vary {name}: {method_name} takes no parameter {name}; known: {', '.join(declared)}")
    return name, [declared[name].coerce(v.strip()) for v in values.split(",") if v.strip()]


def plan_evaluation(store: Store, name: str, seeds: int = 5, against: list[str] = (),
                    vary: str | None = None, params: dict[str, str] | None = None,
                    resplit: bool = False) -> Plan:
    """Which runs an evaluate of study `name` needs; every bad option is a UserError before any work."""
    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    study, trial = study_and_trial(store, name)
    base = trial_config(study, trial)
    params = params or {}
    variants = [Variant(TUNED, base.method, base.params)]
    for method_name in dict.fromkeys(m.strip() for m in against if m.strip()):
        method = parse_method(method_name)
        variants.append(Variant(method.name, method.name, inherited(method.name, base.params, params)))
    unused = [k for k in params if not any(k in {p.name for p in parse_method(v.method).params}
                                           for v in variants[1:])]
    if unused:
        raise UserError(f"--param {unused[0]}: no --against method takes it")
    if vary:
        moved, values = parse_vary(vary, base.method)
        variants += [Variant(f"{moved}={v:g}" if isinstance(v, float) else f"{moved}={v}", base.method,
                             parse_method(base.method).resolve({**base.params, moved: v})) for v in values]
    return Plan(study, trial.trial_index, base, variants, list(range(seeds)), resplit)


def _planned(config: TrainConfig) -> dict[str, Any]:
    """A run's identity as stored: the configuration less seed, device and precision, as JSON gives it back."""
    return json.loads(json.dumps({k: v for k, v in config.to_dict().items()
                                  if k not in ("seed", "device", "precision")}))


@dataclass(frozen=True)
class EvaluationStarted:
    study: str
    trial_index: int
    runs: int  # variants x seeds
    stored: int  # of those already stored, which do not run again


@dataclass(frozen=True)
class RunStarted:
    variant: str
    seed: int
    number: int  # 1-based among the runs this call makes
    total: int
    epochs: int


@dataclass(frozen=True)
class RunEnded:
    variant: str
    seed: int
    number: int
    total: int
    test_accuracy: float
    seconds: float


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
                changed = sorted(k for k in planned if row.config.get(k) != planned[k])
                raise UserError(f"study {plan.study.name}: variant {variant.name} seed {seed} is stored from trial "
                                f"{row.trial_index} with other settings (differs in: "
                                f"{', '.join(changed) or 'the trial'}); nothing was changed, and stored runs are "
                                "never replaced: evaluate into another database with --db")
    return missing


def run_evaluation(store: Store, plan: Plan, device: str = "auto",
                   on_event: Callable[[Any], None] = lambda event: None, precision: str = "auto") -> int:
    """Train every missing run of `plan` and store each as it ends; returns how many ran.

    Holds the study's lock, so an evaluate and a `run` of the same study (or two evaluates) never
    write at once: each run is stored only while the lock is held, and a lost lock stops a run in training."""
    from pipeline.config import resolve_device
    from pipeline.models import check_weights
    from pipeline.faults import kill_point
    from pipeline.trial import dataset_for
    from pipeline.trainer import train

    with store.lock_study(plan.study) as lock:
        def progress(event: Any) -> None:
            lock.stop_if_lost()
            on_event(event)

        missing = missing_runs(store, plan)
        on_event(EvaluationStarted(plan.study.name, plan.trial_index, len(plan.variants) * len(plan.seeds),
                                   len(plan.variants) * len(plan.seeds) - len(missing)))
        resolved = str(resolve_device(device))
        for number, (variant, seed) in enumerate(missing, start=1):
            config = plan.config(variant, seed, device, precision)
            dataset = dataset_for(config.data, resolved)
            check_weights(config.backbone, config.weights, dataset.in_channels)
            on_event(RunStarted(variant.name, seed, number, len(missing), int(variant.params["epochs"])))
            start = time.perf_counter()
            result = train(config, dataset, progress).to_dict()
            counts = dict(zip(dataset.class_names, dataset.train.class_counts(dataset.num_classes)))
            lock.check()
            store.add_evaluation(plan.study.id, variant.name, seed, plan.trial_index, _planned(config), result, counts,
                                 lock=lock)
            kill_point(f"after-evaluation-{number}")
            on_event(RunEnded(variant.name, seed, number, len(missing), result["test_accuracy"],
                              time.perf_counter() - start))
    return len(missing)
