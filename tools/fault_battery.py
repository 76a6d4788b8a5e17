"""The fault battery: SIGKILL `robust-tune run --workers 1`, `run` on its default workers (the run process), one Dask
worker of `run --workers 2`,
`evaluate` and `compare` at random moments, resume each time, and count what a kill cost the store: completed
trials or runs lost, duplicated, left running (stuck) after the resume, and budgets miscounted. Then the
concurrency cases: two runs of one study at once, run and evaluate of one study at once, a delete during a run,
reads while a run writes, and two studies run at once into one SQLite file.

    python tools/fault_battery.py --kills 10 --seed 0

With `--disk N` it runs the disk battery instead: N faults of the file or its disk under `run` (garbled at the
header, the middle or the end; made read-only before or during the run, its folder during it; a small tmpfs that
fills), each answered in one line (exit code 1), a garbled file unchanged, and the resume once the fault is undone
ending with the budget exact and Ax agreeing; the cases that need root (chattr, mount) are skipped elsewhere.

With `--pauses N` it runs the pause battery instead: N SIGSTOPs of `run --workers 1`, `run` and `compare` (at a
random moment of training, inside a write transaction, or just after a trial ended, while Ax tells and proposes),
held past the lock's stale time while a second process of the same command starts, the first continued at a
random moment (while the second runs, or after it ended); per case, who finished, the exit codes, tracebacks
(must be 0), duplicated parameters (must be 0), whether the budget is exact and whether Ax agrees with the table.

Each command gets a fresh folder with a tiny study of the digits (5 epochs, 8 trials, 3 of them Sobol); after
every kill the store is read and compared with what it held before; at the end the command runs to its end
without a kill and the totals are checked. Prints one table and how long it took; `--out` writes the figures
as JSON. Runs the installed `robust-tune` beside the Python that runs this script.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
replicates = 1  # one search each: the budgets below count one study per method
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
max_seeds = {CAMPAIGN_SEEDS}
"""


def store_state(db: Path | str, name: str = "battery") -> dict[str, list[tuple]]:
    """What the store holds of a study (`db`: a SQLite file or a server's URL): its trials (index, status,
    parameters) and evaluation runs."""
    from pipeline.errors import UserError
    from pipeline.store import Store

    if isinstance(db, Path) and not db.exists():
        return {"trials": [], "runs": []}
    try:
        store = Store(str(db), create=False)
    except UserError:  # no study was ever stored there
        return {"trials": [], "runs": []}
    study = store.study(name)
    if study is None:
        return {"trials": [], "runs": []}
    trials = [(t.trial_index, t.status, json.dumps(t.parameters, sort_keys=True)) for t in store.trials(study.id)]
    runs = [(r.variant, r.seed) for r in store.evaluations(study.id)]
    return {"trials": trials, "runs": runs}


def completed(state: dict[str, list[tuple]]) -> list[tuple]:
    return [(index, parameters) for index, status, parameters in state["trials"] if status == "completed"]


