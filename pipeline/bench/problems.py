"""The problems `robust-tune bench search` gives every search strategy: functions of the papers' search
spaces whose true (noise-free) value is known, observed with the noise real trials have.

- `gils-synthetic`, `hws-synthetic`: smooth functions laid into GI-LS's space (alpha, integer T, eta,
  integer epochs) and hardness-weighted sampling's (log beta, importance sampling on/off), shaped like
  accuracies (a narrow best region, a broad second one; hws collapses at large beta), observed with
  Gaussian noise of the seed-to-seed standard deviation measured in the replay table.
- `digits-hws-replay`: the tool's own problem, replayed from real trials (pipeline/bench/replay/digits-hws.csv,
  made by tools/replay_trials.py): the true value at any point is a Gaussian process fitted to the
  configurations' mean over training seeds, and an observation adds the deviation of one of the nearest
  tried configuration's seeds from its mean (a failed run there fails the trial).
- `digits-erm-replay`, `digits-erm-cut-replay`: ERM's two learning rates on the same digits, replayed the
  same way from pipeline/bench/replay/digits-erm.csv (tried over [0.003, 1] on each): over that box, and over the
  campaign's own range [0.01, 0.2], which cuts the best off (the best there lies in the corner of the upper
  bounds). ERM's best on these digits lies at learning rates of 1 and beyond (the network trains as well at
  8), so over [0.003, 1] it lies on the head's upper bound and inside the backbone's range. The problems
  whose best lies inside the box are hws's: a strategy that wins by proposing on the bounds wins the cut
  box and loses those.
- `digits-erm-outside-replay`: the same truth (over the table's box, and at its nearest point of the box beyond it:
  the network trains as well at a head rate of 2 to 8), searched over the campaign's range [0.01, 0.2], and judged
  against the best anywhere: the best lies outside the declared box, so it rewards a search that widens its range.
- `cliff-synthetic`: both learning rates (log, [0.001, 1]) and hws's beta; the value rises with the head's rate
  toward a cliff (where it lies depends on the backbone's rate), past which training diverges (the trial fails);
  the best lies inside the box, just before the cliff.
- `digits-hws-curves-replay`: the hws study without importance sampling (beta and both learning rates: three
  dimensions), replayed as the others from the per-epoch table pipeline/bench/replay/digits-hws-curves.csv (made by
  tools/replay_curves.py for `bench prefixes`) at its full 20 epochs. No search strategy or option was chosen on it,
  so it is the held-out problem; and it has epochs: `observe_half` observes a run trained to half of them (the same
  run's model at epoch 10: the schedule does not depend on the total), at half a training's cost.

A split term (`SplitTerm`) models the base split a search runs on: each search draws a smooth random function of
the configuration, added to all its observations, the same for all its trials, so one search sees one split's view of
the landscape while the truth is the value over splits. Its size is measured on real runs
(pipeline/bench/replay/digits-hws-splits.csv, `split_sd`).

Each problem declares its parameters as the methods do (pipeline/params.py: which ends of a range are soft), so
the benchmark can widen a range as a study does (pipeline/bench/search.py, `+widen`).

Values are balanced validation accuracies (the digits studies' objective), higher is better.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from pipeline.params import Choice, HParam, Range

REPLAY_TABLE = Path(__file__).resolve().parent / "replay" / "digits-hws.csv"
ERM_REPLAY_TABLE = REPLAY_TABLE.with_name("digits-erm.csv")
CURVES_TABLE = REPLAY_TABLE.with_name("digits-hws-curves.csv")
SPLITS_TABLE = REPLAY_TABLE.with_name("digits-hws-splits.csv")
CHANCE = 0.1  # balanced accuracy of a uniform guess over the ten digits: what a failed run is worth
COLLAPSED = 0.3  # a completed run this far below the median of its table's runs collapsed (split_sd)


@dataclass(frozen=True)
class Problem:
    """A search space (as a study file writes it, with each parameter's kind), the true value of a
    configuration, and a noisy observation of it (None: the trial failed, as a diverged run does)."""

    name: str
    description: str
    search: dict[str, Range | Choice]
    kinds: dict[str, str]
    truth: Callable[[dict[str, Any]], float]
    observe: Callable[[dict[str, Any], np.random.Generator], float | None]
    best: float  # the largest true value (over a dense sample of the space, or of the truth's own box)
    # The parameters as the methods declare them (which ends of a range are soft, how far they may widen)
    declared: Mapping[str, HParam] = field(default_factory=dict)
    # An observation of a run trained to half the epochs, at half a training's cost; None: the problem has no epochs
    observe_half: Callable[[dict[str, Any], np.random.Generator], float | None] | None = None

    def unit(self, parameters: dict[str, Any], search: Mapping[str, Range | Choice] | None = None) -> np.ndarray:
        """A configuration as a point of the unit cube of `search` (default: the problem's; log-scaled ranges on
        their log, booleans 0/1)."""
        return np.array([_to_unit(space, parameters[name]) for name, space in (search or self.search).items()])

    def on_edge(self, parameters: dict[str, Any], tolerance: float = 0.01,
                search: Mapping[str, Range | Choice] | None = None) -> bool:
        """Whether a range parameter lies within `tolerance` (of its range) of a bound of `search` (default: the
        problem's box; a widened one when the search widened it)."""
        search = search or self.search
        return any(min(u, 1 - u) <= tolerance for (name, space), u in zip(search.items(), self.unit(parameters, search))
                   if isinstance(space, Range))


def declared(method: str) -> dict[str, HParam]:
    """The parameters `method` declares (with the shared trainer's learning rates), by name."""
    from pipeline.methods import parse_method

    return parse_method(method).declared


def _to_unit(space: Range | Choice, value: Any) -> float:
    if isinstance(space, Choice):
        return float(space.values.index(value)) / max(len(space.values) - 1, 1)
    if space.log:
        return (math.log(value) - math.log(space.low)) / (math.log(space.high) - math.log(space.low))
    return (float(value) - space.low) / (space.high - space.low)


def _from_unit(space: Range | Choice, kind: str, u: float) -> Any:
    if isinstance(space, Choice):
        return space.values[min(int(u * len(space.values)), len(space.values) - 1)]
    value = space.low * (space.high / space.low) ** u if space.log else space.low + u * (space.high - space.low)
    return int(round(value)) if kind == "int" else float(value)


def sample(search: dict[str, Range | Choice], kinds: dict[str, str], count: int,
           rng: np.random.Generator) -> list[dict[str, Any]]:
    """`count` configurations drawn uniformly (log-uniformly on a log scale)."""
    return [{name: _from_unit(space, kinds[name], u) for (name, space), u in zip(search.items(), point)}
            for point in rng.random((count, len(search)))]


def _bump(u: np.ndarray, centre: tuple[float, ...], width: tuple[float, ...]) -> float:
    return float(np.exp(-0.5 * np.sum(((u - np.array(centre)) / np.array(width)) ** 2)))


def _best_of(truth: Callable[[dict[str, Any]], float], search: dict[str, Range | Choice], kinds: dict[str, str],
             count: int = 20_000) -> float:
    return max(truth(p) for p in sample(search, kinds, count, np.random.default_rng(12345)))


def _noisy(truth: Callable[[dict[str, Any]], float], sd: float) -> Callable[[dict[str, Any], np.random.Generator],
                                                                           float | None]:
    return lambda parameters, rng: float(np.clip(truth(parameters) + rng.normal(0.0, sd), 0.0, 1.0))


def gils_synthetic(noise_sd: float) -> Problem:
    """GI-LS's space: a narrow best region (little smoothing, few ascent steps, a middling step, many
    epochs) and a broad, lower one elsewhere."""
    search: dict[str, Range | Choice] = {"alpha": Range(0.0, 0.5), "T": Range(1, 15), "eta": Range(1.5, 3.0),
                                         "epochs": Range(21, 60)}
    kinds = {"alpha": "float", "T": "int", "eta": "float", "epochs": "int"}

    def truth(parameters: dict[str, Any]) -> float:
        u = np.array([_to_unit(search[k], parameters[k]) for k in search])
        return 0.55 + 0.35 * _bump(u, (0.2, 0.35, 0.6, 0.75), (0.12, 0.2, 0.25, 0.3)) \
            + 0.2 * _bump(u, (0.8, 0.8, 0.2, 0.3), (0.3, 0.3, 0.4, 0.4))

    return Problem("gils-synthetic", "GI-LS's space (alpha, T, eta, epochs), a smooth function", search, kinds,
                   truth, _noisy(truth, noise_sd), _best_of(truth, search, kinds), declared("gils"))


def hws_synthetic(noise_sd: float) -> Problem:
    """Hardness-weighted sampling's space: accuracy rises with beta to a best region, then collapses;
    importance sampling shifts both a little."""
    search: dict[str, Range | Choice] = {"beta": Range(0.1, 1000.0, log=True),
                                         "importance_sampling": Choice((False, True))}
    kinds = {"beta": "float", "importance_sampling": "bool"}

    def truth(parameters: dict[str, Any]) -> float:
        u = _to_unit(search["beta"], parameters["beta"])
        shift = 0.05 if parameters["importance_sampling"] else 0.0
        rise = 0.15 * math.exp(-0.5 * ((u - 0.45 - shift) / 0.12) ** 2)
        collapse = 0.6 / (1 + math.exp(-(u - 0.8 - shift) / 0.03))
        return 0.75 + rise - collapse + (0.02 if parameters["importance_sampling"] else 0.0)

    return Problem("hws-synthetic", "hws's space (log beta, importance sampling), a smooth function", search,
                   kinds, truth, _noisy(truth, noise_sd), _best_of(truth, search, kinds), declared("hws"))


CLIFF_SPACE: dict[str, Range | Choice] = {"lr_head": Range(0.001, 1.0, log=True),
                                          "lr_backbone": Range(0.001, 1.0, log=True),
                                          "beta": Range(0.1, 1000.0, log=True)}


def cliff_synthetic(noise_sd: float) -> Problem:
    """Both learning rates and hws's beta: the value rises with the head's learning rate toward a cliff, past which
    training diverges (the trial fails, its true value is chance); a larger backbone rate brings the cliff nearer.
    The best lies inside the box, just before the cliff (a head rate just under 0.2 at a backbone rate of 0.016)."""
    search = CLIFF_SPACE
    kinds = {"lr_head": "float", "lr_backbone": "float", "beta": "float"}

    def cliff(parameters: dict[str, Any]) -> float:
        """Where the cliff lies in the head's rate (its position in the box, log scale)."""
        return 0.75 - 0.15 * (_to_unit(search["lr_backbone"], parameters["lr_backbone"]) - 0.5)

    def truth(parameters: dict[str, Any]) -> float:
        head, backbone, beta = (_to_unit(search[k], parameters[k]) for k in search)
        edge = cliff(parameters)
        if head >= edge:
            return CHANCE
        return (0.5 + 0.25 * math.exp(-0.5 * ((head - edge) / 0.25) ** 2)
                + 0.1 * math.exp(-0.5 * ((backbone - 0.4) / 0.3) ** 2)
                + 0.07 * math.exp(-0.5 * ((beta - 0.45) / 0.2) ** 2))

    def observe(parameters: dict[str, Any], rng: np.random.Generator) -> float | None:
        noise = rng.normal(0.0, noise_sd)  # drawn either way, so a failure does not shift the later draws
        if _to_unit(search["lr_head"], parameters["lr_head"]) >= cliff(parameters):
            return None
        return float(np.clip(truth(parameters) + noise, 0.0, 1.0))

    return Problem("cliff-synthetic", "both learning rates and beta: the value rises toward a learning rate past "
                   "which training diverges (failed trials); the best inside, just before the cliff", search, kinds,
                   truth, observe, _best_of(truth, search, kinds), declared("hws"))


@dataclass(frozen=True)
class ReplayTable:
    """The real trials: each configuration's unit-cube point, its seeds' values (NaN: failed) and mean."""

    search: dict[str, Range | Choice]
    kinds: dict[str, str]
    points: np.ndarray  # configurations x parameters, in the unit cube
    values: np.ndarray  # configurations x seeds; NaN where the run failed
    header: str

    @property
    def means(self) -> np.ndarray:
        """Each configuration's value, a failed run counted at CHANCE."""
        return np.where(np.isnan(self.values), CHANCE, self.values).mean(axis=1)

    def noise_sd(self) -> float:
        """The median over configurations of the seed-to-seed standard deviation of completed runs."""
        sds = [np.std(row[~np.isnan(row)], ddof=1) for row in self.values if np.sum(~np.isnan(row)) >= 2]
        return float(np.median(sds))


HWS_REPLAY_SPACE: dict[str, Range | Choice] = {
    "beta": Range(0.1, 1000.0, log=True), "importance_sampling": Choice((False, True)),
    "lr_head": Range(0.01, 0.2, log=True), "lr_backbone": Range(0.01, 0.2, log=True)}
HWS_REPLAY_KINDS = {"beta": "float", "importance_sampling": "bool", "lr_head": "float", "lr_backbone": "float"}
ERM_REPLAY_SPACE: dict[str, Range | Choice] = {"lr_head": Range(0.003, 1.0, log=True),
                                               "lr_backbone": Range(0.003, 1.0, log=True)}
ERM_CUT_SPACE: dict[str, Range | Choice] = {"lr_head": Range(0.01, 0.2, log=True),
                                            "lr_backbone": Range(0.01, 0.2, log=True)}  # the campaign's
ERM_REPLAY_KINDS = {"lr_head": "float", "lr_backbone": "float"}


@functools.lru_cache(maxsize=4)
def read_replay(path: Path = REPLAY_TABLE, objective: str = "val_balanced_accuracy") -> ReplayTable:
    """A committed table of real trials (tools/replay_trials.py), one row per configuration: the hws table, or
    (by its columns) ERM's."""
    with path.open() as file:
        header = "".join(line for line in file if line.startswith("#"))
    with path.open() as file:
        rows = list(csv.DictReader(line for line in file if not line.startswith("#")))
    space, kinds = (HWS_REPLAY_SPACE, HWS_REPLAY_KINDS) if rows and "beta" in rows[0] else (
        ERM_REPLAY_SPACE, ERM_REPLAY_KINDS)
    configs: dict[int, dict[str, Any]] = {}
    seeds = sorted({int(r["seed"]) for r in rows})
    values: dict[int, list[float]] = {}
    for row in rows:
        index = int(row["config"])
        configs[index] = {k: row[k] == "True" if kinds[k] == "bool" else float(row[k]) for k in space}
        values.setdefault(index, [math.nan] * len(seeds))[seeds.index(int(row["seed"]))] = (
            float(row[objective]) if row["status"] == "completed" else math.nan)
    order = sorted(c for c in configs if not any(v is None for v in values[c]))
    points = np.array([[_to_unit(space[k], configs[c][k]) for k in space] for c in order])
    return ReplayTable(space, kinds, points, np.array([values[c] for c in order]), header)


def fit_surrogate(points: np.ndarray, means: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A Gaussian process (ARD Matern-5/2 plus a noise term, scikit-learn) through the configurations'
    means: its posterior mean interpolates the table, smoothing only the seed-to-seed noise in the means."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    kernel = ConstantKernel(0.05) * Matern(length_scale=np.full(points.shape[1], 0.3), nu=2.5,
                                           length_scale_bounds=(1e-2, 1e2)) + WhiteKernel(1e-3, (1e-6, 1e-1))
    model = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=3, random_state=0)
    with warnings.catch_warnings():  # a length scale at its bound is an irrelevant parameter, not a failure
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(points, means)
    return lambda x: np.clip(model.predict(np.atleast_2d(x)), 0.0, 1.0)


def surrogate_check(table: ReplayTable, folds: int = 5) -> dict[str, float]:
    """How well the surrogate predicts configurations it was not fitted on (k-fold over configurations):
    its root-mean-square error, that of predicting the mean of the rest, and the error the seed-to-seed
    noise alone leaves in a configuration's mean (no surrogate can do better on held-out means)."""
    order = np.random.default_rng(0).permutation(len(table.points))
    errors, constant = [], []
    for fold in range(folds):
        held = order[fold::folds]
        kept = np.setdiff1d(order, held)
        predict = fit_surrogate(table.points[kept], table.means[kept])
        errors += list(predict(table.points[held]) - table.means[held])
        constant += list(table.means[kept].mean() - table.means[held])
    floor = table.noise_sd() / math.sqrt(table.values.shape[1])
    return {"surrogate_rmse": float(np.sqrt(np.mean(np.square(errors)))),
            "constant_rmse": float(np.sqrt(np.mean(np.square(constant)))), "noise_floor": floor,
            "configurations": len(table.points), "seeds": table.values.shape[1]}


@dataclass(frozen=True)
class CurveTable:
    """The real runs: each configuration's unit-cube point and its seeds' objective at every epoch (NaN: failed)."""

    points: np.ndarray  # configurations x parameters, in the unit cube
    values: np.ndarray  # configurations x seeds x epochs
    header: str

    @property
    def top_epochs(self) -> int:
        return self.values.shape[2]

    def noise_sd(self, epoch: int) -> float:
        """The median over configurations of the seed-to-seed standard deviation at `epoch` (1-based)."""
        column = self.values[:, :, epoch - 1]
        sds = [np.std(row[~np.isnan(row)], ddof=1) for row in column if np.sum(~np.isnan(row)) >= 2]
        return float(np.median(sds))


@functools.lru_cache(maxsize=2)
def read_curves(path: Path = CURVES_TABLE, objective: str = "val_balanced_accuracy") -> CurveTable:
    """The committed table of real per-epoch curves (tools/replay_curves.py; `bench prefixes` replays it)."""
    with path.open() as file:
        header = "".join(line for line in file if line.startswith("#"))
    with path.open() as file:
        rows = list(csv.DictReader(line for line in file if not line.startswith("#")))
    seeds = sorted({int(r["seed"]) for r in rows})
    top = max(int(r["epoch"]) for r in rows if r["epoch"])
    configs = sorted({int(r["config"]) for r in rows})
    values = np.full((len(configs), len(seeds), top), math.nan)
    points = np.zeros((len(configs), len(CURVE_SPACE)))
    for row in rows:
        c = configs.index(int(row["config"]))
        points[c] = [_to_unit(space, float(row[name])) for name, space in CURVE_SPACE.items()]
        if row["status"] == "completed":
            values[c, seeds.index(int(row["seed"])), int(row["epoch"]) - 1] = float(row[objective])
    return CurveTable(points, values, header)


CURVE_SPACE: dict[str, Range | Choice] = {"beta": Range(0.1, 1000.0, log=True), "lr_head": Range(0.01, 0.2, log=True),
                                          "lr_backbone": Range(0.01, 0.2, log=True)}
CURVE_KINDS = {name: "float" for name in CURVE_SPACE}


def curves_replay(table: CurveTable) -> Problem:
    """The hws study without importance sampling replayed at the table's full epochs, with `observe_half` at half of
    them (see the module's docstring)."""
    def at(epoch: int) -> ReplayTable:
        return ReplayTable(CURVE_SPACE, CURVE_KINDS, table.points, table.values[:, :, epoch - 1], table.header)

    full = replay_problem(at(table.top_epochs), "digits-hws-curves-replay",
                          f"the digits hws study (beta, both learning rates) at {table.top_epochs} epochs, replayed "
                          "from real per-epoch curves; the held-out problem")
    half = replay_problem(at(table.top_epochs // 2), "half", "")
    return dataclasses.replace(full, observe_half=half.observe)


@dataclass(frozen=True)
class SplitTerm:
    """A base split's view of the landscape: a smooth random function of the configuration (a draw of a Gaussian
    process with a squared-exponential kernel of `lengthscale` in the unit cube, by random Fourier features), SD
    `sd`, that a search adds to every observation it makes, the same for all its trials. Another split is another
    draw."""

    sd: float
    lengthscale: float = 0.25
    features: int = 256

    def draw(self, problem: Problem, rng: np.random.Generator) -> Callable[[dict[str, Any]], float]:
        """One split's term over `problem`'s configurations (its unit cube; widened values lie beyond it)."""
        weights = rng.normal(0.0, 1.0 / self.lengthscale, (self.features, len(problem.search)))
        phases = rng.uniform(0.0, 2 * math.pi, self.features)
        scale = self.sd * math.sqrt(2.0 / self.features)
        return lambda parameters: float(scale * np.cos(weights @ problem.unit(parameters) + phases).sum())


def split_sd(path: Path = SPLITS_TABLE, objective: str = "val_balanced_accuracy") -> dict[str, float]:
    """How much a configuration's value moves with the base split beyond the training seed, from a table of
    configurations x split seeds x training seeds (tools/replay_trials.py --splits): the two-way random-effects
    analysis of variance with replication, on the configurations whose every run completed. "interaction": the SD of
    the configuration-by-split term (what moves a search's ranking; the split term's `sd`), "split": the SD of the
    split's main effect (every configuration alike), "seed": the training seed's SD within a cell. A run that
    collapsed (COLLAPSED below the median of all runs: near chance, though it completed) is a heavy tail no SD
    describes: its configuration is left out, as one with a failed run, and "collapsed" counts such runs."""
    with path.open() as file:
        rows = list(csv.DictReader(line for line in file if not line.startswith("#")))
    configs = sorted({int(r["config"]) for r in rows})
    splits = sorted({int(r["split"]) for r in rows})
    seeds = sorted({int(r["seed"]) for r in rows})
    y = np.full((len(configs), len(splits), len(seeds)), math.nan)
    for row in rows:
        if row["status"] == "completed":
            y[configs.index(int(row["config"])), splits.index(int(row["split"])), seeds.index(int(row["seed"]))] = \
                float(row[objective])
    completed = int(np.sum(~np.isnan(y)))
    collapsed = y < np.nanmedian(y) - COLLAPSED
    y = y[~(np.isnan(y) | collapsed).any(axis=(1, 2))]
    (c, p, n), cells = y.shape, y.mean(axis=2)
    residual = cells - cells.mean(axis=1, keepdims=True) - cells.mean(axis=0, keepdims=True) + cells.mean()
    ms_interaction = n * float(np.sum(residual ** 2)) / ((c - 1) * (p - 1))
    ms_error = float(np.sum((y - cells[..., None]) ** 2)) / (c * p * (n - 1))
    ms_split = c * n * float(np.sum((cells.mean(axis=0) - cells.mean()) ** 2)) / (p - 1)
    return {"interaction": math.sqrt(max(ms_interaction - ms_error, 0.0) / n), "seed": math.sqrt(ms_error),
            "split": math.sqrt(max(ms_split - ms_interaction, 0.0) / (c * n)), "configurations": c, "splits": p,
            "seeds": n, "collapsed": int(collapsed.sum()), "completed": completed}


def digits_hws_replay(table: ReplayTable) -> Problem:
    """The replay of the digits hws study (see the module's docstring)."""
    return replay_problem(table, "digits-hws-replay", "the digits hws study replayed from real trials (beta, "
                          "importance sampling, both learning rates)")


def replay_problem(table: ReplayTable, name: str, description: str,
                   search: dict[str, Range | Choice] | None = None, method: str = "",
                   best_anywhere: bool = False) -> Problem:
    """A problem replayed from `table` (see the module's docstring), over the table's box or over `search`, a box
    inside it (the surrogate is fitted on the whole table either way); a point beyond the table's box takes the
    value of the box's nearest point. `method` declares the parameters (default: hws's for the hws table, ERM's
    for the other); `best_anywhere`: the best is the table box's, not `search`'s."""
    predict = fit_surrogate(table.points, table.means)
    deviations = table.values - np.nanmean(table.values, axis=1, keepdims=True)
    seeds = table.values.shape[1]
    inflate = math.sqrt(seeds / (seeds - 1)) if seeds > 1 else 1.0  # deviations from a sample mean run small

    def unit(parameters: dict[str, Any]) -> np.ndarray:
        return np.clip([_to_unit(table.search[k], parameters[k]) for k in table.search], 0.0, 1.0)

    def truth(parameters: dict[str, Any]) -> float:
        return float(predict(unit(parameters))[0])

    def observe(parameters: dict[str, Any], rng: np.random.Generator) -> float | None:
        point = unit(parameters)
        nearest = int(np.argmin(np.sum((table.points - point) ** 2, axis=1)))
        seed = int(rng.integers(seeds))
        if np.isnan(table.values[nearest, seed]):
            return None
        return float(np.clip(truth(parameters) + inflate * deviations[nearest, seed], 0.0, 1.0))

    search = search or table.search
    best = _best_of(truth, table.search if best_anywhere else search, table.kinds, 5_000)
    return Problem(name, description, search, table.kinds, truth, observe, best,
                   declared(method or ("hws" if "beta" in table.search else "erm")))


def problems(names: tuple[str, ...] = ()) -> list[Problem]:
    """The benchmark's problems (all, or those named); the synthetic ones take the replay's noise level."""
    table = read_replay() if REPLAY_TABLE.is_file() else None
    noise = table.noise_sd() if table is not None else 0.03
    built = {"gils-synthetic": lambda: gils_synthetic(noise), "hws-synthetic": lambda: hws_synthetic(noise)}
    if table is not None:
        built["digits-hws-replay"] = lambda: digits_hws_replay(table)
    if ERM_REPLAY_TABLE.is_file():
        built["digits-erm-replay"] = lambda: replay_problem(
            read_replay(ERM_REPLAY_TABLE), "digits-erm-replay",
            "ERM's two learning rates on the digits, replayed from real trials over [0.003, 1]")
        built["digits-erm-cut-replay"] = lambda: replay_problem(
            read_replay(ERM_REPLAY_TABLE), "digits-erm-cut-replay",
            "the same over the campaign's range [0.01, 0.2], which cuts the best off", ERM_CUT_SPACE)
        built["digits-erm-outside-replay"] = lambda: replay_problem(
            read_replay(ERM_REPLAY_TABLE), "digits-erm-outside-replay",
            "the same searched over [0.01, 0.2], judged against the best over [0.003, 1], which lies outside",
            ERM_CUT_SPACE, best_anywhere=True)
    built["cliff-synthetic"] = lambda: cliff_synthetic(noise)
    if CURVES_TABLE.is_file():
        built["digits-hws-curves-replay"] = lambda: curves_replay(read_curves())
    return [build() for name, build in built.items() if not names or name in names]


def available_problems() -> tuple[str, ...]:
    """The problems whose tables are here (the replays need theirs)."""
    return tuple(name for name in PROBLEMS if (name != "digits-hws-replay" or REPLAY_TABLE.is_file())
                 and ("erm" not in name or ERM_REPLAY_TABLE.is_file())
                 and (name != "digits-hws-curves-replay" or CURVES_TABLE.is_file()))


PROBLEMS = ("gils-synthetic", "hws-synthetic", "digits-hws-replay", "digits-erm-replay", "digits-erm-cut-replay",
            "digits-erm-outside-replay", "cliff-synthetic", "digits-hws-curves-replay")
