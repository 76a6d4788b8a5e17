"""Study files (TOML) -> a validated StudyConfig. Every error names the file, the field and the problem.

A study names a data set, a network, a method and a search space:

    name = "quickstart"
    objective = "val_accuracy"        # or val_/test_ balanced_accuracy, worst_class_accuracy
    # objectives = ["val_balanced_accuracy", "val_worst_class_accuracy"]   # instead: several, all maximised
    # constraints = ["val_worst_class_accuracy >= 0.3"]                    # a trial breaking one is never best
    seed = 0                          # the training seed of every trial
    search_seed = 0                   # Sobol and the Gaussian process (default: seed)
    threads = 1                       # torch's CPU threads of every trial (default: 1; then as stored)
    [data]    name = "digits" ...     # DataConfig fields; image_size: the backbone's default where not given
    [model]   backbone = "small_cnn"; weights = "none"
    [method]  name = "gils"
    [params]  alpha = { low = 0.0, high = 0.5 }     # searched (add log = true for a log scale)
              importance_sampling = { values = [false, true] }
              gamma = 1e-3                          # a bare value is fixed
    [search]  strategy = "gp"                       # or "sobol", "random" (the baselines; see STRATEGIES)
              epoch_prefixes = false                # true: a trial to E epochs also tells Ax each E' < E searched
              widen = true                          # a range whose soft end holds the best trial widens there
    [budget]  trials = 20; initial = 5; max_failures = 3
              seeds_per_trial = 1                   # training seeds per proposal: Ax is told their mean and SEM
              early_stopping = "off"                # or "median", "percentile" (pipeline/spec/epochs.py)
              early_stopping_percentile = 25.0; early_stopping_min_epochs = 2
              widen_trials = 0                      # trials added to the budget once a range has widened

A searched range may say `widen = false` (`lr_head = { low = 0.01, high = 0.2, log = true, widen = false }`):
it stays as written. The others widen where the parameter's declaration calls that end soft
(pipeline/search/bounds.py).

Parameters the file does not mention keep the method's default search range (the papers'
ranges) or, when they have none, their default value.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tomllib
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Set
from typing import Any, Callable, Iterator, Sequence, cast

from pipeline.config import BACKBONES, DEFAULT_THREADS, DataConfig, TrainConfig, check_threads, image_size_for
from pipeline.spec.epochs import EARLY_STOPPING
from pipeline.errors import FieldError, UserError, did_you_mean
from pipeline.methods import parse_method
from pipeline.methods.declarations import PARTS
from pipeline.params import EARLIER_PARAM_DEFAULTS, KIND_WORDS, Choice, HParam, Range, Value, training_defaults

OBJECTIVES = tuple(f"{split}_{metric}" for split in ("val", "test")
                   for metric in ("accuracy", "balanced_accuracy", "worst_class_accuracy"))


# StudyConfig fields that may change without making the study another one.
NOT_IDENTITY = ("budget", "description")
# Part of what a study is, but kept by its own rule (pipeline.search.study.settle_threads): stored when the study is
# created and refused if changed, while a study stored before it was recorded is no other study.
OWN_RULE = ("threads",)
# Fields added after studies were first stored get, in a study stored before them, the value that
# reproduces what it did (StudyConfig.from_dict, DataConfig.from_dict): search_seed was the seed, and an
# imbalance skewed validation too before data.imbalance_in, and it kept the rare class's first examples before
# data.rare_kept. Any other field did nothing before it existed at its default. migrations/versions/0002 writes
# the values of the fields it knew into stored studies.


# How a study proposes its trials (pipeline/search/ax.py builds each as an Ax generation strategy). A GP strategy is
# "gp" and its options joined with "-": the options each change one thing of "gp" (docs/design/search.md measures them).
GP_OPTIONS = {
    "rbf": "BoTorch's current default kernel: RBF with dimension-scaled log-normal lengthscale priors",
    "warp": "learned input warping (a Kumaraswamy CDF per input, BoTorch's Warp)",
    "power": "the results power-transformed (Yeo-Johnson, Ax's PowerTransformY) before the GP sees them",
    "centre": "the centre of the box as the first of the initial trials (as Ax's own default does)",
    "trust": "the acquisition optimised in a box of half each range around the best trial (a fixed trust region)",
    "margin": "the acquisition kept 5% of each range inside the bounds, except a bound the best trial has reached",
}
STRATEGIES = {
    "gp": "seeded Sobol for the first budget.initial trials, then a Gaussian process (ARD Matern-5/2) proposes",
    "gp-rbf": "gp with BoTorch's current default kernel and priors (RBF, dimension-scaled lengthscales)",
    "gp-warp": "gp with learned input warping",
    "gp-power": "gp on power-transformed results",
    "gp-centre": "gp with the centre of the box as the first trial",
    "gp-rbf-power-centre": "gp with BoTorch's default kernel, power-transformed results and the centre first",
    "gp-trust": "gp with the acquisition optimised in a box around the best trial (a trust region)",
    "gp-margin": "gp with the acquisition kept off the bounds the best trial has not reached",
    "sobol": "a seeded, scrambled Sobol sequence for every trial (no model)",
    "random": "configurations drawn uniformly (log-uniformly on a log scale), seeded (no model)",
}


# The strategy of a study whose file names none; what such a file meant in earlier versions (a study stored with
# one of those under the name keeps it: settle_strategy).
DEFAULT_STRATEGY = "gp"
EARLIER_DEFAULTS = ("gp",)


def gp_options(strategy: str) -> frozenset[str]:
    """The options of a GP strategy ("gp-rbf-warp": rbf and warp; "gp": none)."""
    name, *options = strategy.split("-")
    if name != "gp" or not set(options) <= set(GP_OPTIONS):
        raise ValueError(f"unknown search strategy {strategy!r}")
    return frozenset(options)


# Fields added after 0.3.0, at the value that reproduces what a study stored before them did: left out of the
# identity at that value, so a stored study's (and campaign's) fingerprint stays what it was.
ADDED_LATER = {"strategy": "gp", "seeds_per_trial": 1, "objectives": (), "constraints": (), "epoch_prefixes": False,
               "widen": False}
DATA_ADDED_LATER = {"path": None, "rare_kept": "first"}  # the same for DataConfig fields added after 0.5.0
MAX_SEEDS_PER_TRIAL = 100
# Which trial a study recommends for re-training (evaluate, a campaign's verdict): the best observed, or the one
# its Gaussian process predicts best (store.model_pick).
PICKS = ("observed", "model")
DEFAULT_PICK = "observed"
EARLIER_PICK = "observed"  # what a campaign stored before its pick was recorded re-trains (CampaignConfig.settle_pick)

_CONSTRAINT = re.compile(r"\s*([A-Za-z_]\w*)\s*(>=|<=)\s*(\S+)\s*")

MAX_TRIALS = 10_000  # per study; a larger number is a typo
TRIALS_BOUND_REASON = "each trial trains a network and the Gaussian process slows with every trial"


def check_trials(trials: int | None) -> None:
    """Refuse a `--trials` beyond MAX_TRIALS, with the reason, before anything is stored."""
    if trials is not None and not 1 <= trials <= MAX_TRIALS:
        raise UserError(f"--trials must be between 1 and {MAX_TRIALS}, got {trials} ({TRIALS_BOUND_REASON})")


@dataclass(frozen=True)
class Constraint:
    """One outcome constraint of a study: `metric op bound`, e.g. val_worst_class_accuracy >= 0.3."""

    metric: str
    op: str  # ">=" or "<="
    bound: float

    @property
    def text(self) -> str:
        """The constraint as stored and as Ax's Client reads it (one spelling per constraint)."""
        return f"{self.metric} {self.op} {self.bound!r}"

    def holds(self, metrics: dict[str, float]) -> bool:
        """Whether a trial's metrics keep this constraint (a trial without the metric does not)."""
        value = metrics.get(self.metric)
        if value is None:
            return False
        return value >= self.bound if self.op == ">=" else value <= self.bound