def launch(command: list[str], folder: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "ROBUST_TUNE_WORKERS": "", **(env or {})})


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
    if kind == "run":
        run += ["--workers", "1"]  # one process; "run-workers" is the default, a worker per core
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
    """A command's answer is clean: it succeeded, or it said one line and exited with code 2 (bad input, a lock
    held) or 1 (a database kept busy, a fault of its file or disk), never a traceback."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return "Traceback" not in err and (process.returncode == 0 or (process.returncode in (1, 2) and len(lines) == 1))


def ended_exactly(db: Path | str, name: str, budget: int) -> bool:
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
        for read in (["report", "battery", "--all-trials"], ["studies"], ["best", "battery"]):
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


PAUSE_STALE = 4  # the lock's stale time in the pause battery, in seconds
PAUSE_BUDGET = 3
PAUSE_STUDY = STUDY.replace("epochs = 5", "epochs = 2").replace(f"trials = {BUDGET}", f"trials = {PAUSE_BUDGET}") \
    .replace("initial = 3", "initial = 2")
PAUSE_CAMPAIGN = CAMPAIGN.replace("epochs = 5", "epochs = 2").replace(f"trials = {CAMPAIGN_TRIALS}", "trials = 2") \
    .replace(f"seeds = {CAMPAIGN_SEEDS}", "seeds = 2")
PAUSE_KINDS = ("run", "run-workers", "compare")


def pause_case(kind: str, rng: random.Random) -> dict:
    """One pause: a fresh tiny study (or campaign), its command SIGSTOPped (its whole process group, as Ctrl-Z
    does) at a random moment, held past the stale time while the same command starts again, continued at a random
    moment; then, when the study is not done, the command once more to its end. What each process answered and
    what the store holds after."""
    from pipeline.faults import readable, write_locked

    folder = Path(tempfile.mkdtemp(prefix=f"rt-pause-{kind}-"))
    db = folder / "battery.db"
    if kind == "compare":
        (folder / "battery.toml").write_text(PAUSE_CAMPAIGN)
        command = [ROBUST_TUNE, "compare", "battery.toml"]
        names = [f"battery.{method}" for method in CAMPAIGN_METHODS]
    else:
        (folder / "battery.toml").write_text(PAUSE_STUDY)
        command = [ROBUST_TUNE, "run", "battery.toml"] + (["--workers", "1"] if kind == "run" else [])
        names = ["battery"]
    command += ["--db", str(db), "--device", "cpu", "--log-file", str(folder / "log.txt")]
    env = {"ROBUST_TUNE_LOCK_STALE_SECONDS": str(PAUSE_STALE)}
    where = rng.choice(("training", "write", "after a trial"))
    case = {"kind": kind, "where": where, "paused": False}
    first = launch(command, folder, env)
    latest = 9.0 if kind == "run" else 14.0  # start-up takes about 3 s; the tiny study ends soon after
    if where in ("training", "write"):  # a write: the first after a random moment, not always the database's creation
        time.sleep(rng.uniform(3.0, latest))
    elif where == "after a trial":  # the trial's record, Ax told, the next proposal (Ax's generation)
        while first.poll() is None and not trials_completed(db):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.5))
    while first.poll() is None:
        if where == "write" and not (db.exists() and write_locked(db)):
            time.sleep(0.005)
            continue
        os.killpg(first.pid, signal.SIGSTOP)
        time.sleep(0.2)
        if where != "write" or (write_locked(db) and readable(db)):  # inside a write, and not in its commit
            case["paused"] = True
            break
        os.killpg(first.pid, signal.SIGCONT)  # that write had ended: wait for another one
    if case["paused"]:
        case["in_write"] = db.exists() and write_locked(db)
        time.sleep(PAUSE_STALE + 1.0)  # past the stale time
        second = launch(command, folder, env)
        continued = rng.choice(("while the second runs", "after the second ended"))
        case["continued"] = continued
        if continued == "while the second runs":
            time.sleep(rng.uniform(0.0, 8.0))
            case["both_alive"] = second.poll() is None
            os.killpg(first.pid, signal.SIGCONT)
        answers = {"second": second.communicate()[1]}
        if continued == "after the second ended":
            os.killpg(first.pid, signal.SIGCONT)
        answers["first"] = first.communicate()[1]
        case.update(first_exit=first.returncode, second_exit=second.returncode)
    else:  # it ended before a pause could land: not counted
        answers = {"first": first.communicate()[1]}
        case["first_exit"] = first.returncode
    done = all(ended_exactly(db, name, PAUSE_BUDGET if kind != "compare" else 2) for name in names)
    case["finished_by"] = ("first" if case.get("first_exit") == 0 else "second") if done else "the resume"
    if not done:
        resume = launch(command, folder, {})
        answers["resume"] = resume.communicate()[1]
        case["resume_exit"] = resume.returncode
    for who, err in answers.items():  # kept beside the case's database, to read what a traceback said
        (folder / f"stderr-{who}.txt").write_text(err)
    case["folder"] = str(folder)
    case["tracebacks"] = sum("Traceback" in err for err in answers.values())
    case["last_lines"] = {who: (err.strip().splitlines() or [""])[-1][:300] for who, err in answers.items()
                          if "error" in err or "Traceback" in err}
    states = [store_state(db, name) for name in names]
    case["duplicates"] = sum(len(completed(s)) - len({p for _, p in completed(s)}) + len(s["runs"])
                             - len(set(s["runs"])) for s in states)
    case["budget_exact"] = all(ended_exactly(db, name, PAUSE_BUDGET if kind != "compare" else 2) for name in names)
    case["ax_agrees"] = all(ax_agrees(db, name) for name in names)
    return case


def trials_completed(db: Path) -> int:
    """How many trials the database holds completed now; 0 while it cannot be read."""
    import sqlite3

    try:
        return sqlite3.connect(db, timeout=0).execute(
            "select count(*) from rt_trials where status = 'completed'").fetchone()[0]
    except sqlite3.Error:
        return 0


def ax_agrees(db: Path | str, name: str, log: Path | None = None) -> bool:
    """Ax's stored trials agree with the table: the same completed trials (index and parameters), and every trial
    of the table has Ax's parameters at its index. Ax's messages go to `log` (by default beside a SQLite file)."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(log or Path(db).with_name("battery-check.log"))
    from ax.storage.sqa_store.load import load_experiment
    from pipeline.search.ax import use_database
    from pipeline.store import Store

    use_database(Store(str(db), create=False).url)
    try:
        experiment = load_experiment(name)
    except Exception:  # noqa: BLE001  (no experiment: the study was never made)
        return False
    ax = {i: (t.status.name.lower(), json.dumps(dict(t.arm.parameters), sort_keys=True))
          for i, t in experiment.trials.items() if t.arm is not None}
    table = store_state(db, name)["trials"]
    return ({i for i, (s, _) in ax.items() if s == "completed"} == {i for i, s, _ in table if s == "completed"}
            and all(i in ax and ax[i][1] == json.dumps(json.loads(p), sort_keys=True) for i, _, p in table))


