"""`compare --workers`: every study of a campaign searched at once on one Dask cluster, and each look's re-training
runs trained together (real Ax, real PyTorch, a real LocalCluster, real SQLite, real processes), killed and
resumed without a lost or duplicated trial or run."""
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from pipeline.compare.campaign import CampaignTogether, run_campaign
from pipeline.compare.evaluate import RunEnded
from pipeline.compare.verdict import take_verdict
from pipeline.search.parallel import trial_runner, usable_cores
from pipeline.search.study import TrialEnded
from pipeline.search.studies import StudiesStarted
from pipeline.search.trial import TrialRunning
from pipeline.spec.campaign_config import load_campaign
from pipeline.store import Store
from helpers import ROBUST_TUNE, TWO_TASKS, default_sigint, rows

DUO = TWO_TASKS.replace('name = "pair"', 'name = "duo"').replace(
    '[tasks.rare3.data]\nimbalance_class = "3"\n\n[tasks.rare8.data]\nimbalance_class = "8"\n', "").replace(
    'imbalance_keep = 0.1', 'imbalance_class = "3"\nimbalance_keep = 0.1')


def test_two_workers_search_both_studies_at_once_and_reach_the_sequential_verdicts_structure(tmp_path):
    path = tmp_path / "duo.toml"
    path.write_text(DUO)
    campaign, log = load_campaign(path), str(tmp_path / "ax.log")
    events: list = []
    summary = run_campaign(campaign, str(tmp_path / "workers.db"), "cpu", events.append,
                           lambda: trial_runner(2, None, 1, "cpu", log), log_file=log, threads=1)
    alone = run_campaign(campaign, str(tmp_path / "alone.db"), "cpu", log_file=log, threads=1)

    assert (summary.trials_run, summary.runs_trained) == (alone.trials_run, alone.runs_trained) == (4, 4)
    stages = [e for e in events if isinstance(e, CampaignTogether)]
    assert [(e.stage, e.studies) for e in stages] == [("search", ("duo.erm", "duo.cb")),
                                                      ("re-train", ("duo.erm", "duo.cb"))]
    assert [e.capacity for e in events if isinstance(e, StudiesStarted)] == [2]
    # both studies' trials in flight at once: a study's trial starts on a worker before the other's last one ends
    last_end = {study: max(i for i, e in enumerate(events) if isinstance(e, TrialEnded) and e.study == study)
                for study in ("duo.erm", "duo.cb")}
    first_running = {study: min(i for i, e in enumerate(events) if isinstance(e, TrialRunning) and e.study == study)
                     for study in ("duo.erm", "duo.cb")}
    assert first_running["duo.cb"] < last_end["duo.erm"] and first_running["duo.erm"] < last_end["duo.cb"]
    assert {e.study for e in events if isinstance(e, RunEnded)} == {"duo.erm", "duo.cb"}

    for db in ("workers.db", "alone.db"):  # each trial and run stored once
        assert rows(tmp_path / db, "select s.name, count(*), count(distinct t.trial_index) from rt_trials t join "
                                   "rt_studies s on s.id = t.study_id where t.status = 'completed' group by s.name "
                                   "order by s.name") == [("duo.cb", 2, 2), ("duo.erm", 2, 2)]
        assert rows(tmp_path / db, "select count(*), count(distinct study_id || '-' || variant || '-' || seed) "
                                   "from rt_evaluations") == [(4, 4)]
    verdicts = [take_verdict(store, store.require_campaign("duo"))
                for store in (Store(str(tmp_path / "workers.db")), Store(str(tmp_path / "alone.db")))]
    assert [sorted((key, c.pairs) for key, c in v.cells.items()) for v in verdicts] == [
        sorted((key, c.pairs) for key, c in verdicts[1].cells.items())] * 2
    assert [[m.method for m in v.methods] for v in verdicts] == [["erm", "cb"]] * 2


