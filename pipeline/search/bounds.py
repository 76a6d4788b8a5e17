"""Tuned values at a bound of their search range, and the study's rule for widening such a range.

A value is on a bound when its position in the range, in the range's own scale (log for a log range), is
within a tolerance of either end. A choice has no bounds to widen and is never flagged.

A range's end is soft where the parameter's declaration says it is a convention (HParam.soft: learning rates,
a paper's range for a method parameter) and hard where it is a limit (alpha >= 0, a count >= 1). When a study's
best trial sits on a soft end, the study widens that end outward (`widened`): by WIDEN_FACTOR on a log scale,
by the range's width on a linear one, never past the declared limit, and goes on searching the wider range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from pipeline.params import Choice, HParam, Interval, Range, Value
from pipeline.store.records import Widening, span

TOLERANCE = 0.02  # of the range's width, in its own scale
WIDEN_FACTOR = 4.0  # a log range's soft end moves out by this factor (0.2 -> 0.8); a linear one by its width


@dataclass(frozen=True)
class BoundFlag:
    """One searched parameter whose tuned value sits on a bound of its range."""

    parameter: str
    value: float
    bound: str  # "lower" or "upper"
    low: float
    high: float
    log: bool

    def text(self, owner: str) -> str:
        """The sentence reports show, `owner` being the study or method whose range it is."""
        value = f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)
        return (f"{owner}: {self.parameter} = {value} sits on the {self.bound} bound of [{self.low:g}, "
                f"{self.high:g}]: its best may lie outside; widen the range")

    @property
    def short(self) -> str:
        """The flag in a table cell: `lr_head (upper)`."""
        return f"{self.parameter} ({self.bound})"


def position(value: float, search: Range) -> float:
    """Where `value` lies in `search`, 0 at its low end and 1 at its high end, in the range's own scale."""
    if search.log:
        return (math.log(value) - math.log(search.low)) / (math.log(search.high) - math.log(search.low))
    return (value - search.low) / (search.high - search.low)


def bound_flags(search: Mapping[str, Range | Choice], parameters: Mapping[str, Value],
                tolerance: float = TOLERANCE) -> list[BoundFlag]:
    """The searched ranges (in `search`'s order) whose value in `parameters` is within `tolerance` of a bound;
    a value near both ends of a very narrow range is on the nearer one."""
    flags = []
    for name, space in search.items():
        value = parameters.get(name)
        if not isinstance(space, Range) or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        where = position(value, space)
        if where <= tolerance or where >= 1 - tolerance:
            flags.append(BoundFlag(name, value, "lower" if where < 0.5 else "upper", space.low, space.high,
                                   space.log))
    return flags


def widened(space: Range, side: str, limit: Interval, integer: bool = False,
            factor: float = WIDEN_FACTOR) -> Range | None:
    """`space` with its `side` end moved outward (see the module's rule; `factor` on a log scale, a linear range by
    its width times `factor` / WIDEN_FACTOR), stopping at `limit` (halfway to an open limit, so the end stays valid);
    None when that end is at the limit already and cannot move."""
    step = (space.high - space.low) * factor / WIDEN_FACTOR
    if side == "upper":
        target = space.high * factor if space.log else space.high + step
        edge, is_open = limit.high, limit.high_open
        new = min(target, (space.high + edge) / 2 if is_open and target >= edge else edge)
        if integer:
            new = math.floor(new) if new < edge or not is_open else math.ceil(new - 1)
        new = new if integer else _tidy(new, limit)
        return None if new <= space.high else Range(space.low, new, space.log, space.widen)
    target = space.low / factor if space.log else space.low - step
    edge, is_open = limit.low, limit.low_open
    new = max(target, (space.low + edge) / 2 if is_open and target <= edge else edge)
    if integer:
        new = math.ceil(new) if new > edge or not is_open else math.floor(new + 1)
    new = new if integer else _tidy(new, limit)
    return None if new >= space.low else Range(new, space.high, space.log, space.widen)


def _tidy(value: float, limit: Interval) -> float:
    """`value` at 6 significant digits (0.064, not the 0.06399999999999999 of 0.004 x 4 x 4), where that stays
    within `limit`."""
    tidy = float(f"{value:.6g}")
    return tidy if tidy in limit else value


def widenings(search: Mapping[str, Range | Choice], declared: Mapping[str, HParam], best: Mapping[str, Value],
              best_trial: int, ran: int, factor: float = WIDEN_FACTOR,
              failed: Sequence[Mapping[str, Value]] = ()) -> list[Widening]:
    """Each soft end of a range in `search` that the best trial's parameters (`best`) sit on, widened (by `factor`,
    see `widened`); none for a range the study file fixed (`widen = false`), an end at its limit, or an end that one
    of the `failed` trials' parameters sits on too (training failed there: wider would search where it fails).
    `ran` is the trials that have run."""
    failed_ends = {(flag.parameter, flag.bound) for parameters in failed for flag in bound_flags(search, parameters)}
    moved = []
    for flag in bound_flags(search, best):
        space, hparam = search[flag.parameter], declared.get(flag.parameter)
        if not isinstance(space, Range) or not space.widen or hparam is None or flag.bound not in hparam.soft_sides():
            continue
        if (flag.parameter, flag.bound) in failed_ends:
            continue
        after = widened(space, flag.bound, hparam.widen_limit, hparam.kind == "int", factor)
        if after is not None:
            moved.append(Widening(flag.parameter, flag.bound, space, after, ran, best_trial, float(flag.value)))
    return moved


def searched_ranges(search: Mapping[str, Range | Choice], moved: Sequence[Widening]) -> dict[str, Range | Choice]:
    """The search space a study searches now: its file's ranges with every stored widening applied in order."""
    now = dict(search)
    for widening in moved:
        now[widening.parameter] = widening.after
    return now


def widening_lines(moved: Sequence[Widening]) -> list[str]:
    """One sentence per widened parameter, its steps together: `lr_head widened from [0.001, 0.004] to [0.001,
    0.064] after 4 and 9 trials: the best trial sat on its upper bound`."""
    lines = []
    for name in dict.fromkeys(w.parameter for w in moved):
        steps = [w for w in moved if w.parameter == name]
        sides = " and ".join(dict.fromkeys(w.side for w in steps))
        after = [str(w.after_trial) for w in steps]
        when = after[0] if len(after) == 1 else ", ".join(after[:-1]) + " and " + after[-1]
        lines.append(f"{name} widened from {span(steps[0].before)} to {span(steps[-1].after)} after {when} trials: "
                     f"the best trial sat on its {sides} bound")
    return lines