def pause_battery(pauses: int, rng: random.Random) -> list[dict]:
    """`pauses` pause cases that landed, spread over run, run --workers 2 and compare; a case whose command ended
    before the pause is drawn again."""
    cases: list[dict] = []
    for number in range(pauses):
        kind = PAUSE_KINDS[number % len(PAUSE_KINDS)]
        for _ in range(3):
            case = pause_case(kind, rng)
            print(json.dumps(case), flush=True)
            cases.append(case)
            if case["paused"]:
                break
    return cases


def pause_table(cases: list[dict]) -> None:
    """The pause battery's figures, one row per command."""
    print("\n| command paused | pauses | inside a write | both alive | finished by first / second / resume | "
          "exit codes (first, second) | tracebacks | duplicates | budgets exact | Ax agrees |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|")
    names = {"run": "`run --workers 1`", "run-workers": "`run` (a worker per core)",
             "compare": "`compare` (2 methods and ERM)"}
    for kind in PAUSE_KINDS:
        landed = [c for c in cases if c["kind"] == kind and c["paused"]]
        if not landed:
            continue
        by = collections.Counter(c["finished_by"] for c in landed)
        exits = collections.Counter((c["first_exit"], c["second_exit"]) for c in landed)
        print(f"| {names[kind]} | {len(landed)} | {sum(c['in_write'] for c in landed)} | "
              f"{sum(c.get('both_alive', False) for c in landed)} | "
              f"{by['first']} / {by['second']} / {by['the resume']} | "
              f"{', '.join(f'{a},{b}: {n}' for (a, b), n in sorted(exits.items()))} | "
              f"{sum(c['tracebacks'] for c in landed)} | {sum(c['duplicates'] for c in landed)} | "
              f"{sum(c['budget_exact'] for c in landed)} of {len(landed)} | "
              f"{sum(c['ax_agrees'] for c in landed)} of {len(landed)} |")


DISK_KINDS = ("garbled header", "garbled middle", "garbled end", "read-only file", "read-only file mid-run",
              "read-only folder mid-run", "full disk")


def answer_lines(err: str) -> list[str]:
    """The lines of a command's answer on stderr that are errors (its progress lines before them are not)."""
    return [line for line in err.strip().splitlines() if line.startswith("error")]


