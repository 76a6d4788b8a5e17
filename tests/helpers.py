"""Helpers the test modules share: study files, the command in a fresh process, database rows, stored
studies for the report tests. Test modules import these from here, never from each other."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.config import DataConfig, RunSettings
from pipeline.methods.declarations import PARTS
from pipeline.params import Range
from pipeline.store import LockLost, Store, study_locks
from pipeline.spec.study_config import Budget, StudyConfig, parse_study
from pipeline.training.result import EpochMetrics, RunResult, SplitMetrics

ROOT = Path(__file__).resolve().parents[1]  # the repository
DATA = ROOT / "tests" / "fixtures"  # databases and files written by earlier versions


TINY = """
name = "{name}"
seed = {seed}
[data]
name = "digits"
[method]
name = "{method}"
[params]
{params}
[budget]
trials = {trials}
initial = 2
max_failures = {max_failures}
"""


GILS = 'epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }'


def study_file(tmp_path: Path, name="tiny", method="gils", params=GILS, trials=3, seed=0, max_failures=3) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY.format(name=name, method=method, params=params, trials=trials, seed=seed,
                                max_failures=max_failures))
    return path


def run_result(metrics: dict[str, float], per_class: dict[str, dict[str, float]] | None = None,
               settings: dict | None = None, train_seconds: float = 1.0, epoch_train_loss: list[float] | None = None,
               epoch_val_accuracy: list[float] | None = None) -> RunResult:
    """A finished run's result as the trainer gives it, from its flat metrics (val_accuracy,
    test_worst_class_accuracy, ...) and each split's accuracy per class; each epoch its loss and validation
    accuracy, the run's other metrics."""
    def split(name: str, accuracy: float | None = None) -> SplitMetrics:
        return SplitMetrics(metrics.get(f"{name}_accuracy") if accuracy is None else accuracy,
                            metrics.get(f"{name}_balanced_accuracy"), metrics.get(f"{name}_worst_class_accuracy"),
                            dict((per_class or {}).get(name, {})), 0)

    epochs = tuple(EpochMetrics(i, loss, split("val", accuracy), split("test"))
                   for i, (loss, accuracy) in enumerate(zip(epoch_train_loss or [], epoch_val_accuracy or []), start=1))
    return RunResult(split("val"), split("test"), epochs, train_seconds, 0, RunSettings.from_dict(settings or {}))


def result(val, test, worst=0.5):
    return run_result({"val_accuracy": val, "test_accuracy": test, "test_worst_class_accuracy": worst},
                      {"val": {"a": val}, "test": {"a": test}}, train_seconds=1.5, epoch_train_loss=[1.0, 0.5],
                      epoch_val_accuracy=[val / 2, val])


def rare_class_run(accuracy: float, rare: float, method: str = "x", params: dict | None = None,
                   balanced: float | None = None) -> RunResult:
    """A re-training run's result on the digits' ten classes, class 3 at `rare` (as the trainer gives it)."""
    test = {str(c): accuracy for c in range(10)} | {"3": rare}
    return run_result({"test_accuracy": accuracy, "test_worst_class_accuracy": min(test.values()),
                       "test_balanced_accuracy": sum(test.values()) / 10 if balanced is None else balanced},
                      {"val": {}, "test": test}, {"method": method, "params": params or {}})


def add_study(store, name, method="gils", objective="val_accuracy", backbone="resnet18", runs=()):
    config = StudyConfig(name=name, data=DataConfig(name="digits"), backbone=backbone, weights="none", method=method,
                         objective=objective,
                         search={"alpha": Range(0.0, 0.5), "T": Range(1, 15), "eta": Range(1.5, 3.0)},
                         fixed={"epochs": 30, "gamma": 1e-3}, budget=Budget(trials=20))
    study = store.create_study(config)
    for index, (parameters, values) in enumerate(runs):
        row = store.start_trial(study.id, index, parameters, 0, 0.1)
        if values is None:
            store.fail_trial(row, "TrainingDiverged: training loss is nan")
        else:
            store.complete_trial(row, result(*values))
    return study


ROBUST_TUNE = str(Path(sys.executable).with_name("robust-tune"))


def in_process(cli, *args: str) -> subprocess.CompletedProcess:
    """`robust-tune ARGS` run by the `cli` fixture in this process, answered as `robust_tune` answers: for a command
    whose test is not about its process (its imports, signals, a terminal)."""
    code, out, err = cli(*args)
    return subprocess.CompletedProcess(["robust-tune", *args], code, out, err)


