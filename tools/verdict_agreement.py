"""How the decisions of several verdicts of one campaign agree: the verdicts of one campaign run on other base
splits (or with other search seeds), read from `robust-tune report --verdict NAME --format json` files. Per
verdict, the primary cells it decided (better, worse or equivalent) and the pairs it used; per pair of verdicts
and over all of them, how many cells both decided and how many of those got the same word.

    python tools/verdict_agreement.py split0.json split100.json split200.json
"""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

DECIDED = ("better", "worse", "equivalent")


def verdict_cells(path: Path) -> tuple[dict[tuple[str, str], str], int]:
    """(method, metric) -> the word of each primary cell, and the re-training runs, from a verdict's JSON."""
    tables = json.loads(path.read_text())
    verdict = next(t for t in tables if t["title"].startswith("Verdict of campaign"))
    words = {(row["method"], metric): c["verdict"] for row in verdict["rows"]
             for metric, c in row["vs_erm"].items() if c.get("primary")}
    return words, sum(row["seeds"] for row in verdict["rows"] if not row.get("missing"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verdicts", nargs="+", type=Path, help="verdict JSON files")
    args = parser.parse_args()
    found = {path.stem: verdict_cells(path) for path in args.verdicts}
    words = {name: w for name, (w, _) in found.items()}
    for name, (w, runs) in found.items():
        decided = sum(word in DECIDED for word in w.values())
        print(f"{name}: {decided} of {len(w)} primary cells decided, {runs} re-training runs")
    cells = sorted(set.intersection(*(set(w) for w in words.values())))
    for (a, wa), (b, wb) in itertools.combinations(words.items(), 2):
        both = [c for c in cells if wa[c] in DECIDED and wb[c] in DECIDED]
        print(f"{a} and {b}: {len(both)} cells decided in both, {sum(wa[c] == wb[c] for c in both)} the same word")
    every = [c for c in cells if all(w[c] in DECIDED for w in words.values())]
    print(f"all {len(words)}: {len(every)} cells decided in every one, "
          f"{sum(len({w[c] for w in words.values()}) == 1 for c in every)} the same word")
    for cell in cells:
        print(f"  {cell[0]:<10} {cell[1]:<26} " + " | ".join(f"{w[cell]:<10}" for w in words.values()))


if __name__ == "__main__":
    main()