def disk_case(kind: str, rng: random.Random) -> dict:
    """One fault of the file or its disk under `run`: the answer (exit code 1, its last line naming the database, no
    traceback), the file's bytes where it was damaged (unchanged), and, once the fault is undone, the resume (the
    budget exact, Ax agreeing with the table). Skipped where it needs root (chattr, a tmpfs mount) and cannot."""
    folder = Path(tempfile.mkdtemp(prefix="rt-battery-disk-"))
    (folder / "battery.toml").write_text(PAUSE_STUDY)
    disk = folder / "disk"
    disk.mkdir()
    db = disk / "battery.db"
    base = ["--db", str(db), "--device", "cpu", "--log-file", str(folder / "log.txt")]
    run = [ROBUST_TUNE, "run", "battery.toml", *base]
    subprocess.run([*run, "--trials", "1"], cwd=folder, capture_output=True, check=True)
    case: dict = {"kind": kind, "skipped": None, "exit": None, "lines": 0, "tracebacks": 0, "names_file": False,
                  "unchanged": None, "budget_exact": None, "ax_agrees": None}
    undo: list[str] = []
    if kind.startswith("garbled"):
        size, where = db.stat().st_size, kind.split()[1]
        offset = {"header": 16, "middle": rng.randrange(size // 4, size - 8192), "end": size - 8192}[where]
        with open(db, "r+b") as file:
            file.seek(offset)
            file.write(rng.randbytes(84 if where == "header" else 8192))
        before = db.read_bytes()
    target = db if "file" in kind else disk
    if "read-only" in kind:
        if os.geteuid() != 0 or subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode:
            return {**case, "skipped": "chattr +i needs root"}
        subprocess.run(["chattr", "-i", str(target)], check=True)
        undo = ["chattr", "-i", str(target)]
    process = launch(run, folder)
    if kind == "read-only file":
        subprocess.run(["chattr", "+i", str(target)], check=True)
    elif "mid-run" in kind:
        while trials_completed(db) < 2 and process.poll() is None:
            time.sleep(0.1)
        subprocess.run(["chattr", "+i", str(target)], check=True)
    _, err = process.communicate()
    lines = answer_lines(err)
    case.update(exit=process.returncode, lines=len(lines), tracebacks=int("Traceback" in err),
                names_file=bool(lines) and str(db) in lines[-1])
    if kind.startswith("garbled"):
        case["unchanged"] = db.read_bytes() == before
        return case
    if undo:
        subprocess.run(undo, check=True)
    resumed = subprocess.run(run, cwd=folder, capture_output=True, text=True)
    case.update(budget_exact=resumed.returncode == 0 and ended_exactly(db, "battery", PAUSE_BUDGET),
                ax_agrees=ax_agrees(db, "battery"))
    return case


def full_disk_case(rng: random.Random) -> dict:
    """`run` on a 400 KB tmpfs holding the study's database, filled to a random few KB left; then room again."""
    folder = Path(tempfile.mkdtemp(prefix="rt-battery-full-"))
    (folder / "battery.toml").write_text(PAUSE_STUDY)
    disk = folder / "disk"
    disk.mkdir()
    case: dict = {"kind": "full disk", "skipped": None, "exit": None, "lines": 0, "tracebacks": 0,
                  "names_file": False, "unchanged": None, "budget_exact": None, "ax_agrees": None}
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)],
                                           capture_output=True).returncode:
        return {**case, "skipped": "a tmpfs mount needs root"}
    try:
        db, filler = disk / "battery.db", disk / "filler"
        run = [ROBUST_TUNE, "run", "battery.toml", "--db", str(db), "--device", "cpu", "--log-file",
               str(disk / "log.txt")]
        subprocess.run([*run, "--trials", "1"], cwd=folder, capture_output=True, check=True)
        filler.write_bytes(bytes(max(0, shutil.disk_usage(disk).free - rng.randrange(0, 48) * 1024)))
        process = launch(run, folder)
        _, err = process.communicate()
        lines = answer_lines(err)
        case.update(exit=process.returncode, lines=len(lines), tracebacks=int("Traceback" in err),
                    names_file=bool(lines) and str(db) in lines[-1])
        filler.unlink()
        resumed = subprocess.run(run, cwd=folder, capture_output=True, text=True)
        case.update(budget_exact=resumed.returncode == 0 and ended_exactly(db, "battery", PAUSE_BUDGET),
                    ax_agrees=ax_agrees(db, "battery"))
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)  # this process may still hold the file
    return case


