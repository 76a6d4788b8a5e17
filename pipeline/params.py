"""Hyper-parameters as plain data: one line each, with type, default, valid values and search range.

The same declarations validate `--param name=value`, fill defaults, and give a study its
default search space (the papers' ranges), so there is one place to read what a method takes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from pipeline.errors import UserError, did_you_mean, one_of

Value = float | int | bool | str
SOFT_SIDES = ("", "lower", "upper", "both")


@dataclass(frozen=True)
class Interval:
    """A closed, open or half-open range written as "[0, 1)", "(0, inf)" and so on."""

    low: float
    high: float
    low_open: bool
    high_open: bool

    @classmethod
    def parse(cls, text: str) -> "Interval":
        low, high = (part.strip() for part in text.strip()[1:-1].split(","))
        return cls(float(low), float(high), text.strip()[0] == "(", text.strip()[-1] == ")")

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        def fmt(x: float) -> str:
            return "inf" if math.isinf(x) else f"{x:g}"

        return f"{'(' if self.low_open else '['}{fmt(self.low)}, {fmt(self.high)}{')' if self.high_open else ']'}"


@dataclass(frozen=True)
class Range:
    """A search range for a float or int hyper-parameter (log scale optional)."""

    low: float
    high: float
    log: bool = False
    # False: the study file fixed this range (`widen = false`); True: its soft ends may widen (search/bounds.py)
    widen: bool = True


@dataclass(frozen=True)
class Choice:
    """A search over a finite set of values."""

    values: tuple[Value, ...]


@dataclass(frozen=True)
class HParam:
    """One hyper-parameter. `valid` is what training accepts; `search` is the default study range
    (None: the parameter stays fixed at its default in a study unless the study searches it)."""

    name: str
    kind: str  # "float" | "int" | "bool" | "choice"
    default: Value
    valid: str | tuple[str, ...]  # an Interval for numbers, the allowed values for a choice
    help: str
    search: Range | Choice | None = None
    column: str | None = None  # its header in the best table, shown even when fixed (the papers' columns)
    # Which ends of a search range are soft, a convention a study may widen past where its best sits on them:
    # "", "lower", "upper" or "both". A hard end (alpha >= 0, a count >= 1, a probability <= 1) never moves.
    soft: str = ""
    limit: str | None = None  # the interval widening never passes (default: `valid`)

    def __post_init__(self) -> None:
        if self.kind == "int" and math.isinf(self.interval.high):
            raise ValueError(f"integer parameter {self.name} needs a finite upper bound (a typo must not run forever)")
        if self.soft not in SOFT_SIDES:
            raise ValueError(f"parameter {self.name}: soft must be one of {', '.join(map(repr, SOFT_SIDES))}")

    def soft_sides(self) -> tuple[str, ...]:
        """The ends of this parameter's search range that may widen: ("lower",), ("upper",), both or none."""
        return ("lower", "upper") if self.soft == "both" else (self.soft,) if self.soft else ()

    @property
    def widen_limit(self) -> Interval:
        """How far a search range of this parameter may widen at most: `limit`, else its valid values."""
        return Interval.parse(self.limit) if self.limit else self.interval

    def coerce(self, raw: Any) -> Value:
        """Turn a value from the command line (str), a TOML file or Ax into this parameter's type."""
        try:
            value: Value = _COERCE[self.kind](raw)
        except (TypeError, ValueError):
            raise UserError(f"parameter {self.name} must be {KIND_WORDS[self.kind]}, got {raw!r}") from None
        if self.kind in ("float", "int"):
            interval = self.interval
            if not isinstance(value, (int, float)) or math.isnan(value) or value not in interval:
                raise UserError(f"parameter {self.name} must be in {interval}, got {raw!r}")
        if self.kind == "choice" and value not in self.valid:
            raise UserError(f"parameter {self.name} {one_of(raw, self.valid)}")
        return value

    @property
    def interval(self) -> Interval:
        """A number parameter's valid values (`valid` read as an Interval)."""
        if not isinstance(self.valid, str):
            raise TypeError(f"parameter {self.name} is a choice, not a number")
        return Interval.parse(self.valid)