def parse_constraint(text: str) -> Constraint:
    """A constraint line `METRIC >= NUMBER` or `METRIC <= NUMBER`; ValueError with the problem otherwise."""
    match = _CONSTRAINT.fullmatch(text)
    if match is None:
        raise ValueError(f"expected 'METRIC >= NUMBER' or 'METRIC <= NUMBER', got {text!r}")
    metric, op, number = match.groups()
    if metric not in OBJECTIVES:
        raise ValueError(f"unknown metric {metric!r} in {text!r}; known: {', '.join(OBJECTIVES)}")
    try:
        bound = float(number)
    except ValueError:
        raise ValueError(f"the bound of {text!r} must be a number, got {number!r}") from None
    if not 0.0 <= bound <= 1.0:  # also refuses nan
        raise ValueError(f"the bound of {text!r} must be between 0 and 1 (accuracies are fractions), got {number}")
    return Constraint(metric, op, bound)


@dataclass(frozen=True)
class Budget:
    trials: int = 20
    initial: int = 5  # Sobol trials before the Gaussian process takes over
    max_failures: int = 3  # consecutive failed trials that stop the study
    # training seeds each proposal is trained on (the study's seed, seed + 1, ...); Ax is told their mean and its
    # standard error. Part of what the study is, unlike the rest of the budget.
    seeds_per_trial: int = 1
    # Stop a trial that is behind earlier trials at the same epoch (pipeline/spec/epochs.py: EARLY_STOPPING); a stopped
    # trial counts toward `trials` and keeps its curve. Not before `early_stopping_min_epochs` epochs.
    early_stopping: str = "off"
    early_stopping_percentile: float = 25.0  # "percentile": the share of trials, in percent, stopped at each epoch
    early_stopping_min_epochs: int = 2
    # Trials added to `trials` once the study has widened a range (pipeline/search/bounds.py): an allowance every
    # method of a campaign gets alike, used only by a study that widens.
    widen_trials: int = 0