def disk_table(cases: list[dict]) -> None:
    """The disk battery's figures, one row per kind of fault."""
    print("\n| fault under `run` | cases | skipped | exit 1 | lines (most) | tracebacks | names the database | "
          "file unchanged | budgets exact after | Ax agrees |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in DISK_KINDS:
        of = [c for c in cases if c["kind"] == kind]
        ran = [c for c in of if not c["skipped"]]
        if not of:
            continue

        def count(key: str) -> str:
            known = [c[key] for c in ran if c[key] is not None]
            return f"{sum(known)} of {len(known)}" if known else "-"
        print(f"| {kind} | {len(of)} | {len(of) - len(ran)} | {sum(c['exit'] == 1 for c in ran)} | "
              f"{max((c['lines'] for c in ran), default=0)} | {sum(c['tracebacks'] for c in ran)} | "
              f"{count('names_file')} | {count('unchanged')} | {count('budget_exact')} | {count('ax_agrees')} |")


def disk_battery(cases: int, rng: random.Random) -> list[dict]:
    """`cases` faults of the file or disk, spread over DISK_KINDS."""
    done = []
    for number in range(cases):
        kind = DISK_KINDS[number % len(DISK_KINDS)]
        case = full_disk_case(rng) if kind == "full disk" else disk_case(kind, rng)
        print(json.dumps(case), flush=True)
        done.append(case)
    return done


SHARED_BUDGET = 6
SHARED_STUDY = STUDY.replace(f"trials = {BUDGET}", f"trials = {SHARED_BUDGET}")
SHARED_KINDS = ("restart", "down", "two machines", "workers")


def throwaway_server() -> Any:
    """The throwaway PostgreSQL server the tests start (tests/conftest.py), durable as a real one: a context
    manager giving it, stopped and removed at the end."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import postgres_binaries, throwaway_postgres

    if postgres_binaries() is None:
        raise SystemExit("PostgreSQL's server programs (initdb, pg_ctl) are not installed (Debian: apt-get install "
                         "postgresql)")
    return throwaway_postgres(durable=True)


def new_shared_database(server: Any) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import new_database

    return new_database(server)


def query(url: str, sql: str) -> list[tuple]:
    """Rows of `sql` on the server's database; none while it cannot be read (down, the tables not made yet)."""
    import sqlalchemy as sa

    from pipeline.store import database_url

    engine = sa.create_engine(database_url(url))
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(sa.text(sql))]
    except sa.exc.SQLAlchemyError:
        return []
    finally:
        engine.dispose()


def completed_on(url: str) -> int:
    found = query(url, "select count(*) from rt_trials where status = 'completed'")
    return found[0][0] if found else 0


def answer_of(process: subprocess.Popen, err: str) -> dict:
    """What a command answered: its exit code, tracebacks, error lines (the last one kept) and reconnection lines."""
    errors = answer_lines(err)
    return {"exit": process.returncode, "tracebacks": err.count("Traceback"), "error_lines": len(errors),
            "last_error": errors[-1][:300] if errors else "", "reconnected": err.count("reconnected after")}


def restart_case(server: Any, kind: str, rng: random.Random) -> dict:
    """`run` (--workers 1, or a worker per core) on the server, which restarts (`pg_ctl restart -m fast`) twice, each
    at a random moment of training or just after a trial ended (its record, Ax told, the next proposal)."""
    folder = Path(tempfile.mkdtemp(prefix="rt-shared-restart-"))
    (folder / "battery.toml").write_text(SHARED_STUDY)
    url = new_shared_database(server)
    command = [ROBUST_TUNE, "run", "battery.toml", "--db", url, "--device", "cpu", "--log-file", "log.txt"]
    process = launch(command + (["--workers", "1"] if kind == "run" else []), folder)
    case: dict = {"kind": kind, "restarts": [], "seconds": []}
    for target in sorted(rng.sample(range(1, SHARED_BUDGET), 2)):  # after the target-th trial ends
        where = rng.choice(("training", "after a trial"))
        while process.poll() is None and completed_on(url) < target:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5) if where == "after a trial" else rng.uniform(1.0, 6.0))
        if process.poll() is not None:
            break
        tick = time.perf_counter()
        server.restart()
        case["restarts"].append(where)
        case["seconds"].append(round(time.perf_counter() - tick, 1))
    _, err = process.communicate()
    (folder / "stderr.txt").write_text(err)
    case.update(answer_of(process, err), folder=str(folder))
    case.update(budget_exact=ended_exactly(url, "battery", SHARED_BUDGET),
                ax_agrees=ax_agrees(url, "battery", folder / "check.log"))
    return case


