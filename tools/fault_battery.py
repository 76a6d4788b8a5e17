"""The fault battery: SIGKILL `robust-tune run`, `run --workers 2` (the run process, or one of its Dask workers),
`evaluate` and `compare` at random moments, resume each time, and count what a kill cost the store: completed
trials or runs lost, duplicated, left running (stuck) after the resume, and budgets miscounted. Then the
concurrency cases: two runs of one study at once, run and evaluate of one study at once, a delete during a run,
reads while a run writes, and two studies run at once into one SQLite file.

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
CAMPAIGN_TRIALS, CAMPAIGN_SEEDS, CAMPAIGN_METHODS = 3, 3, ("erm", "ls", "cb")
CAMPAIGN = f"""
name = "battery"
objective = "val_balanced_accuracy"
methods = ["ls", "cb"]
[data]
name = "digits"
imbalance_class = "3"
imbalance_keep = 0.1
imbalance_in = "train"
[params]
epochs = 5
lr_head = {{ low = 0.01, high = 0.2, log = true }}
[method_params.cb]
cb_power = {{ low = 0.2, high = 1.0 }}
[budget]
trials = {CAMPAIGN_TRIALS}
initial = 2
[evaluate]
seeds = {CAMPAIGN_SEEDS}
"""


def store_state(db: Path, name: str = "battery") -> dict[str, list[tuple]]:
    """What the store holds of a study: its trials (index, status, parameters) and evaluation runs."""
    from pipeline.store import Store

    if not db.exists():
        return {"trials": [], "runs": []}
    store = Store(str(db), create=False)
    study = store.study(name)
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


def campaign_state(db: Path) -> dict[str, list[tuple]]:
    """What the store holds of the campaign's studies, each trial and run keyed by its study."""
    states = {method: store_state(db, f"battery.{method}") for method in CAMPAIGN_METHODS}
    return {"trials": [(m, *trial) for m, s in states.items() for trial in s["trials"]],
            "runs": [(m, *run) for m, s in states.items() for run in s["runs"]]}


def campaign_battery(kills: int, rng: random.Random) -> dict[str, int]:
    """`kills` random SIGKILLs of `compare`, each followed by a read of the store, then a clean `compare`."""
    folder = Path(tempfile.mkdtemp(prefix="rt-battery-compare-"))
    (folder / "battery.toml").write_text(CAMPAIGN)
    db = folder / "battery.db"
    command = [ROBUST_TUNE, "compare", "battery.toml", "--db", str(db), "--device", "cpu",
               "--log-file", str(folder / "log.txt")]
    figures = {"kills": 0, "lost": 0, "duplicated": 0, "stuck": 0, "miscounted": 0, "failed_resumes": 0}
    seen: set[tuple] = set()
    for _ in range(kills):
        process = launch(command, folder)
        time.sleep(rng.uniform(3.0, 12.0))
        finished = process.poll() is not None
        kill_group(process, whole_group=True)
        figures["kills"] += not finished
        state = campaign_state(db)
        kept = {(m, i, p) for m, i, s, p in state["trials"] if s == "completed"} | set(state["runs"])
        figures["lost"] += len(seen - kept)
        seen |= kept
    process = launch(command, folder)
    _, err = process.communicate()
    figures["failed_resumes"] += process.returncode != 0
    state = campaign_state(db)
    done = {(m, i, p) for m, i, s, p in state["trials"] if s == "completed"}
    figures["lost"] += len(seen - (done | set(state["runs"])))
    per_study = [[(i, p) for m2, i, s, p in state["trials"] if m2 == m and s == "completed"] for m in CAMPAIGN_METHODS]
    figures["duplicated"] += sum(len(d) - len({p for _, p in d}) for d in per_study) \
        + (len(state["runs"]) - len(set(state["runs"])))
    figures["stuck"] += sum(s == "running" for _, _, s, _ in state["trials"])
    ended = [sum(s in ("completed", "failed") for m2, _, s, _ in state["trials"] if m2 == m) for m in CAMPAIGN_METHODS]
    figures["miscounted"] += any(e != CAMPAIGN_TRIALS for e in ended) \
        or len(state["runs"]) != len(CAMPAIGN_METHODS) * CAMPAIGN_SEEDS
    if process.returncode != 0:
        print(f"compare: the resume exited {process.returncode}: {err.strip().splitlines()[-1:]}", flush=True)
    return figures