@dataclass(frozen=True)
class StudyConfig:
    """A validated study: what to train and what to search."""

    name: str
    data: DataConfig
    backbone: str
    weights: str
    method: str
    fixed: dict[str, Value]  # every parameter not searched, at its value
    search: dict[str, Range | Choice]  # the searched parameters
    objective: str = "val_accuracy"
    seed: int = 0  # the training seed of every trial (initialisation, batch order)
    search_seed: int = 0  # the seed of Sobol and the Gaussian process; the study file's default is `seed`
    budget: Budget = field(default_factory=Budget)
    description: str = ""
    # torch's CPU threads of every trial: None until settled (the stored study's, or DEFAULT_THREADS for a new one)
    threads: int | None = None
    strategy: str = "gp"  # how trials are proposed (STRATEGIES)
    # Several objectives (two or more, all maximised; empty for one): Ax searches their Pareto front, and
    # `objective` is then the first of them, the one metric verdicts, sorting and "best" go by.
    objectives: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()  # Constraint.text of each: a trial that breaks one is never best
    # A trial to E epochs also tells Ax the exact result of every shorter searched epoch count
    # (pipeline/spec/epochs.py).
    epoch_prefixes: bool = False
    # Whether a searched range widens where the study's best trial sits on a soft end (pipeline/search/bounds.py);
    # a range the file fixed (Range.widen false) never does. A new study's default; one stored before keeps False.
    widen: bool = True
    # False: the study file left data.image_size to the backbone's default (image_size_for); a study stored under
    # the name then keeps its own size (settle_image_size). A stored study's size is always its own. How the file
    # was written, not what the study is: not stored, not compared.
    image_size_given: bool = field(default=True, compare=False)
    # False: the study file left [search] strategy to DEFAULT_STRATEGY; a study stored under the name with an earlier
    # default then keeps it (settle_strategy). Like image_size_given: not stored, not compared.
    strategy_given: bool = field(default=True, compare=False)
    # False: the study file left data.rare_kept to its default ("drawn"); a study stored under the name then keeps
    # its own (settle_rare_kept). Like image_size_given: not stored, not compared.
    rare_kept_given: bool = field(default=True, compare=False)
    # False: the study file left [search] widen to its default; a study stored under the name then keeps its own
    # (settle_widen: one stored before widening existed does not widen). Not stored, not compared.
    widen_given: bool = field(default=True, compare=False)
    # [tracking] mlflow: an MLflow tracking URI the study's runs are logged to as they end. Where a copy goes, not
    # what the study is: not stored, not compared.
    mlflow: str | None = field(default=None, compare=False)
    # The parameters whose default has changed since studies were first stored (params.EARLIER_PARAM_DEFAULTS) that the
    # study file left to their default; a study stored under the name then keeps its own value (settle_defaults).
    # Like image_size_given: not stored, not compared.
    defaulted: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def multi_objective(self) -> bool:
        """Whether Ax searches a Pareto front of several objectives rather than one objective's best."""
        return len(self.objectives) >= 2

    @property
    def all_objectives(self) -> tuple[str, ...]:
        """Every objective, the first being `objective`: one for a single-objective study."""
        return self.objectives or (self.objective,)

    @property
    def constraint_rules(self) -> tuple[Constraint, ...]:
        """The constraints, parsed (they were checked when the study file was read)."""
        return tuple(parse_constraint(text) for text in self.constraints)

    @property
    def told_metrics(self) -> tuple[str, ...]:
        """The metrics Ax is told of each trial: every objective, then every constrained metric."""
        return tuple(dict.fromkeys(self.all_objectives + tuple(c.metric for c in self.constraint_rules)))

    @property
    def selected_on_test(self) -> bool:
        """True when trials are ranked (or constrained) on test data (the papers' protocol), which reports must
        say."""
        return any(metric.startswith("test_") for metric in self.told_metrics)

    def train_config(self, parameters: dict[str, Value], seed: int, device: str = "auto",
                     precision: str = "auto") -> TrainConfig:
        """The TrainConfig of one trial: the fixed values plus the proposed ones, at the study's thread count."""
        return TrainConfig(data=self.data, backbone=self.backbone, weights=self.weights, method=self.method,
                           params={**self.fixed, **parameters}, seed=seed, device=device, precision=precision,
                           threads=self.threads or DEFAULT_THREADS)

    def to_dict(self) -> dict[str, Any]:
        """The study as stored: every field but image_size_given, strategy_given, rare_kept_given and widen_given,
        which say how its file was written, and mlflow, where copies of its runs go."""
        stored = dataclasses.asdict(self)
        del stored["image_size_given"], stored["strategy_given"], stored["rare_kept_given"], stored["widen_given"]
        del stored["mlflow"], stored["defaulted"]
        for space in stored["search"].values():  # a range says widen only where the file fixed it
            if space.get("widen") is True:
                del space["widen"]
        return stored

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> StudyConfig:
        """The inverse of `to_dict`, for a study stored by any version: a field the stored JSON lacks (it
        was added later) gets the value that reproduces what that version did."""
        seed = raw.get("seed", 0)
        return cls(name=raw["name"], data=DataConfig.from_dict(raw.get("data") or {}),
                   backbone=raw.get("backbone", "small_cnn"), weights=raw.get("weights", "none"),
                   method=raw["method"], fixed=_with_new_params(raw["method"], raw.get("fixed") or {},
                                                                raw.get("search") or {}),
                   search={k: _space(v) for k, v in (raw.get("search") or {}).items()},
                   objective=raw.get("objective", "val_accuracy"), seed=seed,
                   search_seed=raw.get("search_seed", seed),  # before search_seed, Ax was seeded with `seed`
                   budget=Budget(**{f.name: raw.get("budget", {}).get(f.name, f.default)
                                    for f in dataclasses.fields(Budget)}),
                   description=raw.get("description", ""), threads=raw.get("threads"),
                   strategy=raw.get("strategy", "gp"), objectives=tuple(raw.get("objectives") or ()),
                   constraints=tuple(raw.get("constraints") or ()), epoch_prefixes=raw.get("epoch_prefixes", False),
                   widen=raw.get("widen", ADDED_LATER["widen"]))

    def settle_image_size(self, stored_size: int | None) -> StudyConfig:
        """The study at the image size its trials train with: the file's, else the size the study stored under its
        name has (`stored_size`: one stored before the per-backbone default trains at 224 px, as it did, and stays
        the same study), else (None: not stored) the backbone's default the file was read with."""
        if self.image_size_given or stored_size is None or stored_size == self.data.image_size:
            return self
        try:
            data = dataclasses.replace(self.data, image_size=stored_size)
        except UserError as error:  # e.g. a crop padding the stored size cannot take
            raise UserError(f"study {self.name} is stored with data.image_size = {stored_size}: {error}; set "
                            "data.image_size in the study file, or give the study another name") from None
        return dataclasses.replace(self, data=data)

    def settle_strategy(self, stored_strategy: str | None) -> StudyConfig:
        """The study with the strategy it searches with: the file's, else that of the study stored under its name
        where that was the default then (`stored_strategy` in EARLIER_DEFAULTS: a study stored before
        DEFAULT_STRATEGY changed keeps the one it was searched with), else DEFAULT_STRATEGY (a study stored with
        another strategy is then another study, refused as before)."""
        if self.strategy_given or stored_strategy not in EARLIER_DEFAULTS:
            return self
        return dataclasses.replace(self, strategy=stored_strategy)

    def settle_rare_kept(self, stored: str | None) -> StudyConfig:
        """The study with the rare-class examples its trials keep: the file's data.rare_kept, else that of the study
        stored under its name (`stored`: one stored before the choice existed keeps the first ones, as it trained),
        else (None: not stored) the default, drawn with the split seed."""
        if self.rare_kept_given or stored is None or stored == self.data.rare_kept:
            return self
        return dataclasses.replace(self, data=dataclasses.replace(self.data, rare_kept=stored))

    def settle_widen(self, stored: bool | None) -> StudyConfig:
        """The study with whether its ranges widen: the file's [search] widen, else that of the study stored under its
        name (`stored`: one stored before widening existed keeps searching the ranges it was stored with), else
        (None: not stored) on."""
        if self.widen_given or stored is None or stored == self.widen:
            return self
        return dataclasses.replace(self, widen=stored)

    def settle_defaults(self, stored_fixed: dict[str, Any] | None) -> StudyConfig:
        """The study with each parameter its file left to a default that has changed (`defaulted`) at the value the
        study stored under its name fixed (`stored_fixed`), where that was an earlier default (EARLIER_PARAM_DEFAULTS: a
        study stored before a default changed keeps training as it did); else (None: not stored) today's default."""
        kept = {name: stored_fixed[name] for name in self.defaulted
                if stored_fixed is not None and stored_fixed.get(name) in EARLIER_PARAM_DEFAULTS[name]}
        if all(self.fixed.get(name) == value for name, value in kept.items()):
            return self
        return dataclasses.replace(self, fixed={**self.fixed, **kept})

    def identity(self) -> dict[str, Any]:
        """What the study is, as JSON: every field but those that may change without making it another
        study (NOT_IDENTITY: the budget may grow, the description be reworded) and those with a rule of their
        own (OWN_RULE: the thread count)."""
        identity = {k: v for k, v in self.to_dict().items() if k not in NOT_IDENTITY + OWN_RULE}
        identity["seeds_per_trial"] = self.budget.seeds_per_trial
        for key, before in ADDED_LATER.items():
            if identity[key] == before:
                del identity[key]
        for key, before in DATA_ADDED_LATER.items():
            if identity["data"][key] == before:
                del identity["data"][key]
        return json.loads(json.dumps(identity, default=str))

    def fingerprint(self) -> str:
        """A short hash of `identity`, stored beside the study."""
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: StudyConfig) -> list[str]:
        """Dotted paths (e.g. fixed.epochs) where `other` is another experiment than this study; empty
        when it is the same one. A study stored by an earlier version is read with `from_dict`, so a
        field added since, at the value that reproduces the old behaviour, is no difference."""
        return _differences(other.identity(), self.identity())


