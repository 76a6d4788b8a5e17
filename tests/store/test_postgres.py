"""Studies on a real PostgreSQL server (a throwaway cluster, see conftest): run, kill, resume, report,
evaluate, delete; a study is created whole or not at all; bad URLs and a missing driver are one line."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from conftest import free_port
from pipeline.errors import UserError
from pipeline.store import Store, database_url
from pipeline.search.study import run_study
from pipeline.spec.study_config import load_study
from helpers import ROBUST_TUNE, default_sigint, study_file

FAST = 'epochs = 1\nperturb = "feature"\nT = { low = 1, high = 3 }'


def rows(url: str, sql: str) -> list[tuple]:
    engine = sa.create_engine(database_url(url))
    try:
        with engine.connect() as connection:
            return [tuple(r) for r in connection.execute(sa.text(sql))]
    finally:
        engine.dispose()


def ax_records(url: str) -> tuple[int, int, int]:
    """How many experiments, generation strategies and trials Ax stores."""
    return rows(url, "select (select count(*) from experiment_v2), (select count(*) from generation_strategy), "
                     "(select count(*) from trial_v2)")[0]


def ax_trials(study, url: str, log) -> dict[int, tuple[str, dict, float | None]]:
    """Ax's stored trials: index -> (status, parameters, the objective Ax was told)."""
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(log)
    from pipeline.search.ax import Searcher

    searcher = Searcher(study, Store(url).url)
    data = searcher.client._experiment.lookup_data().df
    told = {int(i): float(m) for i, m in zip(data["trial_index"], data["mean"])}
    return {i: (searcher.status(i), searcher.parameters(i), told.get(i))
            for i in range(len(searcher.client._experiment.trials))}


def start_run(path, url: str, log, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([ROBUST_TUNE, "run", str(path), "--db", url, "--device", "cpu", "--log-file", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})}, preexec_fn=default_sigint)


def test_a_study_runs_reports_evaluates_and_is_deleted_on_postgresql(tmp_path, cli, postgres_url):
    path, log = study_file(tmp_path, "shared", params=FAST), tmp_path / "ax.log"
    code, out, err = cli("run", str(path), "--db", postgres_url, "--device", "cpu", "--log-file", str(log))
    assert code == 0, err
    assert "3 trial(s) completed" in out and "Traceback" not in err
    trials = rows(postgres_url, "select trial_index, status, metrics from rt_trials order by trial_index")
    assert [(i, status) for i, status, _ in trials] == [(0, "completed"), (1, "completed"), (2, "completed")]
    ax = ax_trials(load_study(path), postgres_url, log)
    assert [status for status, _, _ in ax.values()] == ["completed"] * 3
    assert [told for _, _, told in ax.values()] == pytest.approx([m["val_accuracy"] for _, _, m in trials], abs=1e-9)

    code, out, _ = cli("run", str(path), "--db", postgres_url, "--log-file", str(log))
    assert code == 0 and "already has its 3 trials" in out
    code, out, _ = cli("report", "--db", postgres_url, "--format", "json", "--all-trials")
    best, *_, listing = json.loads(out)
    assert best["rows"][0]["study"] == "shared" and len(listing["rows"]) == 3
    code, out, _ = cli("studies", "--db", postgres_url)
    assert code == 0 and "shared" in out and "3 of 3" in out
    assert sa.engine.make_url(postgres_url).password not in out  # the password is never shown
    code, _, err = cli("report", "--db", postgres_url, "--plots", str(tmp_path / "pictures"))
    assert code == 0, err
    assert (tmp_path / "pictures" / "shared-map-alpha-T.png").is_file()  # the GP, loaded from Ax's records
    code, _, err = cli("evaluate", "shared", "--db", postgres_url, "--seeds", "1", "--device", "cpu")
    assert code == 0, err
    assert rows(postgres_url, "select variant, seed from rt_evaluations") == [("tuned", 0)]

    code, out, err = cli("studies", "delete", "shared", "--db", postgres_url, "--yes", "--log-file", str(log))
    assert code == 0 and "deleted study shared and its 3 trial(s)" in out, err
    assert rows(postgres_url, "select (select count(*) from rt_studies), (select count(*) from rt_trials), "
                              "(select count(*) from rt_evaluations)") == [(0, 0, 0)]
    assert ax_records(postgres_url) == (0, 0, 0)


def test_a_kill_mid_trial_on_postgresql_then_resume_completes_the_budget_with_nothing_lost(tmp_path, postgres_url):
    path, log = study_file(tmp_path, "killed", params=FAST.replace("epochs = 1", "epochs = 3"), trials=2), \
        tmp_path / "ax.log"
    process = start_run(path, postgres_url, log)
    while not rows(postgres_url, "select 1 from pg_tables where tablename = 'rt_trials'") or \
            not rows(postgres_url, "select 1 from rt_trials where status = 'running'"):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    (parameters,), = rows(postgres_url, "select parameters from rt_trials")
    assert rows(postgres_url, "select pid from rt_study_locks") == [(process.pid,)]  # left by the dead holder

    study = load_study(path)
    summary = run_study(study, postgres_url, "cpu", log_file=log)
    assert summary.completed == 2
    stored = rows(postgres_url, "select trial_index, status, parameters, metrics from rt_trials order by trial_index")
    assert [(i, status) for i, status, _, _ in stored] == [(0, "interrupted"), (1, "completed"), (2, "completed")]
    assert stored[1][2] == parameters  # the interrupted configuration ran again, once, before anything new
    ax = ax_trials(study, postgres_url, log)
    assert [status for status, _, _ in ax.values()] == ["failed", "completed", "completed"]
    assert [ax[i][2] for i in (1, 2)] == pytest.approx([stored[i][3]["val_accuracy"] for i in (1, 2)], abs=1e-9)
    assert rows(postgres_url, "select * from rt_study_locks") == []