def _to_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise TypeError
    if isinstance(raw, float):
        if not raw.is_integer():
            raise ValueError
        return int(raw)
    return int(raw)


def _to_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError
    return float(raw)


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    if isinstance(raw, (str, int)) and str(raw).lower() in words:
        return words[str(raw).lower()]
    raise ValueError


def _to_choice(raw: Any) -> str:
    if not isinstance(raw, str):
        raise TypeError
    return raw


_COERCE: dict[str, Callable[[Any], Value]] = {"float": _to_float, "int": _to_int, "bool": _to_bool,
                                              "choice": _to_choice}
KIND_WORDS = {"float": "a number", "int": "an integer", "bool": "true or false", "choice": "a word"}

# Defaults for a backbone trained from scratch (weights = "none"), over TRAINING_PARAMS': the GI-LS paper's 1e-3 for the
# feature extractor fine-tunes pretrained weights, and from scratch it barely learns (a small CNN on 28 px digits: loss
# 2.30 -> 2.06 and 33% in 4 epochs, against 1.38 and 41% at 0.01; the digits at 30 epochs end at a loss of 0.04
# against 0.006). The head's rate is the one the whole network takes. Studies stored before keep the earlier default
# (EARLIER_PARAM_DEFAULTS, StudyConfig.settle_defaults).
SCRATCH_DEFAULTS: dict[str, Value] = {"lr_backbone": 1e-2}
EARLIER_PARAM_DEFAULTS: dict[str, tuple[Value, ...]] = {"lr_backbone": (1e-3,)}


def training_defaults(weights: str) -> dict[str, Value]:
    """The defaults that depend on the network's starting weights, over the declared ones (SCRATCH_DEFAULTS)."""
    return dict(SCRATCH_DEFAULTS) if weights == "none" else {}


def resolve(declared: Iterable[HParam], given: Mapping[str, Any], owner: str) -> dict[str, Value]:
    """Validate `given` against `declared` and fill in defaults; `owner` names the method in errors."""
    by_name = {p.name: p for p in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise UserError(
            f"unknown parameter {unknown[0]!r} for method {owner}{did_you_mean(unknown[0], by_name)}; known: "
            f"{', '.join(by_name)}"
        )
    return {name: (p.coerce(given[name]) if name in given else p.default) for name, p in by_name.items()}


def parse_assignment(text: str) -> tuple[str, str]:
    """Split one `name=value` from the command line."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise UserError(f"malformed --param {text!r}: expected name=value, for example alpha=0.3")
    return name.strip(), value.strip()


# Settings of the shared trainer, searchable like any method's parameters. The schedule is the
# GI-LS paper's: 1e-2 for the head, 1e-3 for the feature extractor, x0.3 every 20 epochs.
# Integer upper bounds stop a typo (epochs = 10**9) from running until killed while leaving far more
# room than the papers use: they train 21-60 epochs with batches of tens of images.
# Learning rates and the schedule are conventions (soft: a search range widens past them); epochs and the batch size
# set a trial's cost and memory, which the user declares (hard).
TRAINING_PARAMS = (
    HParam("epochs", "int", 30, "[1, 1000]", "passes over the training set", Range(21, 60), column="epoch"),
    HParam("batch_size", "int", 32, "[1, 8192]", "examples per mini-batch"),
    HParam("lr_head", "float", 1e-2, "(0, inf)", "learning rate of the linear head", soft="both"),
    HParam("lr_backbone", "float", 1e-3, "[0, inf)", "learning rate of the feature extractor (0.01 for one trained "
           "from scratch, weights = none)", soft="both"),
    HParam("lr_decay", "float", 0.3, "(0, 1]", "factor applied to both learning rates every lr_step epochs",
           soft="both"),
    HParam("lr_step", "int", 20, "[1, 1000]", "epochs between learning-rate decays", soft="both"),
    HParam("momentum", "float", 0.9, "[0, 1)", "SGD momentum", soft="both", limit="[0, 0.99]"),
    HParam("weight_decay", "float", 0.0, "[0, inf)", "SGD weight decay (L2 penalty)", soft="both"),
)