def down_case(server: Any, rng: random.Random) -> dict:
    """`run` on the server, stopped as a crash would at a random moment after the first trial and kept down past
    ROBUST_TUNE_RECONNECT_SECONDS (5 s here): one line, exit code 1, naming the server and the resume; then the
    server back and the run resumed: nothing lost, the budget exact, Ax agreeing."""
    folder = Path(tempfile.mkdtemp(prefix="rt-shared-down-"))
    (folder / "battery.toml").write_text(SHARED_STUDY)
    url = new_shared_database(server)
    command = [ROBUST_TUNE, "run", "battery.toml", "--db", url, "--device", "cpu", "--log-file", "log.txt"]
    process = launch(command, folder, {"ROBUST_TUNE_RECONNECT_SECONDS": "5"})
    while process.poll() is None and completed_on(url) < 1:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 6.0))
    before = set(completed(store_state(url)))
    server.stop()
    tick = time.perf_counter()
    _, err = process.communicate()
    case: dict = {"kind": "down", "stopped_after": round(time.perf_counter() - tick, 1)}
    case.update(answer_of(process, err))
    last = (answer_lines(err) or [""])[-1]
    case["names_server"] = f"127.0.0.1:{server.port}" in last and "resume with" in last
    server.start()
    resumed = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "ROBUST_TUNE_WORKERS": ""})
    (folder / "stderr.txt").write_text(err + "\n--- resume ---\n" + resumed.stderr)
    case.update(folder=str(folder), resume_exit=resumed.returncode,
                lost=len(before - set(completed(store_state(url)))),
                budget_exact=ended_exactly(url, "battery", SHARED_BUDGET),
                ax_agrees=ax_agrees(url, "battery", folder / "check.log"))
    return case


def writing(url: str) -> bool:
    """Whether another connection to the database is inside a transaction that has written (holds row locks)."""
    return bool(query(url, "select 1 from pg_stat_activity where datname = current_database() and "
                           "pid <> pg_backend_pid() and backend_xid is not null"))


def two_machines_case(server: Any, kind: str, rng: random.Random) -> dict:
    """Two processes of `run` or `compare` from two folders (two machines) on one database: the first SIGSTOPped
    (its process group, as Ctrl-Z does) at a random moment of training, inside a write transaction or just after a
    trial ended, held past the lock's stale time while the second starts, continued at a random moment; as the
    SQLite pause battery, on the server."""
    root = Path(tempfile.mkdtemp(prefix=f"rt-shared-two-{kind}-"))
    url = new_shared_database(server)
    folders = [root / "a", root / "b"]
    for folder in folders:
        folder.mkdir()
        (folder / "battery.toml").write_text(PAUSE_CAMPAIGN if kind == "compare" else PAUSE_STUDY)
    names = [f"battery.{method}" for method in CAMPAIGN_METHODS] if kind == "compare" else ["battery"]
    budget = 2 if kind == "compare" else PAUSE_BUDGET
    command = [ROBUST_TUNE, kind, "battery.toml", "--db", url, "--device", "cpu", "--log-file", "log.txt"]
    env = {"ROBUST_TUNE_LOCK_STALE_SECONDS": str(PAUSE_STALE)}
    where = rng.choice(("training", "write", "after a trial"))
    case: dict = {"kind": "two machines", "command": kind, "where": where, "paused": False}
    first = launch(command, folders[0], env)
    if where in ("training", "write"):
        time.sleep(rng.uniform(3.0, 9.0 if kind == "run" else 14.0))
    else:
        while first.poll() is None and completed_on(url) < 1:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.5))
    deadline = time.monotonic() + 60
    while first.poll() is None and time.monotonic() < deadline:
        if where == "write" and not writing(url):
            time.sleep(0.005)
            continue
        os.killpg(first.pid, signal.SIGSTOP)
        time.sleep(0.2)
        if where != "write" or writing(url):
            case["paused"] = True
            break
        os.killpg(first.pid, signal.SIGCONT)
    answers = {}
    if case["paused"]:
        case["in_write"] = writing(url)
        time.sleep(PAUSE_STALE + 1.0)
        second = launch(command, folders[1], env)
        continued = rng.choice(("while the second runs", "after the second ended"))
        case["continued"] = continued
        if continued == "while the second runs":
            time.sleep(rng.uniform(0.0, 8.0))
            case["both_alive"] = second.poll() is None
            os.killpg(first.pid, signal.SIGCONT)
        answers["second"] = second.communicate()[1]
        if continued == "after the second ended":
            os.killpg(first.pid, signal.SIGCONT)
        answers["first"] = first.communicate()[1]
        case.update(first_exit=first.returncode, second_exit=second.returncode)
    else:
        answers["first"] = first.communicate()[1]
        case["first_exit"] = first.returncode
    done = all(ended_exactly(url, name, budget) for name in names)
    case["finished_by"] = ("first" if case.get("first_exit") == 0 else "second") if done else "the resume"
    if not done:
        resume = launch(command, folders[0], {})
        answers["resume"] = resume.communicate()[1]
        case["resume_exit"] = resume.returncode
    for who, err in answers.items():
        (root / f"stderr-{who}.txt").write_text(err)
    case["folder"] = str(root)
    case["tracebacks"] = sum("Traceback" in err for err in answers.values())
    case["last_lines"] = {who: (err.strip().splitlines() or [""])[-1][:300] for who, err in answers.items()
                          if "error" in err or "Traceback" in err}
    states = [store_state(url, name) for name in names]
    case["duplicates"] = sum(len(completed(s)) - len({p for _, p in completed(s)}) + len(s["runs"])
                             - len(set(s["runs"])) for s in states)
    case["budget_exact"] = all(ended_exactly(url, name, budget) for name in names)
    case["ax_agrees"] = all(ax_agrees(url, name, root / "check.log") for name in names)
    return case


