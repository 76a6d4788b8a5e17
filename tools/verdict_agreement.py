"""How many (method, metric) cells of several verdicts say the same word: the verdicts of one campaign run on
other splits (or with other search seeds), read from `robust-tune report --verdict NAME --format json` files.

    python tools/verdict_agreement.py split0.json split100.json split200.json
"""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path


def verdict_words(path: Path) -> dict[tuple[str, str], str]:
    """(method, metric) -> the verdict's word, from a verdict's JSON."""
    tables = json.loads(path.read_text())
    verdict = next(t for t in tables if t["title"].startswith("Verdict of campaign"))
    return {(row["method"], metric): ("is ERM" if c.get("same_as_erm") else c["verdict"])
            for row in verdict["rows"] for metric, c in row["vs_erm"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verdicts", nargs="+", type=Path, help="verdict JSON files")
    args = parser.parse_args()
    words = {path.stem: verdict_words(path) for path in args.verdicts}
    cells = sorted(set.intersection(*(set(w) for w in words.values())))
    for (a, wa), (b, wb) in itertools.combinations(words.items(), 2):
        print(f"{a} and {b}: {sum(wa[c] == wb[c] for c in cells)} of {len(cells)} cells agree")
    print(f"all {len(words)}: {sum(len({w[c] for w in words.values()}) == 1 for c in cells)} of {len(cells)} agree")
    for cell in cells:
        print(f"  {cell[0]:<10} {cell[1]:<28} " + " | ".join(f"{w[cell]:<24}" for w in words.values()))


if __name__ == "__main__":
    main()