def robust_tune(*args: str, env: dict | None = None, cwd: Path | None = None, stdin: str | None = None,
                columns: int = 120, threads: int | None = None) -> subprocess.CompletedProcess:
    """The installed console script in a fresh process, on a terminal `columns` wide (stderr is a pipe, not a
    terminal), torch at `threads` threads where given."""
    own = {"COLUMNS": str(columns), **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    return subprocess.run([ROBUST_TUNE, *args], capture_output=True, text=True, input=stdin, cwd=cwd, timeout=600,
                          env={**os.environ, **own, **(env or {})})


FAST = GILS  # the cheapest GI-LS trial: one epoch, the ascent on the feature map


def start_run(path: Path, db: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`robust-tune run` in its own process (and process group), output captured."""
    return subprocess.Popen([ROBUST_TUNE, "run", str(path), "--db", str(db), "--device", "cpu",
                             "--log-file", str(db.with_suffix(".log")), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})}, preexec_fn=default_sigint)


def kill_orphans(process: subprocess.Popen) -> None:
    """SIGKILL what is left of a killed command's process group (its Dask workers), if anything is: a local
    cluster starts only with the first trial."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a child inherits an ignored SIGINT from its parent (the test
    process may have ignored it while it started Dask workers), and Python then keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def rows(db: Path, sql: str) -> list[tuple]:
    """Rows from the database file, or none while the tables do not exist yet."""
    try:
        return sqlite3.connect(db).execute(sql).fetchall() if db.exists() else []
    except sqlite3.OperationalError:
        return []


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes: whether a command left it as it was."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wait_for_running_trial(process: subprocess.Popen, db: Path) -> None:
    while not rows(db, "select 1 from rt_trials where status = 'running'"):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)


def ax_trials(study, db: Path) -> dict[int, tuple[str, dict]]:
    """Ax's stored trials: index -> (status, parameters)."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(db.with_suffix(".log"))
    from pipeline.search.ax import Searcher

    trials = Searcher(study, Store(str(db)).url).client._experiment.trials
    return {i: (trial.status.name.lower(), trial.arm and dict(trial.arm.parameters)) for i, trial in trials.items()}


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def wait_until_stale(db: Path, seconds: float) -> None:
    """Wait until the study's lock has not been refreshed for `seconds` (its holder is paused)."""
    while (now() - dt.datetime.fromisoformat(rows(db, "select heartbeat_at from rt_study_locks")[0][0])
           ).total_seconds() <= seconds:
        time.sleep(0.1)


def unwrapped(text: str) -> str:
    """Progress output with each wrapped event joined back into one line: print_progress wraps a line to the
    terminal (or 80 columns on a pipe) and hangs its further lines two spaces in."""
    lines: list[str] = []
    for line in text.splitlines():
        if lines and line.startswith("  ") and lines[-1].strip():
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines)


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


STUDIES = ROOT / "studies"


def is_campaign(path: Path) -> bool:
    """A campaign file (`robust-tune compare`) lists methods; a study file names one."""
    return "methods" in tomllib.loads(path.read_text())


STUDY_FILES = [p for p in sorted(STUDIES.rglob("*.toml")) if not is_campaign(p)]


CAMPAIGN_FILES = [p for p in sorted(STUDIES.rglob("*.toml")) if is_campaign(p)]


def stored_before_rare_kept(campaign):
    """`campaign` as one stored before data.rare_kept existed settles it: every study of every task keeping the first
    rare-class examples (their stored identities name no rare_kept), not widening its ranges (nor widen) and keeping
    the defaults of then (lr_backbone 1e-3 from scratch)."""
    studies = {method: {"data": {}, "fixed": {"lr_backbone": 1e-3}} for method in campaign.methods}
    stored = {"studies": studies, "tasks": {t: {"studies": studies} for t in campaign.tasks}}
    return campaign.settle_rare_kept(stored).settle_widen(stored).settle_defaults(stored)


def stored(store: Store, name: str = "held"):
    return store.create_study(parse_study({"name": name, "method": {"name": "ls"}}, f"{name}.toml"))


def one_epoch_result(accuracy: float) -> RunResult:
    """A finished run's result as the trainer gives it, one epoch."""
    return run_result({"val_accuracy": accuracy, "test_accuracy": accuracy},
                      {"val": {"0": accuracy}, "test": {"0": accuracy}},
                      epoch_train_loss=[1.0], epoch_val_accuracy=[accuracy])


