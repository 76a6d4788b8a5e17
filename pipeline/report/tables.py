"""A report's unit: a titled grid of text with its notes and the same rows as data, and the few rules
for showing one (percentages; which columns describe and which are free text)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    """A titled grid of text plus the notes a reader needs to interpret it."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)  # the same rows as data, for JSON
    summary: str = ""  # what it says in words, one of its notes: the HTML page shows it right under the grid
    detail: Table | None = None  # the values behind its cells (each seed's): the HTML page folds them under it
    key: str = ""  # the column a reader comes for (the objective): the page keeps it in view in a narrow window


# Columns that describe a study rather than a result: a one-row terminal table says them in a note when
# it is short of room (cli/render.py fit_columns).
DESCRIPTIVE = ("data set", "network", "method", "selected on")

# Columns of free text a terminal grid gives the room the others leave: errors (cut) and lists (wrapped).
FLEXIBLE = ("error", "tuned parameters", "ranking (> detectable lead, ≈ not)", "warning")
# Of those, the ones a terminal grid wraps between words in the room it gives them rather than cut: a tuned value cut
# off is a value the reader cannot use (the only cells of a terminal table that may take more than one line).
WRAPPED = ("tuned parameters",)

# Columns the table's notes say in full: a terminal grid leaves them out for room (unless asked for by name or
# --wide), while files keep them, CSV having no notes.
IN_NOTES = ("on a bound",)


def parameter_text(value: Any, digits: int = 4) -> str:
    """A hyper-parameter's value in a table cell: on/off for a switch, `digits` significant digits for a float."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


# An interval of a difference of accuracies at least this wide (100 points) says nothing: a table prints "too few
# pairs" instead of its ends (a 3-pair interval at a Bonferroni level reaches [-100, +100]); the records keep them.
TOO_WIDE = 1.0
TOO_FEW = "too few pairs"


def too_wide(low: float, high: float) -> bool:
    """Whether an interval of a difference of accuracies (fractions) is too wide to mean anything (TOO_WIDE)."""
    return high - low >= TOO_WIDE


def percent(value: float | None) -> str:
    """An accuracy in [0, 1] as a percentage with one decimal; "-" when there is none."""
    return "-" if value is None else f"{100 * value:.1f}"