def dask_workers(process: subprocess.Popen) -> list:
    """The Dask worker processes a `run --workers N` started (its children that run a worker)."""
    import psutil

    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if "resource_tracker" not in " ".join(c.cmdline())]


def worker_battery(kills: int, rng: random.Random) -> dict[str, int]:
    """`run --workers 2` left running while one of its workers is SIGKILLed at random moments; the run must end
    at its budget by itself, with nothing lost, duplicated or stuck."""
    folder = Path(tempfile.mkdtemp(prefix="rt-battery-worker-"))
    (folder / "battery.toml").write_text(STUDY.replace(f"trials = {BUDGET}", f"trials = {BUDGET + kills}"))
    db = folder / "battery.db"
    command = [ROBUST_TUNE, "run", "battery.toml", "--db", str(db), "--device", "cpu",
               "--log-file", str(folder / "log.txt"), "--workers", "2"]
    figures = {"kills": 0, "lost": 0, "duplicated": 0, "stuck": 0, "miscounted": 0, "failed_resumes": 0}
    process = launch(command, folder)
    seen: set[tuple] = set()
    time.sleep(8.0)  # the cluster started and the first trials training
    for _ in range(kills):
        workers = dask_workers(process)
        if process.poll() is not None or not workers:
            break
        rng.choice(workers).kill()
        figures["kills"] += 1
        time.sleep(rng.uniform(4.0, 8.0))  # the nanny starts a new worker; trials go on
        kept = set(completed(store_state(db)))
        figures["lost"] += len(seen - kept)
        seen |= kept
    _, err = process.communicate()
    figures["failed_resumes"] += process.returncode != 0
    state = store_state(db)
    done = completed(state)
    figures["lost"] += len(seen - set(done))
    figures["duplicated"] += len(done) - len({p for _, p in done})
    figures["stuck"] += sum(status == "running" for _, status, _ in state["trials"])
    figures["miscounted"] += sum(s in ("completed", "failed") for _, s, _ in state["trials"]) != BUDGET + kills
    if process.returncode != 0:
        print(f"worker: the run exited {process.returncode}: {err.strip().splitlines()[-1:]}", flush=True)
    return figures