def dask_process(name: str, *args: str, folder: Path) -> subprocess.Popen:
    """`dask ARGS`: a scheduler (allowing no failures, as the guide sets one up) or a worker (under its nanny) in its
    own process group, its output kept in `folder` as NAME.log."""
    dask = str(Path(sys.executable).with_name("dask"))
    log = open(folder / f"{name}.log", "w")
    return subprocess.Popen([dask, *args], cwd=folder, stdout=log, stderr=log, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1",
                                 "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})


def workers_case(server: Any, rng: random.Random) -> dict:
    """`run --scheduler` on a cluster of one worker, which a second joins at a random moment; later the first is
    stopped cleanly (SIGTERM, as Ctrl-C or a cluster manager does) while it trains: the joined worker gets trials,
    the stopped one hands its trial back (no interrupted row), the budget ends exactly."""
    folder = Path(tempfile.mkdtemp(prefix="rt-shared-workers-"))
    (folder / "battery.toml").write_text(SHARED_STUDY)
    url = new_shared_database(server)
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import free_port

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = dask_process("scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                             folder=folder)
    time.sleep(3.0)
    workers = {"w0": dask_process("w0", "worker", address, "--nthreads", "1", "--no-dashboard", "--name", "w0",
                                  folder=folder)}
    time.sleep(3.0)
    command = [ROBUST_TUNE, "run", "battery.toml", "--db", url, "--device", "cpu", "--log-file", "log.txt",
               "--scheduler", address]
    process = launch(command, folder)
    try:
        time.sleep(rng.uniform(5.0, 15.0))
        workers["w1"] = dask_process("w1", "worker", address, "--nthreads", "1", "--no-dashboard", "--name", "w1",
                                     folder=folder)
        while process.poll() is None and completed_on(url) < SHARED_BUDGET // 2:
            time.sleep(0.1)
        time.sleep(rng.uniform(1.0, 4.0))  # in a trial of the second half
        workers["w0"].send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=600)
    finally:
        for dask_one in [*workers.values(), scheduler]:
            dask_one.send_signal(signal.SIGTERM)
        for dask_one in [*workers.values(), scheduler]:
            try:
                dask_one.wait(timeout=20)
            except subprocess.TimeoutExpired:
                dask_one.kill()
    (folder / "stderr.txt").write_text(err)
    case: dict = {"kind": "workers", "folder": str(folder)}
    case.update(answer_of(process, err))
    case.update(on_joined=err.count("on worker w1 completed"),
                handed_back=err.count("left the cluster; it trains again"),
                interrupted=len(query(url, "select 1 from rt_trials where status = 'interrupted'")),
                budget_exact=ended_exactly(url, "battery", SHARED_BUDGET),
                ax_agrees=ax_agrees(url, "battery", folder / "check.log"))
    return case


def shared_battery(cases: int, rng: random.Random) -> list[dict]:
    """`cases` cases of each kind on one throwaway server: restarts (half on --workers 1, half on a worker per
    core), a server that stays down, two machines (run and compare in turn) with pauses, workers that come and
    go (half as many)."""
    done = []
    with throwaway_server() as server:
        for number in range(cases):
            for case in (restart_case(server, ("run", "run-workers")[number % 2], rng), down_case(server, rng),
                         two_machines_case(server, ("run", "compare")[number % 2], rng)):
                print(json.dumps(case), flush=True)
                done.append(case)
            if number % 2 == 0:
                case = workers_case(server, rng)
                print(json.dumps(case), flush=True)
                done.append(case)
    return done


def shared_table(cases: list[dict]) -> None:
    """The shared set-up's figures, one row per kind of case."""
    print("\n| case | cases | faults | exit codes | tracebacks | reconnection lines | lost | duplicates | "
          "interrupted rows | budgets exact | Ax agrees |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    names = {"run": "server restarts, `run --workers 1`", "run-workers": "server restarts, `run` (a worker per core)",
             "down": "server down past the wait", "two machines": "two machines, one database, a pause",
             "workers": "a worker joins, one leaves cleanly"}
    for kind, name in names.items():
        of = [c for c in cases if c["kind"] == kind]
        if not of:
            continue
        if kind == "two machines":
            of = [c for c in of if c["paused"]]
            exits = collections.Counter((c["first_exit"], c["second_exit"]) for c in of)
            exit_text = "; ".join(f"{a},{b}: {n}" for (a, b), n in sorted(exits.items()))
        else:
            exit_text = "; ".join(f"{code}: {n}" for code, n in sorted(collections.Counter(c["exit"] for c in of)
                                                                       .items()))
        faults = sum(len(c["restarts"]) for c in of) if "restart" in name else len(of)
        print(f"| {name} | {len(of)} | {faults} | {exit_text} | {sum(c['tracebacks'] for c in of)} | "
              f"{sum(c.get('reconnected', 0) for c in of)} | {sum(c.get('lost', 0) for c in of)} | "
              f"{sum(c.get('duplicates', 0) for c in of)} | {sum(c.get('interrupted', 0) for c in of)} | "
              f"{sum(c['budget_exact'] for c in of)} of {len(of)} | {sum(c['ax_agrees'] for c in of)} of {len(of)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="random kills per command")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pauses", type=int, default=0, help="run the pause battery instead, with this many pauses")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--disk", type=int, default=0,
                        help="run the disk battery instead: this many garbled, read-only and full-disk cases")
    parser.add_argument("--shared", type=int, default=0,
                        help="run the shared set-up battery instead, on a throwaway PostgreSQL server: this many "
                             "cases of server restarts, a server down, two machines with pauses (and half as many "
                             "of workers that join and leave)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    if args.shared:
        cases = shared_battery(args.shared, rng)
        shared_table(cases)
        print(f"\n{time.perf_counter() - start:.0f} s in all")
        if args.out:
            args.out.write_text(json.dumps({"shared": cases}, indent=2))
        return
    if args.disk:
        cases = disk_battery(args.disk, rng)
        disk_table(cases)
        print(f"\n{time.perf_counter() - start:.0f} s in all")
        if args.out:
            args.out.write_text(json.dumps({"disk": cases}, indent=2))
        return
    if args.pauses:
        cases = pause_battery(args.pauses, rng)
        pause_table(cases)
        landed = [c for c in cases if c["paused"]]
        print(f"\n{len(landed)} pauses landed ({len(cases) - len(landed)} commands ended first); "
              f"{time.perf_counter() - start:.0f} s in all")
        if args.out:
            args.out.write_text(json.dumps({"pauses": cases}, indent=2))
        return
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
    names = {"run": "`run --workers 1`", "run-workers": "`run` on a worker per core (the run process)",
             "evaluate": f"`evaluate --seeds {SEEDS} --against erm,ls,cb`",
             "worker": "`run --workers 2` (one Dask worker)", "compare": "`compare` (3 methods)"}
    for kind, f in results.items():
        print(f"| {names[kind]} | {f['kills']} | {f['lost']} | {f['duplicated']} | {f['stuck']} | "
              f"{f['miscounted']} | {f['failed_resumes']} |")
    print("\n| concurrency case | passed |")
    print("|---|---|")
    for case, passed in cases.items():
        print(f"| {case} | {'yes' if passed else 'NO'} |")
    print(f"\n{sum(cases.values())} of {len(cases)} concurrency cases passed; "
          f"{time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.write_text(json.dumps({"kills": results, "concurrency": cases}, indent=2))


if __name__ == "__main__":
    main()
