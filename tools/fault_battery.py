"""The kill battery: SIGKILL `robust-tune run`, `run --workers 2` and `evaluate` at random moments, resume each
time, and count what a kill cost the store: completed trials or runs lost, duplicated, left running (stuck)
after the resume, and budgets miscounted.

    python tools/fault_battery.py --kills 10 --seed 0

Each command gets a fresh folder with a tiny study of the digits (5 epochs, 8 trials, 3 of them Sobol); after
every kill the store is read and compared with what it held before; at the end the command runs to its end
without a kill and the totals are checked. Prints one table and how long it took; `--out` writes the figures
as JSON. Runs the installed `robust-tune` beside the Python that runs this script.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ROBUST_TUNE = str(Path(sys.executable).with_name("robust-tune"))
BUDGET, SEEDS = 8, 4
STUDY = (ROOT / "studies" / "quickstart.toml").read_text().replace('name = "quickstart"', 'name = "battery"') \
    .replace("epochs = 20", "epochs = 5").replace("trials = 8", f"trials = {BUDGET}") \
    .replace("initial = 4", "initial = 3")


def store_state(db: Path) -> dict[str, list[tuple]]:
    """What the store holds of the study: its trials (index, status, parameters) and evaluation runs."""
    from pipeline.store import Store

    if not db.exists():
        return {"trials": [], "runs": []}
    store = Store(str(db), create=False)
    study = store.study("battery")
    if study is None:
        return {"trials": [], "runs": []}
    trials = [(t.trial_index, t.status, json.dumps(t.parameters, sort_keys=True)) for t in store.trials(study.id)]
    runs = [(r.variant, r.seed) for r in store.evaluations(study.id)]
    return {"trials": trials, "runs": runs}


def completed(state: dict[str, list[tuple]]) -> list[tuple]:
    return [(index, parameters) for index, status, parameters in state["trials"] if status == "completed"]


def launch(command: list[str], folder: Path) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def kill_group(process: subprocess.Popen, whole_group: bool) -> None:
    """SIGKILL the command (only its own process, as a crash would; its Dask workers are then ended too)."""
    process.send_signal(signal.SIGKILL)
    process.wait()
    if whole_group:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def battery(kind: str, kills: int, rng: random.Random) -> dict[str, int]:
    """`kills` random SIGKILLs of one command kind, each followed by a read of the store, then a clean run."""
    folder = Path(tempfile.mkdtemp(prefix=f"rt-battery-{kind}-"))
    (folder / "battery.toml").write_text(STUDY)
    db = folder / "battery.db"
    base = ["--db", str(db), "--device", "cpu", "--log-file", str(folder / "log.txt")]
    run = [ROBUST_TUNE, "run", "battery.toml", *base]
    if kind == "run-workers":
        run += ["--workers", "2"]
    if kind == "evaluate":  # the study is run to its end first; the kills land in the re-training
        subprocess.run(run, cwd=folder, check=True, capture_output=True)
    command = [ROBUST_TUNE, "evaluate", "battery", "--seeds", str(SEEDS), "--against", "erm,ls,cb", *base] \
        if kind == "evaluate" else run
    latest = 6.0 if kind == "evaluate" else 9.0  # evaluate's runs are short: kill it within its first seconds
    figures = {"kills": 0, "lost": 0, "duplicated": 0, "stuck": 0, "miscounted": 0, "failed_resumes": 0}
    seen: set[tuple] = set()
    for _ in range(kills):
        process = launch(command, folder)
        time.sleep(rng.uniform(3.0, latest))  # start-up takes about 3 s
        finished = process.poll() is not None
        kill_group(process, whole_group=True)
        figures["kills"] += not finished
        state = store_state(db)
        kept = set(completed(state)) | set(state["runs"])
        figures["lost"] += len(seen - kept)
        seen |= kept
    process = launch(command, folder)
    _, err = process.communicate()
    figures["failed_resumes"] += process.returncode != 0
    state = store_state(db)
    done = completed(state)
    figures["lost"] += len(seen - (set(done) | set(state["runs"])))
    figures["duplicated"] += (len(done) - len({p for _, p in done})) + (len(state["runs"]) - len(set(state["runs"])))
    figures["stuck"] += sum(status == "running" for _, status, _ in state["trials"])
    ended = sum(status in ("completed", "failed") for _, status, _ in state["trials"])
    expected_runs = 0 if kind != "evaluate" else len({v for v, _ in state["runs"]}) * SEEDS
    figures["miscounted"] += ended != BUDGET or len(state["runs"]) != expected_runs
    if process.returncode != 0:
        print(f"{kind}: the resume exited {process.returncode}: {err.strip().splitlines()[-1:]}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="random kills per command")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    results = {}
    for kind in ("run", "run-workers", "evaluate"):
        results[kind] = battery(kind, args.kills, rng)
        print(f"{kind}: {results[kind]}", flush=True)
    print("\n| command | kills landed | lost | duplicated | stuck | budget miscounted | resume failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    names = {"run": "`run`", "run-workers": "`run --workers 2`",
             "evaluate": f"`evaluate --seeds {SEEDS} --against erm,ls,cb`"}
    for kind, f in results.items():
        print(f"| {names[kind]} | {f['kills']} | {f['lost']} | {f['duplicated']} | {f['stuck']} | "
              f"{f['miscounted']} | {f['failed_resumes']} |")
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