def check_writes_after_a_takeover_change_nothing(store: Store) -> None:
    """Every write of the Store, given a lock another process has taken over since the holder's last look,
    raises LockLost in its own transaction and leaves the study's records as they were."""
    study = stored(store)
    lock = store.lock_study(study)
    row = store.start_trial(study.id, 0, {"alpha": 0.1}, 0, 0.1, lock=lock)
    store.complete_trial(row, one_epoch_result(0.5), lock=lock)  # held: written
    running = store.start_trial(study.id, 1, {"alpha": 0.2}, 0, 0.1, lock=lock)
    with store.engine.begin() as connection:  # taken over between the holder's last check and its write
        connection.execute(study_locks.update().values(token="another", pid=4321, host="elsewhere"))
    assert lock.lost is None  # its heartbeat has not noticed: the write's own transaction must
    before = [(t.trial_index, t.status, t.metrics, t.epochs) for t in store.trials(study.id)]
    writes = [lambda: store.complete_trial(running, one_epoch_result(0.9), lock=lock),
              lambda: store.fail_trial(running, "TrainingDiverged", lock=lock),
              lambda: store.interrupt_trial(running, "stopped", lock=lock),
              lambda: store.interrupt_running_trials(study.id, "stopped", lock=lock),
              lambda: store.start_trial(study.id, 2, {"alpha": 0.3}, 0, 0.1, lock=lock),
              lambda: store.add_evaluation(study.id, "tuned", 0, 0, {}, one_epoch_result(0.9), {"0": 1}, lock=lock)]
    for write in writes:
        with pytest.raises(LockLost, match="lost the lock of study held: process 4321 on host elsewhere took it over"):
            write()
    assert [(t.trial_index, t.status, t.metrics, t.epochs) for t in store.trials(study.id)] == before
    assert before[1][:2] == (1, "running") and store.evaluations(study.id) == []
    lock.release()
    with store.engine.connect() as connection:  # the new holder's row stays, its heartbeat untouched
        assert [(row.token, row.pid) for row in connection.execute(study_locks.select())] == [("another", 4321)]


EVERY_METHOD = [*PARTS, "gils+pgd", "mixup+hws", "mixup+ls"]  # mixup+ls: mixed targets smoothed as eq. 3


FEWER_STEPS = {"gils": "T=1", "pgd": "pgd_steps=2", "pgdl2": "pgdl2_steps=2", "cw": "cw_steps=2"}  # keep tests small


def evaluations(db: Path) -> list[tuple]:
    """The stored evaluation rows; none while the table does not exist."""
    try:
        return sqlite3.connect(db).execute(
            "select id, variant, seed, metrics from rt_evaluations order by id").fetchall()
    except sqlite3.OperationalError:
        return []


PREFIXES_STUDY = """
name = "{name}"
objective = "val_balanced_accuracy"
[data]
name = "digits"
[method]
name = "erm"
[params]
epochs = {{ low = 1, high = 4 }}
lr_head = {{ low = 0.001, high = 0.2, log = true }}
lr_backbone = 0.05
momentum = 0.0
[search]
epoch_prefixes = {prefixes}
[budget]
trials = {trials}
initial = 3
early_stopping = "{stopping}"
early_stopping_min_epochs = 1
"""


def prefixes_study_file(tmp_path: Path, name: str = "pf", prefixes: str = "true", stopping: str = "off",
                        trials: int = 4) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(PREFIXES_STUDY.format(name=name, prefixes=prefixes, stopping=stopping, trials=trials))
    return path


def parsed(html: str) -> dict:
    """The page's images (src, data-decoded), table captions, contents links and element ids."""
    from html.parser import HTMLParser

    found: dict = {"images": [], "captions": [], "links": [], "ids": set(), "body": {}}

    class Reader(HTMLParser):
        caption = False

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            found["ids"].add(attrs.get("id"))
            if tag == "img":
                found["images"].append(attrs)
            elif tag == "a":
                found["links"].append(attrs["href"])
            elif tag == "body":
                found["body"] = attrs
            self.caption = tag == "caption"

        def handle_data(self, data):
            if self.caption:
                found["captions"].append(data)
                self.caption = False

    Reader().feed(html)
    return found


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


# Run in the page after it loaded: each image's decoded width (0 when it failed) and how many there are.
PROBE = ("<script>window.addEventListener('load', () => { for (const img of document.images) "
         "img.setAttribute('data-decoded', String(img.complete ? img.naturalWidth : 0)); "
         "document.body.setAttribute('data-images', String(document.images.length)); });</script>")


def rendered(page: Path, folder: Path) -> dict:
    """The page's DOM as headless Chromium renders it, with PROBE's marks."""
    probe = folder / f"probe-{page.name}"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return parsed(done.stdout)


# Run in a page shown in a frame: how wide its document is against its window, and which elements outside a
# table's own scrolling box (and which table captions) reach past the window's right edge; written on the frame's
# parent, which --dump-dom prints.
WIDTH_PROBE = ("<script>window.addEventListener('load', () => { const d = document.documentElement; const wide = [];"
               "for (const e of document.body.querySelectorAll('*')) { const r = e.getBoundingClientRect();"
               " if (r.right > d.clientWidth + 1 && (!e.closest('.scroll') || e.tagName === 'CAPTION'))"
               " wide.push(e.tagName + ' ' + (e.textContent || '').slice(0, 40)); }"
               "parent.document.body.setAttribute('data-width', JSON.stringify({scroll: d.scrollWidth,"
               " window: d.clientWidth, wide: wide})); });</script>")


