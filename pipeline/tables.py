"""A report's unit: a titled grid of text with its notes and the same rows as data, and the few rules
for showing one (percentages, columns every row shares folded into the title)."""
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


# Columns that describe a study rather than a result: when every row has the same value, the
# terminal table says it once in its title (`fold_constant_columns`).
DESCRIPTIVE = ("data set", "network", "method", "selected on")

# Columns of free text a terminal grid gives the room the others leave: errors (cut) and lists (wrapped).
FLEXIBLE = ("error", "tuned parameters", "ranking (> detectable lead, ≈ not)")


def fold_constant_columns(table: Table, foldable: tuple[str, ...] = DESCRIPTIVE) -> Table:
    """The same table with each `foldable` column whose value every row shares moved into the title,
    so a terminal grid stays narrow; the data (records) are unchanged."""
    constant = [i for i, h in enumerate(table.headers)
                if h in foldable and table.rows and len({row[i] for row in table.rows}) == 1]
    if not constant:
        return table
    said = ", ".join(f"{table.headers[i]} {table.rows[0][i]}" for i in constant)
    keep = [i for i in range(len(table.headers)) if i not in constant]
    return Table(f"{table.title}: {said}", [table.headers[i] for i in keep],
                 [[row[i] for i in keep] for row in table.rows], table.notes, table.records)


def percent(value: float | None) -> str:
    """An accuracy in [0, 1] as a percentage with one decimal; "-" when there is none."""
    return "-" if value is None else f"{100 * value:.1f}"
