"""Tuned values at a bound of their search range: the range may cut off the method's best, so widen it.

A value is on a bound when its position in the range, in the range's own scale (log for a log range), is
within a tolerance of either end. A choice has no bounds to widen and is never flagged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from pipeline.params import Choice, Range, Value

TOLERANCE = 0.02  # of the range's width, in its own scale


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