def test_a_write_with_a_lock_another_process_took_over_changes_nothing_on_postgresql(postgres_url):
    from helpers import check_writes_after_a_takeover_change_nothing

    check_writes_after_a_takeover_change_nothing(Store(postgres_url))


def test_taking_over_a_lock_whose_row_a_paused_transaction_keeps_locked_is_one_line_on_postgresql(postgres_url,
                                                                                                  monkeypatch):
    """A holder paused in the middle of a write keeps its lock row locked: the takeover waits a bounded time and
    says so in one line naming the holder, where without a bound it would wait as long as the pause."""
    import datetime as dt

    from pipeline.store import DatabaseBusy, study_locks
    from pipeline.store import lock as lock_module
    from helpers import stored

    monkeypatch.setattr(lock_module, "LOCK_WAIT_MS", 300)
    store = Store(postgres_url)
    study = stored(store)
    seen = lock_module.now() - dt.timedelta(minutes=10)
    with store.engine.begin() as connection:
        connection.execute(study_locks.insert().values(study_id=study.id, token="paused", pid=4321, host="elsewhere",
                                                       heartbeat_at=seen))
    paused = store.engine.connect()  # the holder's write transaction, left open
    paused.execute(study_locks.update().values(heartbeat_at=seen))
    try:
        with pytest.raises(DatabaseBusy, match=r"^study held could not take its lock: the database server .* is "
                                               r"busy, .* held by process 4321 on host elsewhere, last seen \d+ s ago"):
            store.lock_study(study)
    finally:
        paused.rollback()
        paused.close()
    store.lock_study(study).release()  # once the pause ends, the stale lock is taken over


def test_failing_trials_on_postgresql_are_stored_with_their_error_and_stop_the_study(tmp_path, postgres_url):
    params = 'epochs = 1\nlr_head = { values = [1e37, 1e38] }'  # the loss overflows: a real divergence
    study = load_study(study_file(tmp_path, "doomed", "erm", params, trials=5, max_failures=2))
    summary = run_study(study, postgres_url, "cpu", log_file=tmp_path / "ax.log")
    assert (summary.completed, summary.failed) == (0, 2) and "2 trials failed in a row" in summary.stopped
    stored = rows(postgres_url, "select status, error from rt_trials order by trial_index")
    assert [status for status, _ in stored] == ["failed", "failed"]
    assert all("TrainingDiverged" in error for _, error in stored)
    ax = ax_trials(study, postgres_url, tmp_path / "ax.log")
    assert [status for status, _, _ in ax.values()] == ["abandoned", "abandoned"]


def test_a_failure_while_creating_a_study_on_postgresql_leaves_nothing(tmp_path, postgres_url):
    path, log = study_file(tmp_path, "taken", params=FAST, trials=1), tmp_path / "ax.log"
    study = load_study(path)
    from pipeline.library_logs import quiet_libraries

    quiet_libraries(log)
    from pipeline.search.ax import new_client, use_database

    use_database(Store(postgres_url).url)
    new_client(study, Store(postgres_url).url)  # Ax used on its own, in the same database, under the same name
    with pytest.raises(UserError, match="already holds an Ax experiment named 'taken' that is no robust-tune study"):
        run_study(study, postgres_url, "cpu", log_file=log)  # fails after the study row was written
    assert rows(postgres_url, "select * from rt_studies") == []  # ... in the transaction that was rolled back
    assert ax_records(postgres_url) == (1, 1, 0)  # Ax's own experiment is left as it was


def test_bad_postgresql_urls_and_a_missing_driver_are_one_line_and_exit_2(tmp_path, cli, postgres_server,
                                                                           monkeypatch):
    path = study_file(tmp_path, params=FAST)
    cases = {
        postgres_server.url("postgres", port=free_port()): "Connection refused",
        postgres_server.url("postgres", password="wrong"): "password authentication failed",
        postgres_server.url("nosuch"): 'database "nosuch" does not exist',
    }
    for url, reason in cases.items():
        for args in (["studies"], ["report"], ["run", str(path), "--device", "cpu"]):
            code, out, err = cli(*args, "--db", url)
            assert code == 2 and "Traceback" not in err and err.strip().count("\n") == 0, (args, url, err)
            assert err.startswith("error: cannot open database postgresql+psycopg://postgres:***@127.0.0.1:")
            assert reason in err and postgres_server.password not in err

    monkeypatch.setitem(sys.modules, "psycopg", None)  # importing psycopg now fails, as when it is not installed
    code, _, err = cli("studies", "--db", postgres_server.url("postgres"))
    assert code == 2 and err.strip().count("\n") == 0
    assert "PostgreSQL's driver is not installed; install it with: pip install 'robust-tune[postgres]'" in err