def in_a_window(page: Path, folder: Path, width: int) -> dict:
    """The page in headless Chromium in a window `width` CSS pixels wide (a frame of that width: headless Chromium
    makes no window narrower than 500), as WIDTH_PROBE measures it; a screenshot of it is left in `folder`."""
    import html
    import json
    import re

    framed = folder / f"{page.stem}-{width}.html"
    text = page.read_text().replace("</body>", WIDTH_PROBE + "</body>")
    framed.write_text(f'<!DOCTYPE html><html><body style="margin:0"><iframe style="border:0;width:{width}px;'
                      f'height:4000px" srcdoc="{html.escape(text, quote=True)}"></iframe></body></html>')
    window = [f"--window-size={max(width, 500)},4000"]
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *window,
                           "--virtual-time-budget=10000", "--dump-dom", framed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    shot = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *window,
                           f"--screenshot={folder / f'{page.stem}-{width}.png'}", framed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and (folder / f"{page.stem}-{width}.png").stat().st_size > 1000, shot.stderr[-2000:]
    (found,) = re.findall(r'<body[^>]*data-width="([^"]*)"', done.stdout)
    return json.loads(html.unescape(found))


TWO_TASKS = """
name = "pair"
objective = "val_balanced_accuracy"
methods = ["cb"]
replicates = 1

[data]
name = "digits"
imbalance_keep = 0.1
imbalance_in = "train"

[tasks.rare3.data]
imbalance_class = "3"

[tasks.rare8.data]
imbalance_class = "8"

[params]
epochs = 1
lr_head = { low = 0.01, high = 0.2, log = true }

[budget]
trials = 2
initial = 2

[evaluate]
seeds = 2
max_seeds = 2
"""


def write_folder(root, classes=("a", "b"), per_class=6, side=24):
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(root / name / f"{i}.png")


def completed_trials(db: Path, name: str) -> list[tuple[dict, dict]]:
    """The parameters and metrics (less the clock's) of a study's completed trials, in trial order."""
    store = Store(str(db))
    return [(t.parameters, {k: v for k, v in t.metrics.items() if k != "train_seconds"})
            for t in store.trials(store.require_study(name).id) if t.status == "completed"]


# Run in a page shown in a frame: per table, the headers in view with its box scrolled to the left, and whether its
# first column is still in view with the box scrolled to the far right; per picture, the share of its own width it is
# shown at; written on the frame's parent, which --dump-dom prints.
SEEN_PROBE = ("<script>window.addEventListener('load', () => { const w = document.documentElement.clientWidth;"
              "const inside = (e) => { const r = e.getBoundingClientRect(); return r.left >= -1 && r.right <= w + 1; };"
              "const out = {tables: [], images: []};"
              "for (const t of document.querySelectorAll('table')) { const box = t.closest('.scroll');"
              " const seen = [...t.rows[0].cells].filter(inside).map((c) => c.textContent);"
              " if (box) box.scrollLeft = box.scrollWidth;"
              " const first = [...t.rows].every((row) => inside(row.cells[0])); if (box) box.scrollLeft = 0;"
              " out.tables.push({caption: t.caption ? t.caption.textContent : '', seen: seen, first: first}); }"
              "for (const img of document.images)"
              " out.images.push(img.getBoundingClientRect().width / img.naturalWidth);"
              "parent.document.body.setAttribute('data-seen', JSON.stringify(out)); });</script>")


def seen_in_a_window(page: Path, folder: Path, width: int) -> dict:
    """What a reader sees of the page in headless Chromium in a window `width` CSS pixels wide (SEEN_PROBE: each
    table's headers in view and whether its first column stays in view, each picture's shown share of its width),
    shown in a frame of that width as `in_a_window` shows it."""
    import html
    import json
    import re

    framed = folder / f"{page.stem}-seen-{width}.html"
    text = page.read_text().replace("</body>", SEEN_PROBE + "</body>")
    framed.write_text(f'<!DOCTYPE html><html><body style="margin:0"><iframe style="border:0;width:{width}px;'
                      f'height:4000px" srcdoc="{html.escape(text, quote=True)}"></iframe></body></html>')
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--window-size={max(width, 500)},4000", "--virtual-time-budget=10000", "--dump-dom",
                           framed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = re.findall(r'<body[^>]*data-seen="([^"]*)"', done.stdout)
    return json.loads(html.unescape(found))