def one_line_or_success(process: subprocess.CompletedProcess | subprocess.Popen, err: str) -> bool:
    """A command's answer is clean: it succeeded, or it said one line and exited with code 2 (never a traceback)."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return "Traceback" not in err and (process.returncode == 0 or (process.returncode == 2 and len(lines) == 1))


def ended_exactly(db: Path, name: str, budget: int) -> bool:
    """The study ended with its budget exactly, nothing duplicated and nothing left running."""
    state = store_state(db, name)
    done = completed(state)
    return (sum(s in ("completed", "failed") for _, s, _ in state["trials"]) == budget
            and len(done) == len({p for _, p in done}) and not any(s == "running" for _, s, _ in state["trials"]))


def concurrency() -> dict[str, bool]:
    """Each case: processes at once on one SQLite file; passed when every process answered cleanly and the store
    holds exactly what it should."""
    folder = Path(tempfile.mkdtemp(prefix="rt-battery-concurrency-"))
    (folder / "battery.toml").write_text(STUDY)
    (folder / "other.toml").write_text(STUDY.replace('name = "battery"', 'name = "other"'))
    results = {}

    def fresh(case: str) -> tuple[Path, list[str]]:
        db = folder / f"{case}.db"
        return db, ["--db", str(db), "--device", "cpu", "--log-file", str(folder / f"{case}.log")]

    db, base = fresh("two-runs")  # one study run twice at once: one refuses (or waits), the study ends once
    first, second = (launch([ROBUST_TUNE, "run", "battery.toml", *base], folder) for _ in range(2))
    answers = [(p, p.communicate()[1]) for p in (first, second)]
    results["two runs of one study"] = all(one_line_or_success(p, e) for p, e in answers) \
        and ended_exactly(db, "battery", BUDGET)

    db, base = fresh("run-evaluate")  # a study's second run while evaluate re-trains its best
    subprocess.run([ROBUST_TUNE, "run", "battery.toml", *base, "--trials", "4"], cwd=folder, capture_output=True)
    run = launch([ROBUST_TUNE, "run", "battery.toml", *base], folder)
    time.sleep(4.0)
    evaluate = subprocess.run([ROBUST_TUNE, "evaluate", "battery", "--seeds", "2", "--against", "erm", *base],
                              cwd=folder, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    run_err = run.communicate()[1]
    runs = store_state(db)["runs"]
    results["run and evaluate of one study"] = one_line_or_success(run, run_err) \
        and one_line_or_success(evaluate, evaluate.stderr) and ended_exactly(db, "battery", BUDGET) \
        and len(runs) == len(set(runs))

    db, base = fresh("delete")  # a delete while a run holds the study: refused, the study intact
    run = launch([ROBUST_TUNE, "run", "battery.toml", *base], folder)
    time.sleep(6.0)
    delete = subprocess.run([ROBUST_TUNE, "studies", "delete", "battery", "--yes", "--db", str(db)],
                            cwd=folder, capture_output=True, text=True)
    run_err = run.communicate()[1]
    results["delete during a run"] = delete.returncode == 2 and one_line_or_success(delete, delete.stderr) \
        and one_line_or_success(run, run_err) and ended_exactly(db, "battery", BUDGET)

    db, base = fresh("reads")  # reads while a run writes: each answers cleanly
    run = launch([ROBUST_TUNE, "run", "battery.toml", *base], folder)
    reads_clean = True
    while run.poll() is None:
        for read in (["report", "battery", "--trials"], ["studies"], ["best", "battery"]):
            answer = subprocess.run([ROBUST_TUNE, *read, "--db", str(db)], cwd=folder, capture_output=True, text=True)
            reads_clean &= one_line_or_success(answer, answer.stderr)
    run_err = run.communicate()[1]
    results["reads while a run writes"] = reads_clean and one_line_or_success(run, run_err) \
        and ended_exactly(db, "battery", BUDGET)

    db, base = fresh("two-studies")  # two studies at once into one SQLite file: both end
    both = [launch([ROBUST_TUNE, "run", f"{name}.toml", *base], folder) for name in ("battery", "other")]
    answers = [(p, p.communicate()[1]) for p in both]
    results["two studies into one SQLite file"] = all(p.returncode == 0 and "Traceback" not in e for p, e in answers) \
        and ended_exactly(db, "battery", BUDGET) and ended_exactly(db, "other", BUDGET)
    return results


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
    results["worker"] = worker_battery(max(1, args.kills // 2), rng)
    print(f"worker: {results['worker']}", flush=True)
    results["compare"] = campaign_battery(args.kills, rng)
    print(f"compare: {results['compare']}", flush=True)
    cases = concurrency()
    print("\n| command | kills landed | lost | duplicated | stuck | budget miscounted | resume failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    names = {"run": "`run`", "run-workers": "`run --workers 2` (the run process)",
             "evaluate": f"`evaluate --seeds {SEEDS} --against erm,ls,cb`",
             "worker": "`run --workers 2` (one Dask worker)", "compare": "`compare` (3 methods)"}
    for kind, f in results.items():
        print(f"| {names[kind]} | {f['kills']} | {f['lost']} | {f['duplicated']} | {f['stuck']} | "
              f"{f['miscounted']} | {f['failed_resumes']} |")
    print("\n| concurrency case | passed |")
    print("|---|---|")
    for case, passed in cases.items():
        print(f"| {case} | {'yes' if passed else 'NO'} |")
    print(f"\n{sum(cases.values())} of {len(cases)} concurrency cases passed; {time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.write_text(json.dumps({"kills": results, "concurrency": cases}, indent=2))


if __name__ == "__main__":
    main()
