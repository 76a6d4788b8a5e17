"""How long the reading commands take to answer, as ratios to a bare `import typer, rich` (and bare Python
listed beside it).

Each command runs in a fresh process, interleaved round by round with the baseline so that both
see the same machine load; the median of the rounds is reported.
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BASELINE = "python -c 'import typer, rich'"


def _seconds(command: list[str]) -> float:
    tick = time.perf_counter()
    subprocess.run(command, capture_output=True, check=False)
    return time.perf_counter() - tick


def measure_startup(db: str, rounds: int = 5) -> dict[str, float]:
    """Median wall seconds of bare Python, the baseline, `--help`, `methods`, `report` and `studies`, each in a new
    process."""
    script = shutil.which("robust-tune") or str(Path(sys.executable).with_name("robust-tune"))
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        BASELINE: [sys.executable, "-c", "import typer, rich"],
        "robust-tune --help": [script, "--help"],
        "robust-tune methods": [script, "methods"],
        "robust-tune report": [script, "report", "--db", db],
        "robust-tune studies": [script, "studies", "--db", db],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            times[name].append(_seconds(command))
    return {name: statistics.median(values) for name, values in times.items()}