def compare(path: Path, db: Path, kill_at: str | None) -> subprocess.CompletedProcess:
    """`compare` as a user types it, on its default workers (one per core), in its own process group, killed at
    `kill_at`; its worker processes, orphaned by a kill, are killed with it."""
    env = {**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1", "ROBUST_TUNE_WORKERS": "",
           **({"ROBUST_TUNE_KILL_AT": kill_at} if kill_at else {})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:  # files: no pipe to fill
        process = subprocess.Popen([ROBUST_TUNE, "compare", str(path), "--db", str(db), "--device", "cpu",
                                    "--log-file", str(db.with_suffix(".log"))], stdout=out,
                                   stderr=err, text=True, start_new_session=True, env=env, preexec_fn=default_sigint)
        try:
            process.wait(timeout=300)
        finally:  # its orphaned workers go at once, before their next heartbeat finds the scheduler gone and logs it
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(process.args, process.returncode, out.read(), err.read())


@pytest.mark.skipif(usable_cores() < 2, reason="the default is one worker per core")
def test_a_campaign_on_its_default_workers_killed_in_its_searches_and_in_its_re_training_resumes_without_a_duplicate(
        tmp_path):
    path, db = tmp_path / "pair.toml", tmp_path / "c.db"
    path.write_text(TWO_TASKS)
    done = [compare(path, db, kill_at) for kill_at in ("after-tell", "after-evaluation-1", None)]
    assert [d.returncode for d in done] == [-9, -9, 0], done[-1].stderr
    assert not any("Traceback" in d.stderr for d in done)
    assert "search 4 studies at once" in done[0].stderr  # both tasks' studies together
    assert rows(db, "select count(*) from rt_trials where status = 'running'") == [(0,)]
    assert rows(db, "select s.name, count(*) from rt_trials t join rt_studies s on s.id = t.study_id "
                    "where t.status = 'completed' group by s.name order by s.name") == [
        ("pair.rare3.cb", 2), ("pair.rare3.erm", 2), ("pair.rare8.cb", 2), ("pair.rare8.erm", 2)]
    assert rows(db, "select count(*), count(distinct study_id || '-' || trial_index) from rt_trials") == \
        rows(db, "select count(*), count(*) from rt_trials")
    completed = rows(db, "select study_id, parameters from rt_trials where status = 'completed'")
    assert len(set(completed)) == 8  # no configuration trained twice in a study
    assert rows(db, "select count(*), count(distinct study_id || '-' || variant || '-' || seed) from rt_evaluations") \
        == [(8, 8)]
    assert rows(db, "select count(*) from rt_campaign_locks") == [(0,)]
    assert rows(db, "select count(*) from rt_study_locks") == [(0,)]
    assert "Verdict of campaign pair.rare3" in done[-1].stdout and "Verdict of campaign pair.rare8" in done[-1].stdout
    assert max(len(line) for line in done[-1].stdout.splitlines()) <= 80


def test_the_live_view_of_studies_searched_at_once_has_a_stage_line_and_a_line_per_running_study_in_80_columns():
    import io

    from rich.console import Console

    from cli.campaign import CampaignView
    from cli.interrupts import CtrlC
    from pipeline.search.studies import StudyFinished
    from pipeline.search.study import StudyStarted, StudySummary, TrialStarted
    from pipeline.search.trial import TrialEpoch

    names = tuple(f"digits-campaign-with-a-long-name.task-{i}.groupdro" for i in range(6))
    view, console = CampaignView(CtrlC()), Console(file=io.StringIO(), width=80, force_terminal=False)
    for event in (CampaignTogether("search", names, 2), StudiesStarted(names, 3)):
        view.on_event(event)
    for number, name in enumerate(names):
        view.on_event(StudyStarted(name, 0, 8, False, []))
        if number < 3:
            view.on_event(TrialStarted(number, 1, 8, {"lr_head": 0.05, "beta": 12.5}, name))
            view.on_event(TrialRunning(number, "1", name))
    view.on_event(TrialEpoch(1, 3, 20, names[1]))
    view.on_event(StudyFinished(StudySummary(names[5], 0, 0, 8)))
    console.print(view)
    shown = console.file.getvalue().splitlines()
    assert shown[0] == "searching 5 studies at once (3 running trials)"
    assert len(shown) == 4 and all(len(line) <= 80 for line in shown)
    assert shown[1].startswith(f"  {names[0]}: 0/8 ran; trial 0") and "trial 1 epoch 3/20" in shown[2]