def _space(raw: dict[str, Any]) -> Range | Choice:
    """A stored search space: {"values": [...]} or {"low", "high", "log"}."""
    if "values" in raw:
        return Choice(tuple(raw["values"]))
    return Range(raw["low"], raw["high"], raw.get("log", False), raw.get("widen", True))


def _with_new_params(method_name: str, fixed: dict[str, Value], search: dict[str, Any]) -> dict[str, Value]:
    """`fixed` with each parameter the method took on after the study was stored, at its default (what
    the method did before it existed); a method this version no longer knows keeps what was stored."""
    try:
        params = parse_method(method_name).params
    except UserError:
        return dict(fixed)
    return {**{p.name: p.default for p in params if p.name not in fixed and p.name not in search}, **fixed}


def _differences(new: Any, old: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON-like values differ."""
    if isinstance(new, dict) and isinstance(old, dict):
        return [d for key in sorted(set(new) | set(old))
                for d in _differences(new.get(key), old.get(key), f"{path}.{key}" if path else key)]
    return [] if new == old else [path]


class _Fields:
    """Reads one TOML table, naming `file: section.key` in every error."""

    def __init__(self, source: str, section: str, table: Any) -> None:
        self.source, self.section = source, section
        if not isinstance(table, dict):
            self.fail(section, "must be a table")
        self.table = dict(table)
        self.known: list[str] = []  # the fields asked for, for a "did you mean" on one left over

    def where(self, key: str) -> str:
        return f"{self.section}.{key}" if self.section else key

    def fail(self, key: str, problem: str) -> typing.NoReturn:
        raise FieldError(self.source, key, problem)

    def take(self, key: str, kind: type | tuple[type, ...], default: Any = ..., required: bool = False) -> Any:
        self.known.append(key)
        if key not in self.table:
            if required:
                self.fail(self.where(key), "is required")
            return default
        value = self.table.pop(key)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            words = "a number" if kinds == (float, int) else " or ".join(_TYPE_WORDS[k] for k in kinds)
            self.fail(self.where(key), f"must be {words}, "
                                       f"got {type(value).__name__} {value!r}")
        return float(cast(float | int, value)) if kinds == (float, int) else value  # checked just above

    def done(self) -> None:
        if self.table:
            key = sorted(self.table)[0]
            self.fail(self.where(key), "unknown field" + did_you_mean(key, self.known))


_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table",
               list: "a list"}


def _data_config(fields: _Fields) -> DataConfig:
    """Each DataConfig field, type-checked from its annotation."""
    hints = typing.get_type_hints(DataConfig)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(DataConfig):
        kinds = tuple(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
        if kinds == (float,):
            kinds = (float, int)
        if kinds == (str,) and f.default is None:
            kinds = (str, int)  # a class may be named by its label, e.g. imbalance_class = 3
        value = fields.take(f.name, kinds, f.default)
        values[f.name] = str(value) if kinds == (str, int) and value is not None else value
    fields.done()
    try:
        return DataConfig(**values)
    except UserError as error:
        fields.fail(fields.section, str(error))


def data_with(data: DataConfig, assignments: list[str], option: str = "--set") -> DataConfig:
    """`data` with `data.FIELD=VALUE` assignments (values read as TOML, as `run --set` reads them), each field
    checked as a study file's [data] is; any problem is a one-line UserError naming `option`."""
    keys = [text.partition("=")[0].strip() for text in assignments]
    if wrong := [key for key in keys if not key.startswith("data.") or key.count(".") != 1]:
        raise UserError(f"{option} {wrong[0]}: takes data.FIELD=VALUE, a field of the data set (e.g. "
                        "data.channels=1); a method's parameter goes in --param")
    given = {key: value for key, value in dataclasses.asdict(data).items() if value is not None}
    raw = apply_overrides({"data": given}, list(assignments))
    with naming_overrides(list(assignments), option):
        return _data_config(_Fields(option, "data", raw["data"]))


def _reads_as(hparam: HParam, text: str) -> bool:
    """Whether `text` written without quotes is a valid value of `hparam` in TOML: "3" quoted by mistake, where
    dropping the quotes is the fix (and not "three", which no quotes make a number)."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
        hparam.coerce(value)
    except (tomllib.TOMLDecodeError, UserError):
        return False
    return not isinstance(value, str)


def _search_entry(fields: _Fields, hparam: HParam, spec: Any) -> Range | Choice | Value:
    where = fields.where(hparam.name)

    def coerce(raw: Any, what: str) -> Value:
        if isinstance(raw, str) and hparam.kind in ("float", "int", "bool") and _reads_as(hparam, raw):
            fields.fail(where, f"{what}: parameter {hparam.name} must be {KIND_WORDS[hparam.kind]}, got the text "
                               f"{raw!r}; write it without quotes")
        try:
            return hparam.coerce(raw)
        except UserError as error:
            fields.fail(where, f"{what}: {error}")

    if not isinstance(spec, dict):
        return coerce(spec, "value")
    keys = set(spec)
    if keys == {"values"}:
        if not isinstance(spec["values"], list):
            fields.fail(where, "values must be a list of at least two different choices")
        values = tuple(dict.fromkeys(coerce(v, "value") for v in spec["values"]))
        if len(values) < 2:
            fields.fail(where, "values must be a list of at least two different choices")
        return Choice(values)
    if keys <= {"low", "high", "log", "widen"} and {"low", "high"} <= keys:
        if hparam.kind not in ("float", "int"):
            fields.fail(where, f"a {hparam.kind} parameter is searched with values = [...], not a range")
        log = spec.get("log", False)
        if not isinstance(log, bool):
            fields.fail(where, "log must be true or false")
        widen = spec.get("widen", True)
        if not isinstance(widen, bool):
            fields.fail(where, "widen must be true or false")
        if log and isinstance(spec["low"], (int, float)) and spec["low"] <= 0:
            fields.fail(where, f"a log-scale range must start above 0, got low {spec['low']}")
        low, high = coerce(spec["low"], "low"), coerce(spec["high"], "high")
        assert isinstance(low, (int, float)) and isinstance(high, (int, float))  # coerced for a float or int parameter
        if not low < high:
            fields.fail(where, f"low {low} must be below high {high}")
        return Range(low, high, log, widen)
    fields.fail(where, "expected a value, {low = .., high = .. [, log = true, widen = false]} or {values = [..]}, "
                       f"got keys {', '.join(sorted(keys)) or 'none'}")


def parse_study(raw: dict[str, Any], source: str, searching: bool = True) -> StudyConfig:
    """Validate a parsed TOML document; `source` names the file in errors. With `searching` off the file is
    one configuration to train (as `best` writes it): every parameter must be fixed."""
    top = _Fields(source, "", raw)
    name = top.take("name", str, required=True)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", name):
        top.fail("name", f"must be letters, digits, '_', '-' or '.', got {name!r}")
    description = top.take("description", str, "")
    seed = top.take("seed", int, 0)
    search_seed = top.take("search_seed", int, seed)
    threads = top.take("threads", int, None)
    if threads is not None:
        try:
            check_threads(threads)
        except UserError as error:
            top.fail("threads", str(error).removeprefix("threads "))
    objective, objectives = _objectives(top)
    constraints = _constraints(top, objectives or (objective,))

    data_table = top.take("data", dict, {})
    data = _data_config(_Fields(source, "data", data_table))
    ranked = [("objectives" if objectives else "objective", m) for m in objectives or (objective,)]
    for key, metric in ranked + [("constraints", c.metric) for c in constraints]:
        if data.val_fraction == 0 and metric.startswith("val_"):
            top.fail(key, f"{metric} needs a validation split but data.val_fraction = 0; rank on a test_ "
                          "objective (the papers' protocol, reported as optimistic) or keep a validation split")
    model = _Fields(source, "model", top.take("model", dict, {}))
    backbone = model.take("backbone", str, "small_cnn")
    if backbone not in BACKBONES:
        model.fail("model.backbone", f"unknown backbone {backbone!r}{did_you_mean(backbone, BACKBONES)}; known: "
                                     f"{', '.join(BACKBONES)}")
    weights = model.take("weights", str, "none")
    model.done()
    image_size_given = "image_size" in data_table
    rare_kept_given = "rare_kept" in data_table
    if not image_size_given:
        try:
            data = dataclasses.replace(data, image_size=image_size_for(data.name, backbone))
        except UserError as error:
            top.fail("data", str(error))

    method_fields = _Fields(source, "method", top.take("method", dict, required=True))
    method_name = method_fields.take("name", str, required=True)
    method_fields.done()
    try:
        method = parse_method(method_name)
    except UserError as error:
        method_fields.fail("method.name", str(error))

    params = _Fields(source, "params", top.take("params", dict, {}))
    declared = method.declared
    for key in params.table:
        if key not in declared:
            params.fail(f"params.{key}", f"unknown parameter for method {method.name}{did_you_mean(key, declared)}; "
                                         f"known: {', '.join(declared)}")
    fixed: dict[str, Value] = {}
    search: dict[str, Range | Choice] = {}
    defaults = {p.name: p.default for p in method.params} | training_defaults(weights)
    defaulted = frozenset(name for name in EARLIER_PARAM_DEFAULTS if name in declared and name not in params.table)
    for hparam in method.params:
        entry = (_search_entry(params, hparam, params.table.pop(hparam.name)) if hparam.name in params.table
                 else hparam.search if hparam.search is not None else defaults[hparam.name])
        if isinstance(entry, (Range, Choice)):
            search[hparam.name] = entry
        else:
            fixed[hparam.name] = entry
    if search and not searching:
        first = next(iter(search))
        params.fail(f"params.{first}", f"is searched, but training one configuration needs one value: fix it "
                                       f"(e.g. {first} = {_value_example(declared[first])}) or give --param "
                                       f"{first}=VALUE")
    if not search and searching:
        params.fail("params", "nothing to search: every parameter is fixed; search one, "
                              "e.g. epochs = { low = 21, high = 60 }; to train this one configuration: "
                              "robust-tune train --study-file FILE")

    search_fields = _Fields(source, "search", top.take("search", dict, {}))
    strategy_given = "strategy" in search_fields.table
    strategy = search_fields.take("strategy", str, DEFAULT_STRATEGY)
    if strategy not in STRATEGIES:
        search_fields.fail("search.strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    epoch_prefixes = search_fields.take("epoch_prefixes", bool, False)
    widen_given = "widen" in search_fields.table
    widen = search_fields.take("widen", bool, True)
    search_fields.done()

    tracking = _Fields(source, "tracking", top.take("tracking", dict, {}))
    mlflow = tracking.take("mlflow", str, None)
    tracking.done()

    budget_fields = _Fields(source, "budget", top.take("budget", dict, {}))
    budget = Budget(**{f.name: budget_fields.take(f.name, _BUDGET_TYPES[cast(str, f.type)], f.default)
                       for f in dataclasses.fields(Budget)})
    budget_fields.done()
    for key in ("trials", "initial", "max_failures"):
        if not 1 <= getattr(budget, key) <= MAX_TRIALS:
            budget_fields.fail(f"budget.{key}", f"must be between 1 and {MAX_TRIALS}, got {getattr(budget, key)} "
                                                f"({TRIALS_BOUND_REASON})")
    if not 0 <= budget.widen_trials <= MAX_TRIALS:
        budget_fields.fail("budget.widen_trials", f"must be between 0 and {MAX_TRIALS}, got {budget.widen_trials}")
    if not 1 <= budget.seeds_per_trial <= MAX_SEEDS_PER_TRIAL:
        budget_fields.fail("budget.seeds_per_trial", f"must be between 1 and {MAX_SEEDS_PER_TRIAL}, got "
                                                     f"{budget.seeds_per_trial} (each seed trains the network again)")
    if epoch_prefixes and searching and (refusal := epoch_prefixes_refusal(method.parts, search,
                                                                            budget.seeds_per_trial)):
        search_fields.fail("search.epoch_prefixes", refusal)
    _check_early_stopping(budget_fields, budget)
    top.done()
    return StudyConfig(name=name, data=data, backbone=backbone, weights=weights, method=method.name,
                       fixed=fixed, search=search, objective=objective, seed=seed,
                       search_seed=search_seed, budget=budget,
                       description=description, threads=threads, strategy=strategy, objectives=objectives,
                       constraints=tuple(c.text for c in constraints), epoch_prefixes=epoch_prefixes, widen=widen,
                       image_size_given=image_size_given, strategy_given=strategy_given,
                       rare_kept_given=rare_kept_given, widen_given=widen_given, mlflow=mlflow, defaulted=defaulted)


# By Budget's annotations, strings here (from __future__ import annotations).
_BUDGET_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "str": str, "float": (float, int)}


def epoch_prefixes_refusal(parts: tuple[str, ...], search: dict[str, Range | Choice],
                           seeds_per_trial: int) -> str | None:
    """Why a study cannot tell Ax its trials' epoch prefixes; None when it can: `epochs` is searched over a range,
    each trial trains one seed, and no part of the method depends on the run's total epoch count."""
    if not isinstance(search.get("epochs"), Range):
        return "needs epochs searched over a range, e.g. [params] epochs = { low = 21, high = 60 }"
    if seeds_per_trial > 1:
        return (f"a trial trained on {seeds_per_trial} seeds (budget.seeds_per_trial) keeps one seed's epochs; set "
                "seeds_per_trial = 1 to use epoch prefixes")
    if dependent := [part for part in parts if PARTS[part].uses_total_epochs]:
        return (f"part {dependent[0]} depends on the run's total epoch count, so a longer run does not pass "
                "through a shorter one's result")
    return None


def _check_early_stopping(fields: _Fields, budget: Budget) -> None:
    """budget.early_stopping and its settings, each in its range; a trial on several seeds reports no per-epoch
    objective to stop on."""
    if budget.early_stopping not in EARLY_STOPPING:
        fields.fail("budget.early_stopping",
                    f"must be one of {', '.join(EARLY_STOPPING)}, got {budget.early_stopping!r}")
    if not 0 < budget.early_stopping_percentile < 100:
        fields.fail("budget.early_stopping_percentile",
                    f"must be between 0 and 100 (percent of trials), got {budget.early_stopping_percentile:g}")
    if budget.early_stopping_min_epochs < 1:
        fields.fail("budget.early_stopping_min_epochs", f"must be 1 or more, got {budget.early_stopping_min_epochs}")
    if budget.early_stopping != "off" and budget.seeds_per_trial > 1:
        fields.fail("budget.early_stopping", f"a trial trained on {budget.seeds_per_trial} seeds "
                    "(budget.seeds_per_trial) reports no per-epoch value of its objective to stop on; set "
                    "seeds_per_trial = 1 or early_stopping = \"off\"")


def _objectives(top: _Fields) -> tuple[str, tuple[str, ...]]:
    """The study file's `objective` or `objectives` (one of them): (the first objective, all of them when
    several, else ())."""
    if "objective" in top.table and "objectives" in top.table:
        top.fail("objectives", "give objective (one metric) or objectives (several), not both")
    objectives = top.take("objectives", list, None)
    if objectives is None:
        objective = top.take("objective", str, "val_accuracy")
        if objective not in OBJECTIVES:
            top.fail("objective", f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        return objective, ()
    for name in objectives:
        if name not in OBJECTIVES:
            top.fail("objectives", f"each must be one of {', '.join(OBJECTIVES)}, got {name!r}")
    if len(set(objectives)) != len(objectives):
        repeated = next(name for k, name in enumerate(objectives) if name in objectives[:k])
        top.fail("objectives", f"{repeated} is listed twice; list each objective once")
    if len(objectives) < 2:
        top.fail("objectives", "needs at least two metrics; for one, write objective = \"...\"")
    return objectives[0], tuple(objectives)


def _constraints(top: _Fields, objectives: tuple[str, ...]) -> list[Constraint]:
    """The study file's `constraints`, each checked as Ax will need it: not on a single objective itself, only
    `>=` on one of several objectives (all are maximised), one bound of each kind per metric, a lower bound
    below the upper one."""
    lines = top.take("constraints", list, [])
    constraints = []
    for line in lines:
        if not isinstance(line, str):
            top.fail("constraints", f"each must be a string like \"val_worst_class_accuracy >= 0.3\", got {line!r}")
        try:
            constraints.append(parse_constraint(line))
        except ValueError as error:
            top.fail("constraints", str(error))
    for c in constraints:
        if c.metric in objectives and len(objectives) == 1:
            top.fail("constraints", f"{c.text!r} constrains the objective itself; constrain another metric, or make "
                                    "both objectives (objectives = [...])")
        if c.metric in objectives and c.op == "<=":
            top.fail("constraints", f"{c.text!r} bounds an objective from above, but every objective is "
                                    "maximised; use >=")
    by_kind = {}
    for c in constraints:
        if (c.metric, c.op) in by_kind:
            top.fail("constraints", f"{c.metric} is constrained twice with {c.op}; keep one")
        by_kind[c.metric, c.op] = c.bound
    for (metric, op), bound in by_kind.items():
        upper = by_kind.get((metric, "<="))
        if op == ">=" and upper is not None and bound >= upper:
            top.fail("constraints", f"{metric} >= {bound:g} and {metric} <= {upper:g} leave no value possible")
    return constraints


def apply_overrides(raw: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """`--set section.key=value` on a parsed study (values read as TOML: 3, 0.5, true, "text")."""
    raw = json.loads(json.dumps(raw))
    for text in assignments:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UserError(f"malformed --set {text!r}: expected key=value, for example budget.trials=5")
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            parsed = value.strip()
        *sections, last = key.strip().split(".")
        table = raw
        for section in sections:
            table = table.setdefault(section, {})
            if not isinstance(table, dict):
                raise UserError(f"--set {text!r}: {section} is not a table")
        table[last] = parsed
    return raw


@contextmanager
def naming_overrides(overrides: list[str], option: str = "--set", prefix: str = "") -> Iterator[None]:
    """Inside the block, an error about a field that one of `overrides` (key=value, as --set gives them) set names
    that option and key (`--set budget.trials: ...`), not the file: the mistake is on the command line. `prefix`
    is what the option leaves out of the key (--param NAME sets params.NAME)."""
    keys = [prefix + text.partition("=")[0].strip() for text in overrides]
    try:
        yield
    except FieldError as error:
        if any(error.key == key or error.key.startswith(key + ".") for key in keys):
            raise UserError(f"{option} {error.key.removeprefix(prefix)}: {error.problem}") from None
        raise


def drop_params_the_method_lacks(raw: dict[str, Any], keep: Set[str] = frozenset()) -> list[str]:
    """Remove from `raw`'s [params] what its method does not take (except names in `keep`); returns
    the names removed. For a study whose method was switched: a GI-LS study run as ERM drops alpha."""
    method, params = raw.get("method"), raw.get("params")
    if not isinstance(method, dict) or not isinstance(params, dict):
        return []
    try:
        declared = {p.name for p in parse_method(str(method.get("name"))).params}
    except UserError:
        return []  # parse_study names the unknown method
    dropped = [key for key in params if key not in declared and key not in keep]
    for key in dropped:
        del params[key]
    return dropped


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A study or campaign file (`what`) parsed as TOML; a missing, undecodable or malformed file is a
    one-line UserError naming it."""
    if not path.is_file():
        raise UserError(f"{what} file not found: {path}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file") from None


def _value_example(hparam: HParam) -> str:
    """A value of `hparam` as a study file writes it, for an error's example."""
    value = hparam.default
    return (json.dumps(value) if isinstance(value, (str, bool))
            else f"{value:g}" if isinstance(value, float) else str(value))


def load_configuration(path: str | Path, params: Sequence[str] = ()) -> StudyConfig:
    """Read a study file that fixes every parameter (one configuration to train, as `best` writes it), with
    `params` (NAME=VALUE, from --param) over its [params]; any problem is a one-line UserError."""
    path = Path(path)
    raw = apply_overrides(read_toml(path, "study"), [f"params.{text}" for text in params])
    with naming_overrides(list(params), "--param", "params."):
        return parse_study(raw, str(path), searching=False)


def load_study(path: str | Path, overrides: Sequence[str] = (),
               on_note: Callable[[str], None] = lambda note: None) -> StudyConfig:
    """Read and validate a study file; any problem is a one-line UserError.

    `--set method.name=NAME` switches the method: the study's parameters NAME does not take are
    dropped, with a note; a parameter the file names for its own method, or sets with --set params.X,
    must still be one the method takes (a typo is refused, not dropped)."""
    path = Path(path)
    raw = apply_overrides(read_toml(path, "study"), list(overrides))
    keys = [text.partition("=")[0].strip() for text in overrides]
    dropped = []
    if "method.name" in keys:  # the method was switched: what it does not take is dropped, not refused
        dropped = drop_params_the_method_lacks(raw, {key.removeprefix("params.") for key in keys})
    with naming_overrides(list(overrides)):
        study = parse_study(raw, str(path))
    if dropped:
        on_note(f"{study.method} does not take {', '.join(dropped)}; dropped")
    return study
